"""The twin fitted to saved real scenario runs: the runs read back as measurements of the configs the agents applied,
a fit that moves the batch cost toward runs slower than the twin and the round trip toward a per-event send's real
capacity, and the winner and collapse of each comparison, real beside the twin."""

from __future__ import annotations

import pytest

from models.scenario_fit import (SCENARIO_COEFFICIENTS, ScenarioError, agreements, applied_configs, fit_scenarios,
                                 saved_runs)
from models.twin import load

SCENARIOS = {"baseline": {"applied": {"spark.trigger.interval": 1.0}, "skipped": {}, "moved": {}},
             "hybrid": {"applied": {"filebeat.scan_frequency": 0.01}, "skipped": {},
                        "moved": {"filebeat.max_backoff": [10.0, 0.01], "filebeat.backoff": [1.0, 0.01]}},
             "zero-wait": {"applied": {"filebeat.output.bulk_max_size": 1}, "skipped": {}, "moved": {}}}
DOC = {
    "duration_s": 20.0, "warmup_s": 5.0, "scenarios": SCENARIOS,
    "comparisons": [{"rate_eps": 300.0, "scenarios": {
        "baseline": {"real": {"p95_s": 8.0, "throughput_eps": 300.0, "offered_eps": 301.0}},
        "hybrid": {"real": {"p95_s": None, "throughput_eps": 300.0, "offered_eps": 300.0}}}}],  # NaN saved as null
}


def _doc_at(rate_eps: float, zero_wait_out_eps: float) -> dict:
    """A comparison of Baseline (8 s, keeps up) and Zero-Wait (4 s, shipping `zero_wait_out_eps`) at `rate_eps`."""
    return {"duration_s": 20.0, "warmup_s": 5.0, "scenarios": SCENARIOS, "comparisons": [{"rate_eps": rate_eps,
            "scenarios": {"baseline": {"real": {"p95_s": 8.0, "throughput_eps": rate_eps, "offered_eps": rate_eps}},
                          "zero-wait": {"real": {"p95_s": 4.0, "throughput_eps": zero_wait_out_eps,
                                                 "offered_eps": rate_eps}}}}]}


def _capped_by_the_round_trip(calibration, config, rate_eps):
    """A stand-in twin: P95 twice the batch latency (half that for a per-event send), a per-event send's output
    capped at one event per two round trips."""
    if config["filebeat.output.bulk_max_size"] == 1:
        return calibration.spark.batch_latency_s, min(rate_eps, 1.0 / (2 * calibration.network.rtt_s))
    return 2.0 * calibration.spark.batch_latency_s, rate_eps


def test_the_runs_are_read_as_the_configs_the_agents_applied():
    configs = applied_configs(DOC)
    assert configs["hybrid"]["filebeat.max_backoff"] == 0.01 and configs["hybrid"]["filebeat.backoff"] == 0.01
    [run] = saved_runs([DOC])
    assert run.scenario == "baseline" and run.measurement.rate_eps == 300.0 and run.measurement.p95_s == 8.0
    assert run.keeps_up and run.comparison == 0
    assert [r.comparison for r in saved_runs([DOC, _doc_at(900.0, 600.0)])] == [0, 1, 1]
    with pytest.raises(ValueError, match="no 'scenarios'"):
        applied_configs({"comparisons": []})


def test_a_saved_run_whose_backlog_grew_in_most_repetitions_is_read_as_falling_behind():
    doc = _doc_at(1750.0, 1750.0)
    doc["comparisons"][0]["scenarios"]["zero-wait"]["real"]["backlog_grew"] = 1.0
    baseline, zero_wait = saved_runs([doc])
    assert baseline.keeps_up and not zero_wait.keeps_up


def test_a_calibration_without_spark_or_documents_of_other_windows_are_refused():
    with pytest.raises(ValueError, match="no Spark stage"):
        fit_scenarios([DOC], load("local-filebeat-kafka"))
    with pytest.raises(ValueError, match=r"different lengths \(20 s after 5 s, 30 s after 5 s\)"):
        fit_scenarios([DOC, DOC | {"duration_s": 30.0}], load("paper-testbed"))


def test_the_fit_lengthens_the_batch_cost_and_the_round_trip_to_what_the_real_runs_did():
    """Real: Baseline 8 s (the twin's 2 x batch latency: 4 s), Zero-Wait shipping 500 of 900 ev/s (one event per two
    round trips: 1 ms). The fitted twin agrees, and so sees Zero-Wait fall behind where it did not before."""
    docs = [_doc_at(900.0, 500.0)]
    result, errors = fit_scenarios(docs, load("paper-testbed"), predict=_capped_by_the_round_trip, max_evals=200)
    assert result.values["spark__batch_latency_s"] == pytest.approx(4.0, rel=0.1)
    assert result.values["network__rtt_s"] == pytest.approx(1e-3, rel=0.1)
    assert {c.key for c in SCENARIO_COEFFICIENTS} == set(result.values)
    assert all(abs(e.fitted_error) < abs(e.base_error) for e in errors)
    [before] = agreements(errors, fitted=False)
    assert before.real_behind == ["zero-wait"] and before.twin_behind == [] and not before.same_collapse
    [after] = agreements(errors)
    assert after.same_collapse and after.same_winner and after.twin_winners == ["baseline"]


def test_the_winner_is_among_those_keeping_up_and_a_tie_counts_as_the_same():
    [baseline, zero_wait] = saved_runs([_doc_at(900.0, 900.0)])  # both keep up; Zero-Wait's 4 s the lower
    errors = [ScenarioError(baseline, 3.0, 8.0, True, True), ScenarioError(zero_wait, 3.05, 4.0, True, False)]
    [before] = agreements(errors, fitted=False)
    assert before.real_winners == ["zero-wait"] and set(before.twin_winners) == {"baseline", "zero-wait"}
    assert before.same_winner and before.same_collapse
    [after] = agreements(errors)
    assert after.twin_winners == ["baseline"] and after.twin_behind == ["zero-wait"]
    assert not after.same_winner and not after.same_collapse
