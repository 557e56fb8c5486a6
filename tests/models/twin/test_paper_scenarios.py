"""The paper-study runner: figures per repetition, summaries across repetitions, Welch's test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.paper_scenarios import PAPER, SCENARIOS, run_study, summarise, welch_p
from tests.models.twin.helpers import CAL, poisson


def _arrivals(kind: str, seed: int) -> np.ndarray:
    steady = poisson(300, 60, seed)
    if kind == "steady":
        return steady
    extra = poisson(300, 10, seed + 1) + 20.0
    return np.sort(np.concatenate([steady, extra]))


def test_study_reports_every_figure_the_json_promises_with_independent_repetitions() -> None:
    result = run_study(CAL, _arrivals, rate_eps=300, duration_s=60, reps=2, names=["baseline", "zero-wait", "burst"])
    summary = result.summary()
    row = summary["scenarios"]["zero-wait"]
    for key in ("p95_s", "mean_s", "steady_p95_s", "peak_throughput_eps", "sustained_throughput_eps",
                "offered_eps", "packets_per_s", "backlog_end_events", "lost_events"):
        assert key in row and math.isfinite(row[key])
    assert 0 <= row["p_value_vs_baseline"] <= 1
    assert set(summary["burst"]) == {"baseline", "micro-batching", "hybrid"}
    assert {"burst_p95_s", "recovery_p95_s", "max_stage_lag_s"} <= set(summary["burst"]["hybrid"])
    first, second = result.scenarios["baseline"]
    assert first.p95_s != second.p95_s  # each repetition has its own seed
    assert row["offered_eps"] == pytest.approx(300, rel=0.05)
    assert summary["scenarios"]["baseline"]["stage_share"]["filebeat"] > 0


def test_unknown_scenarios_are_named_in_the_error() -> None:
    with pytest.raises(KeyError, match="hybird"):
        run_study(CAL, _arrivals, rate_eps=300, duration_s=10, reps=1, names=["hybird"])


def test_summaries_and_welch() -> None:
    from models.paper_scenarios import BurstRepetition

    reps = [BurstRepetition(1.0, 2.0, 3.0), BurstRepetition(3.0, 2.0, 3.0)]
    s = summarise(reps)
    assert s["burst_p95_s"] == 2.0 and s["burst_p95_s_sd"] == pytest.approx(math.sqrt(2))
    assert welch_p([1.0, 1.1, 0.9], [5.0, 5.1, 4.9]) < 0.001
    assert math.isnan(welch_p([1.0], [2.0, 3.0]))


def test_every_scenario_has_a_preset_and_the_paper_figures() -> None:
    from models.presets import PRESETS

    for scenario in SCENARIOS:
        assert scenario.name in PRESETS and "p95_s" in PAPER[scenario.name]
