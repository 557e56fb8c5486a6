from models.twin import Twin, steady_arrivals, load
from models.presets import preset
from models.verdict import judge, buffered_events
from models.policy import Policy
from bench.tuners import misjudged
cal = misjudged(load("paper-2vcpu"), 2); rate = 843.2564172389104 * 1.2
for ch in ({}, {"spark.trigger.interval": 3.736}, {"spark.trigger.interval": 15.99}, {"spark.trigger.interval": 34.0},
           {"logstash.pipeline.batch.size": 4525, "logstash.pipeline.batch.delay": 770.0}, {"logstash.pipeline.batch.size": 4}, {"filebeat.backoff": 0.01, "filebeat.queue.mem.flush.min_events": 31}):
    c = {**preset("defaults"), **ch}
    tw = Twin(c, steady_arrivals(rate, 40.0), cal, seed=0)
    tw.run_until(40.0)
    a = tw.observe(0.0, 20.0); b = tw.observe(20.0, 40.0)
    v = judge(b, Policy(), c, a)
    print(ch, f"ratio {b.throughput_ratio:.3f} backlog {a.backlog_total}->{b.backlog_total} buf {buffered_events(c, rate):.0f}", v.messages)
