import sys, time, json
from models.twin import load
from models.screen import TwinScreen
from models.presets import preset
from bench.tuners import misjudged, capacity_eps, noise_free
cal = load("local-filebeat-kafka")
rate = 6869.65
base = preset("defaults")
good = dict(base); good.update({"filebeat.scan_frequency": 24.45, "filebeat.backoff": 0.001094, "filebeat.max_backoff": 5.04, "filebeat.queue.mem.flush.min_events": 37, "filebeat.queue.mem.flush.timeout": 35.6, "filebeat.output.bulk_max_size": 22, "kafka.consumer.fetch.max.wait.ms": 19.0})
inc0 = dict(base); inc0.update({"filebeat.scan_frequency": 0.093887, "filebeat.backoff": 0.046747, "filebeat.max_backoff": 10.0, "filebeat.queue.mem.flush.min_events": 2048, "filebeat.queue.mem.flush.timeout": 0.745143, "filebeat.output.bulk_max_size": 1133, "kafka.consumer.fetch.max.wait.ms": 68.0})
mid = dict(inc0); mid.update({"filebeat.queue.mem.flush.min_events": 200})
mid2 = dict(inc0); mid2.update({"filebeat.queue.mem.flush.min_events": 37, "filebeat.output.bulk_max_size": 22})
orc = dict(base); orc.update({"filebeat.scan_frequency": 3.4887, "filebeat.backoff": 0.001, "filebeat.max_backoff": 0.3022, "filebeat.queue.mem.flush.min_events": 13, "filebeat.queue.mem.flush.timeout": 3.3548, "filebeat.output.bulk_max_size": 19, "kafka.consumer.fetch.max.wait.ms": 6.0})
configs = {"oracle": orc, "defaults": base, "inc0": inc0, "inc0-min200": mid, "inc0-min37-bulk22": mid2, "good": good}
for name, c in configs.items():
    row = []
    for label, calib in [("truth", noise_free(cal)), ("mis0", misjudged(cal, 0)), ("mis1", misjudged(cal, 1)), ("mis2", misjudged(cal, 2))]:
        for h in (1.0, 1.2):
            t = time.time()
            r = TwinScreen(calib, headroom=h).ratio(c, rate)
            row.append(f"{label}@{h}={r:.3f}")
    print(name, " ".join(row), flush=True)
