"""The pure part of `pipetune scenarios --pipeline`: what each scenario sets on a pipeline, the twin's collapse rate,
winner and collapse of a set of runs."""

from __future__ import annotations

import math

import pytest

from models.paper_scenarios import PAPER
from models.scenario_study import (KEEPS_UP, REAL_SCENARIOS, RealRun, collapse_rate, compare, median_abs_error,
                                   real_keeps_up, scenario_config, summarise_real, winners)
from models.space import check_rules
from models.twin import load
from replay.profiles import WorkloadSpec, build_schedule

# what the paper testbed's agents take (Filebeat, the broker, the Spark query): no Logstash
PAPER_TESTBED = {"filebeat.scan_frequency", "filebeat.backoff", "filebeat.max_backoff", "filebeat.close_inactive",
                 "filebeat.output.bulk_max_size", "filebeat.output.pipelining", "filebeat.queue.mem.flush.min_events",
                 "filebeat.queue.mem.flush.timeout", "filebeat.queue.mem.events", "spark.trigger.interval",
                 "spark.maxOffsetsPerTrigger", "spark.sql.shuffle.partitions"}


def test_keys_no_component_takes_are_skipped_and_said():
    micro = scenario_config("micro-batching", PAPER_TESTBED)
    assert micro.applied == {"spark.trigger.interval": 1.0}
    assert set(micro.skipped) == {"logstash.pipeline.batch.size", "logstash.pipeline.batch.delay",
                                  "logstash.output.kafka.linger_ms"}
    assert "skipped (no component takes them): logstash.pipeline.batch.size=1" in micro.said()
    assert micro.as_applied() == scenario_config("baseline", PAPER_TESTBED).as_applied()  # no Logstash: Baseline
    zero = scenario_config("zero-wait", PAPER_TESTBED)
    assert zero.skipped == {} and zero.config["filebeat.output.bulk_max_size"] == 1


def test_hybrid_is_put_in_the_order_the_agent_requires_and_keeps_what_it_sets():
    hybrid = scenario_config("hybrid", PAPER_TESTBED)
    check_rules(hybrid.config)  # the agent's check: it would refuse the paper's Hybrid as it stands
    assert hybrid.config["filebeat.scan_frequency"] == 0.01 and hybrid.config["filebeat.output.bulk_max_size"] == 50
    assert hybrid.moved == {"filebeat.max_backoff": (10.0, 0.01), "filebeat.backoff": (1.0, 0.01)}
    assert "filebeat.max_backoff 10.0 -> 0.01" in hybrid.said()
    assert scenario_config("baseline", PAPER_TESTBED).moved == {}


def test_an_unknown_scenario_names_the_known_ones():
    with pytest.raises(KeyError, match="hybird.*baseline"):
        scenario_config("hybird", PAPER_TESTBED)


def _run(p95: float, out: float, offered: float = 300.0) -> RealRun:
    return RealRun(p95_s=p95, mean_s=p95 / 2, offered_eps=offered, throughput_eps=out, behind_end_events=0,
                   window_s=30.0)


def test_the_winner_is_the_lowest_p95_among_the_runs_that_keep_up_ties_included():
    rows = {"a": {"p95_s": 1.0}, "b": {"p95_s": 2.0}, "c": {"p95_s": 3.0}, "d": {"p95_s": 2.05}}
    assert winners(rows, {"a": False, "b": True, "c": True, "d": False}) == ["b"]
    assert winners(rows, {"a": False, "b": True, "c": True, "d": True}) == ["b", "d"]  # within 3 %: a tie
    assert winners(rows, {"a": False, "b": False, "c": False, "d": False}) == []


def test_real_repetitions_are_summarised_by_their_median():
    row = summarise_real([_run(1.0, 300), _run(9.0, 100), _run(2.0, 290)])
    assert row["p95_s"] == 2.0 and row["throughput_eps"] == 290 and row["reps"] == 3
    assert row["keeps_up"] == (290 / 300 >= KEEPS_UP)


def test_a_real_run_whose_backlog_grew_falls_behind_though_its_shifted_output_kept_pace():
    """Zero-Wait at 1,750 ev/s read 100 % out/in over the window shifted by its median latency while its queue grew
    in Filebeat: the tuning run's backlog rule says it fell behind; over repetitions, when most of them did."""
    grew = RealRun(p95_s=31.9, mean_s=24.9, offered_eps=1750.0, throughput_eps=1757.0, behind_end_events=0,
                   window_s=35.0, backlog_grew=True)
    assert not grew.keeps_up and _run(2.6, 1750.0, 1750.0).keeps_up
    assert summarise_real([grew, _run(7.1, 1750.0, 1750.0)])["keeps_up"]  # one of two: no majority
    row = summarise_real([grew, grew, _run(7.1, 1750.0, 1750.0)])
    assert row["backlog_grew"] == pytest.approx(2 / 3) and not row["keeps_up"]
    # a document saved before the backlog was read: its output alone
    assert real_keeps_up({"throughput_eps": 1750.0, "offered_eps": 1750.0})


def _twin_row(p95: float, sustained: float) -> dict:
    return {"p95_s": p95, "mean_s": p95 / 2, "offered_eps": 300.0, "sustained_throughput_eps": sustained}


def test_a_comparison_says_each_sides_winner_and_who_fell_behind():
    real = {"baseline": [_run(4.0, 299)], "zero-wait": [_run(9.0, 70)], "hybrid": [_run(2.0, 300)]}
    twin = {"scenarios": {"baseline": _twin_row(3.0, 300), "zero-wait": _twin_row(2.5, 300),
                          "hybrid": _twin_row(2.8, 300)}}
    doc = compare(300.0, "paper", real, twin)
    assert doc["winner"] == {"real": ["hybrid"], "twin": ["zero-wait"]}  # not all five: no paper winner
    assert doc["behind"] == {"real": ["zero-wait"], "twin": []}
    assert doc["scenarios"]["hybrid"]["twin_p95_error"] == pytest.approx(0.4)
    assert doc["scenarios"]["hybrid"]["paper"] == PAPER["hybrid"]
    assert compare(350.0, "collapse", real, twin)["scenarios"]["hybrid"]["paper"] == {}
    assert median_abs_error([doc]) == pytest.approx(0.4)  # |3-4|/4, |2.5-9|/9, |2.8-2|/2


def test_each_ovat_variant_is_set_against_hybrid_run_beside_it_and_the_papers_against_its_own():
    """The paper's sensitivity analysis (Table 10): OVAT-1 (scan 1 s) against Hybrid, real, twin and paper."""
    real = {"hybrid": [_run(2.0, 300)], "ovat-1": [_run(2.1, 300)]}
    twin = {"scenarios": {"hybrid": _twin_row(2.5, 300), "ovat-1": _twin_row(2.5, 300)}}
    moved = compare(300.0, "paper", real, twin)["ovat_vs_hybrid"]
    assert moved["ovat-1"]["real"] == pytest.approx(0.05) and moved["ovat-1"]["twin"] == 0.0
    assert moved["ovat-1"]["paper"] == pytest.approx(25.92 / 29.06 - 1)  # Table 10's own Hybrid, not Table 9's
    assert "paper" not in compare(1000.0, "chosen", real, twin)["ovat_vs_hybrid"]["ovat-1"]
    assert compare(300.0, "paper", {"ovat-1": real["ovat-1"]}, twin)["ovat_vs_hybrid"] == {}  # no Hybrid beside


def test_the_twins_zero_wait_collapses_just_above_the_papers_rate():
    """One event per request, no pipelining: the twin's Filebeat carries about 300 ev/s in Zero-Wait."""
    found = collapse_rate(load("paper-2vcpu"), lambda rate, seed: build_schedule(
        WorkloadSpec(rate_eps=rate, duration_s=60.0, seed=seed, poisson=True)).schedule.times_s)
    assert found.rate_eps is not None and 300.0 < found.rate_eps <= 500.0
    assert found.tried[found.rate_eps]["zero-wait"] < KEEPS_UP <= found.tried[found.rate_eps]["baseline"]
    assert f"{found.rate_eps:g} ev/s" in found.why()
    assert set(REAL_SCENARIOS) <= set(PAPER) and math.isfinite(found.tried[300.0]["baseline"])
