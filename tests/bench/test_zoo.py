"""bench.zoo's variants and split rule: a seed names one pipeline for good, the held-out seeds come from the commit
and never from the tuning part, and each variant's twin is its base calibration changed as drawn."""

from dataclasses import replace

import pytest

from bench.zoo import (BASES, CORES, EVENT_BYTES, HELD_OUT_FROM, IDLE_FILES, PARSE_COST, RATE_EPS, SHAPES,
                       calibration, draw, held_out_seed, mean_over_base, summary)
from models.twin import load


def test_a_seed_draws_the_same_variant_every_time_and_seeds_differ():
    assert draw(7) == draw(7)
    variants = [draw(seed) for seed in range(40)]
    assert len({v.label() for v in variants}) > 30
    for v in variants:
        assert v.base in BASES and v.cores in CORES and v.parse in PARSE_COST and v.idle_files in IDLE_FILES
        assert v.shape in SHAPES and RATE_EPS[0] <= v.drawn_rate_eps <= RATE_EPS[1]
        assert EVENT_BYTES[0] <= v.event_bytes <= EVENT_BYTES[1]


def test_held_out_seeds_come_from_the_commit_above_every_tuning_seed():
    a, b = held_out_seed("222b95b" + "0" * 33), held_out_seed("f082541" + "0" * 33)
    assert a != b and min(a, b) >= HELD_OUT_FROM and held_out_seed("222b95b" + "0" * 33) == a


def test_a_variants_twin_is_its_base_with_its_node_events_parse_cost_and_idle_files():
    variant = draw(3)
    twin, base = calibration(variant), load(variant.base)
    assert twin.node.cores == variant.cores and twin.node.idle_files == variant.idle_files
    assert twin.event_bytes == variant.event_bytes and twin.topology == base.topology
    ndjson = calibration(replace(variant, parse="ndjson"))  # the same costs drawn, parsed at the base's cost
    assert twin.filebeat.cpu_per_event_s == pytest.approx(PARSE_COST[variant.parse] * ndjson.filebeat.cpu_per_event_s)
    assert twin.filebeat.restart_s != base.filebeat.restart_s  # every cost is off by its own factor
    assert calibration(variant) == twin


def test_the_summary_holds_the_goals_median_and_worst_final_over_oracle():
    rows = [{"final_over_oracle": r, "windows_to_near": w, "final_within_budget_there": ok, "oracle_p95_s": held,
             "oracle_above_ceilings_p95_s": 0.01}
            for r, w, ok, held in ((1.0, 3, True, 0.01), (1.1, 5, False, 0.02), (2.5, None, True, 0.04))]
    figures = summary(rows)
    assert figures["median_ceilings_price"] == pytest.approx(2.0)
    assert figures["finals_over_budget_at_their_runs_loads"] == 1
    assert figures["median_final_over_oracle"] == 1.1 and figures["worst_final_over_oracle"] == 2.5
    assert figures["median_goal_met"] and not figures["worst_goal_met"] and figures["reached_near"] == 2


def test_the_rate_cap_counts_a_shapes_long_run_mean_so_an_mmpp_is_not_overloaded_whatever_the_config():
    steady, mmpp = replace(draw(3), shape="steady"), replace(draw(3), shape="mmpp")
    assert mean_over_base(steady, 40, 30.0) == pytest.approx(1.0, abs=0.01)
    assert mean_over_base(mmpp, 40, 30.0) == pytest.approx(1.6, abs=0.15)  # ×4 bursts of 5 s every 25 s
    assert mean_over_base(replace(steady, shape="diurnal"), 40, 30.0) == 1.0  # never lifts the cap
