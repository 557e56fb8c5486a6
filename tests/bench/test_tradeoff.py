"""bench.tradeoff's reading of a budget: which static preset is the fastest within it."""

from bench.tradeoff import best_static
from controller.fresh_windows import FreshMeasurement


def test_the_best_static_preset_is_the_fastest_that_keeps_up_within_every_limit():
    presets = {"defaults": FreshMeasurement(3.7, 1.0, 3.0, {"filebeat": 0.04, "logstash": 0.38}),
               "latency": FreshMeasurement(0.9, 1.0, 0.5, {"filebeat": 0.30, "logstash": 0.50}),
               "throughput": FreshMeasurement(2.5, 1.0, 2.0, {"filebeat": 0.05, "logstash": 0.40}),
               "fast_but_behind": FreshMeasurement(0.1, 0.5, 0.1, {"filebeat": 0.01, "logstash": 0.10})}
    true_cpu = {name: m.cpu_cores for name, m in presets.items()}
    assert best_static(presets, true_cpu, {"filebeat": 0.1, "logstash": 0.45}) == ("throughput", 2.5)
    assert best_static(presets, true_cpu, {}) == ("latency", 0.9)  # unbounded
    assert best_static(presets, true_cpu, {"filebeat": 0.01}) == ("–", float("inf"))  # none within it
    # within or not is the CPU without jitter's: a reading a hair over the limit does not rule a preset out
    jittered = presets | {"throughput": FreshMeasurement(2.5, 1.0, 2.0, {"filebeat": 0.11, "logstash": 0.40})}
    assert best_static(jittered, true_cpu, {"filebeat": 0.1, "logstash": 0.45}) == ("throughput", 2.5)
