"""`pipetune scenarios --pipeline` on real components: two scenarios put in force through the session testbed's agents,
nginx driven by the replay's HTTP mode, each run's window read from its Prometheus; the figures come back per scenario
and the comparison table prints. The session testbed has no Spark job scraped by its Prometheus (the session's one
Spark job, `warehouse`, is not started here: one per session), so its latency is the probe's, to Kafka; the paper
testbed's run to the table is docs/evidence/scenarios-real."""

from __future__ import annotations

import math

import pytest
from rich.console import Console

from cli.scenarios import real_table, real_verdict
from models.scenario_study import twin_beside_real
from models.twin import load
from replay.profiles import WorkloadSpec, build_schedule
from testbed import lifecycle, processes
from testbed.scenarios import RealSettings, nginx_url, study

RATE_EPS = 100.0
DURATION_S = 12.0  # the figures are printed, never asserted: brief runs are enough to check they come back


def test_settings_name_the_field_and_the_allowed_range():
    with pytest.raises(ValueError, match=r"rate_eps: 0, allowed \(0, 5000\]"):
        RealSettings(0.0, 10.0, 2.0)
    with pytest.raises(ValueError, match="warmup_s: 10, allowed 0 to duration_s"):
        RealSettings(100.0, 10.0, 10.0)


def test_a_pipeline_without_nginx_is_named(make_pipeline, tmp_path):
    from testbed.pipeline import load_pipeline

    with pytest.raises(processes.TestbedError, match="no nginx in front"):
        nginx_url(load_pipeline(make_pipeline(tmp_path, "plain")))


def _twin(rate_eps: float, configs: dict) -> dict:
    def arrivals(rate: float, seed: int):
        return build_schedule(WorkloadSpec(rate_eps=rate, duration_s=DURATION_S, seed=seed,
                                           poisson=True)).schedule.times_s

    return twin_beside_real(load("paper-2vcpu"), configs, arrivals, rate_eps=rate_eps, duration_s=DURATION_S, reps=1)


@pytest.mark.slow
def test_two_scenarios_run_for_real_and_the_table_prints(testbed, nginx):  # noqa: F811
    said: list[str] = []
    try:
        doc = study(testbed, ["baseline", "zero-wait"], [(RATE_EPS, "chosen")], DURATION_S, 4.0, 1, _twin,
                    say=said.append, nginx=f"http://127.0.0.1:{nginx}")
    finally:
        lifecycle.apply(testbed, testbed.start_config())  # the session testbed as the other tests expect it
    # the Spark key every paper scenario sets has no component on this testbed: skipped, and said so
    assert any(line.startswith("zero-wait:") and "skipped (no component takes them): spark.trigger.interval"
               in line for line in said), said
    [comparison] = doc["comparisons"]
    assert set(comparison["scenarios"]) == {"baseline", "zero-wait"}
    for name, row in comparison["scenarios"].items():
        real = row["real"]
        assert math.isfinite(real["p95_s"]) and real["p95_s"] > 0, (name, real)
        assert real["offered_eps"] > 0 and real["throughput_eps"] > 0, (name, real)
        assert row["twin"]["offered_eps"] > 0
    console = Console(width=160, record=True)  # printed with -s, and read back
    console.print(real_table(comparison, {**doc, "calibration": "paper-2vcpu", "twin_reps": 1}))
    console.print(real_verdict(comparison))
    text = console.export_text()
    assert "latency to Kafka" in text  # this testbed's latency stage: the probe's, not the table's
    assert "Baseline" in text and "Zero-Wait" in text and "real" in text and "twin" in text
    assert "winner (lowest P95 among those keeping up): real" in text
