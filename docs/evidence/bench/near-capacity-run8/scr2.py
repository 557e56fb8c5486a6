from models.twin import Twin, steady_arrivals, load
from models.presets import preset
from models.verdict import buffered_events
from bench.tuners import misjudged
for name, cal, rate in (("mis2", misjudged(load("paper-2vcpu"), 2), 843.26*1.2), ("exact", load("paper-2vcpu"), 843.26*1.2), ("exact300", load("paper-2vcpu"), 360.0), ("fk300", load("local-filebeat-kafka"), 360.0)):
  for ch in ({}, {"spark.trigger.interval": 3.736}, {"spark.trigger.interval": 15.99}, {"spark.trigger.interval": 34.0},
           {"logstash.pipeline.batch.size": 4525, "logstash.pipeline.batch.delay": 770.0}, {"logstash.pipeline.batch.size": 4}, {"filebeat.backoff": 0.01, "filebeat.queue.mem.flush.min_events": 31}):
    if name == "fk300" and any(k.startswith(("spark", "logstash")) for k in ch): continue
    c = {**preset("defaults"), **ch}
    tw = Twin(c, steady_arrivals(rate, 40.0), cal, seed=0)
    tw.run_until(40.0)
    w = tw.observe(0.0, 40.0); b = tw.observe(20.0, 40.0)
    cum = min(1.0, (w.events_out + min(w.backlog_total, buffered_events(c, rate))) / max(w.events_in, 1))
    print(name, ch, f"window {b.throughput_ratio:.3f} cum {cum:.3f} in {w.events_in} out {w.events_out} backlog {w.backlog_total}")
