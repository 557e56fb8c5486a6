"""The twin's Spark stage fitted to saved real scenario runs: the runs read back as measurements of the configs the
agents applied, and a fit that moves the batch cost toward runs slower than the twin."""

from __future__ import annotations

import pytest

from models.scenario_fit import SPARK_COEFFICIENTS, applied_configs, fit_spark, measurements
from models.twin import load

DOC = {
    "duration_s": 20.0, "warmup_s": 5.0,
    "scenarios": {"baseline": {"applied": {"spark.trigger.interval": 1.0}, "skipped": {}, "moved": {}},
                  "hybrid": {"applied": {"filebeat.scan_frequency": 0.01}, "skipped": {},
                             "moved": {"filebeat.max_backoff": [10.0, 0.01], "filebeat.backoff": [1.0, 0.01]}}},
    "comparisons": [{"rate_eps": 300.0, "scenarios": {
        "baseline": {"real": {"p95_s": 8.0, "throughput_eps": 300.0}},
        "hybrid": {"real": {"p95_s": None, "throughput_eps": 300.0}}}}],  # a NaN saved as null: left out
}


def test_the_runs_are_read_as_the_configs_the_agents_applied():
    configs = applied_configs(DOC)
    assert configs["hybrid"]["filebeat.max_backoff"] == 0.01 and configs["hybrid"]["filebeat.backoff"] == 0.01
    [(name, point)] = measurements(DOC)
    assert name == "baseline" and point.rate_eps == 300.0 and point.p95_s == 8.0
    with pytest.raises(ValueError, match="no 'scenarios'"):
        applied_configs({"comparisons": []})


def test_a_calibration_without_spark_is_refused():
    with pytest.raises(ValueError, match="no Spark stage"):
        fit_spark(DOC, load("local-filebeat-kafka"))


def test_the_fit_lengthens_the_batch_cost_when_the_real_runs_are_slower():
    """A stand-in predictor (P95 = 2 x the batch latency): the fit finds the batch latency that gives the real 8 s."""
    def predict(calibration, config, rate_eps):
        return 2.0 * calibration.spark.batch_latency_s, rate_eps

    result, [error] = fit_spark(DOC, load("paper-2vcpu"), predict=predict, max_evals=60)
    assert result.values["spark__batch_latency_s"] == pytest.approx(4.0, rel=0.1)
    assert abs(error.fitted_error) < abs(error.base_error)
    assert {c.key for c in SPARK_COEFFICIENTS} == set(result.values)
