"""bench.tradeoff's reading of a budget: which static preset is the fastest within it."""

import bench.tradeoff
from bench.tradeoff import best_static
from controller.fresh_windows import FreshMeasurement
from models.budget import CpuBudget
from models.presets import PRESETS
from models.twin import load


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


def test_a_budgets_row_sets_pipetune_beside_the_oracle_and_the_best_static_preset_within_it(ray_session, monkeypatch):
    monkeypatch.setattr(bench.tradeoff, "BUDGETS", {"default": CpuBudget()})
    monkeypatch.setattr(bench.tradeoff, "STRATEGIES", ("pipetune",))
    (row,) = bench.tradeoff.budget_rows("paper-2vcpu", load("paper-2vcpu"), seeds=1, windows=4, window_s=30.0,
                                        oracle_samples=2)
    assert row["budget"] == "default" and row["best_static"] in PRESETS
    assert 0 < row["oracle_p95_s"] < float("inf") and 0 < row["pipetune_p95_s"] < float("inf")
    assert set(row["limits_cores"]) >= {"filebeat", "logstash"} and row["pipetune_over_after_5"] >= 0
