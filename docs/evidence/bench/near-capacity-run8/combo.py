from bench.tuners import noise_free
from controller.fresh_windows import measure_fresh
from models.presets import preset
from models.twin import load
cal = load("paper-2vcpu"); rate = 843.2564172389104; nf = noise_free(cal)
d = preset("defaults")
combos = {
 "bo": {"filebeat.backoff": 0.01},
 "bo+fme": {"filebeat.backoff": 0.01, "filebeat.queue.mem.flush.min_events": 31},
 "bo+fme+ft": {"filebeat.backoff": 0.01, "filebeat.queue.mem.flush.min_events": 31, "filebeat.queue.mem.flush.timeout": 0.01},
 "bo+ft": {"filebeat.backoff": 0.01, "filebeat.queue.mem.flush.timeout": 0.01},
 "bo+fme+ft+bs": {"filebeat.backoff": 0.01, "filebeat.queue.mem.flush.min_events": 31, "filebeat.queue.mem.flush.timeout": 0.01, "logstash.pipeline.batch.size": 10},
 "bo+fme+bs": {"filebeat.backoff": 0.01, "filebeat.queue.mem.flush.min_events": 31, "logstash.pipeline.batch.size": 10},
 "bo.1+fme1": {"filebeat.backoff": 0.1, "filebeat.queue.mem.flush.min_events": 1},
 "bo.001+fme1+bs20": {"filebeat.backoff": 0.001, "filebeat.queue.mem.flush.min_events": 1, "logstash.pipeline.batch.size": 20},
 "fme1+bs20": {"filebeat.queue.mem.flush.min_events": 1, "logstash.pipeline.batch.size": 20},
 "bo+bs20": {"filebeat.backoff": 0.01, "logstash.pipeline.batch.size": 20},
}
for k, ch in combos.items():
    m = measure_fresh({**d, **ch}, nf, rate, 30.0)
    print(k, f"{m.p95_s:.3f} {m.throughput_ratio:.3f}", flush=True)
