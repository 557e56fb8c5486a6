"""Judging a canary against its controls: load that moves the whole pool cancels, a real change shows, thin
windows are called unclear, and the judgement is the same for the same seed."""

import math

import numpy as np
import pytest

from models.canary import CanaryOutcome, LatencyHistogram, judge_canary, judge_step, merge_windows

BOUNDS_S = tuple(float(b) for b in np.geomspace(0.001, 120.0, 123)) + (math.inf,)  # 124 buckets, as the probe's


def window(p95_s: float, events: int = 20_000, seed: int = 0) -> LatencyHistogram:
    """A window of lognormal latencies whose P95 is `p95_s`."""
    sigma = 0.5
    latencies = np.random.default_rng(seed).lognormal(math.log(p95_s) - 1.645 * sigma, sigma, events)
    return LatencyHistogram.of(latencies, BOUNDS_S)


def test_the_quantile_is_read_as_histogram_quantile_reads_it():
    assert LatencyHistogram((0.1, 0.2, math.inf), (50, 50, 0)).quantile_s() == pytest.approx(0.19)
    # in the +Inf bucket: the last finite bound
    assert LatencyHistogram((0.1, 0.2, math.inf), (0, 90, 10)).quantile_s() == pytest.approx(0.2)
    assert LatencyHistogram((0.1, 0.2, math.inf), (100, 0, 0)).quantile_s(0.5) == pytest.approx(0.05)
    assert math.isnan(LatencyHistogram((0.1, math.inf), (0, 0)).quantile_s())


def test_a_histogram_of_events_counts_each_in_the_bucket_of_its_le_bound_and_merges_by_summing():
    h = LatencyHistogram.of([0.05, 0.1, 0.15, 7.0], (0.1, 0.2))
    assert h == LatencyHistogram((0.1, 0.2, math.inf), (2, 1, 1))
    assert LatencyHistogram.merge([h, h]).counts == (4, 2, 2)
    with pytest.raises(ValueError, match="histograms.1: buckets differ"):
        LatencyHistogram.merge([h, LatencyHistogram.of([0.1], (0.5,))])


def test_the_same_shift_on_canary_and_controls_is_no_effect():
    # the whole pool's load rose: every node's P95 went 100 -> 130 ms
    judged = judge_canary(window(0.100, seed=1), window(0.130, seed=2),
                          [window(0.100, 60_000, seed=3)], [window(0.130, 60_000, seed=4)])
    assert judged.outcome is CanaryOutcome.UNCLEAR
    assert abs(judged.effect_s) < 0.004
    assert judged.low_s < 0 < judged.high_s


def test_a_canary_that_improved_while_the_load_rose_is_better_with_the_drift_removed():
    # the canary's own P95 rose 100 -> 110 ms (a before/after look calls it worse), the controls' 100 -> 140 ms
    judged = judge_canary(window(0.100, seed=1), window(0.110, seed=2),
                          [window(0.100, 60_000, seed=3)], [window(0.140, 60_000, seed=4)])
    assert judged.outcome is CanaryOutcome.BETTER
    assert judged.effect_s == pytest.approx(-0.030, abs=0.004)
    assert judged.low_s <= judged.effect_s <= judged.high_s < 0
    assert "effect -" in judged.reason and "interval" in judged.reason


def test_a_canary_worse_than_its_controls_is_worse():
    judged = judge_canary(window(0.100, seed=1), window(0.150, seed=2),
                          [window(0.100, 60_000, seed=3)], [window(0.105, 60_000, seed=4)])
    assert judged.outcome is CanaryOutcome.WORSE
    assert 0 < judged.low_s <= judged.effect_s == pytest.approx(0.045, abs=0.005)


def test_too_few_events_is_unclear_and_says_which_window():
    judged = judge_canary(window(0.100, seed=1), window(0.050, events=150, seed=2),
                          [window(0.100, seed=3)], [window(0.100, seed=4)])
    assert judged.outcome is CanaryOutcome.UNCLEAR
    assert "too few events" in judged.reason and "canary_after has 150 events" in judged.reason
    assert math.isnan(judged.effect_s)


def test_the_judgement_is_the_same_for_the_same_seed_and_the_seed_moves_only_the_interval_edges():
    args = (window(0.100, seed=1), window(0.095, seed=2), [window(0.100, seed=3)], [window(0.100, seed=4)])
    assert judge_canary(*args, seed=7) == judge_canary(*args, seed=7)
    a, b = judge_canary(*args, seed=7), judge_canary(*args, seed=8)
    assert a.effect_s == b.effect_s
    assert a.low_s != b.low_s and a.low_s == pytest.approx(b.low_s, abs=0.1 * (a.high_s - a.low_s))


def test_the_interval_covers_the_true_effect_about_as_often_as_its_confidence_says():
    # 100 pools whose canary changed P95 by -10 ms against controls: the 90 % interval should hold -10 ms in
    # about 90 of them (seeded: the count is fixed; a miscalibrated interval lands far outside 80..97)
    covered = 0
    for k in range(100):
        judged = judge_canary(window(0.1, 5000, seed=4 * k), window(0.09, 5000, seed=4 * k + 1),
                              [window(0.1, 15_000, seed=4 * k + 2)], [window(0.1, 15_000, seed=4 * k + 3)],
                              confidence=0.9, seed=k)
        covered += judged.low_s <= -0.010 <= judged.high_s
    assert 80 <= covered <= 97


@pytest.mark.parametrize("make, message", [
    (lambda: LatencyHistogram((0.1, 0.2), (1,)), "counts: 1 counts for 2 buckets"),
    (lambda: LatencyHistogram((0.2, 0.1), (1, 1)), "upper_bounds_s: must be > 0 and strictly increasing"),
    (lambda: LatencyHistogram((0.1, 0.2), (1, -1)), "counts: must be whole numbers"),
    (lambda: judge_canary(window(0.1), window(0.1), [window(0.1)], [window(0.1)], confidence=1.0),
     "confidence: 1.0 is outside"),
    (lambda: judge_canary(window(0.1), window(0.1), [window(0.1)], [window(0.1)], max_baseline_gap=0),
     "max_baseline_gap: 0 must be > 0"),
    (lambda: judge_canary(window(0.1), window(0.1), [window(0.1)], [window(0.1)], usual_ratio=0.0),
     "usual_ratio: 0.0 must be a finite ratio > 0"),
    (lambda: judge_canary(window(0.1), window(0.1), [LatencyHistogram.of([0.1] * 300, (1.0,))], [window(0.1)]),
     "controls_before.0: buckets differ"),
])
def test_bad_input_names_the_field(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_pool_of_one_node_is_judged_on_its_own_before_and_after_and_says_drift_is_not_removed():
    judged = judge_canary(window(0.100, seed=1), window(0.090, seed=2), [], [])
    assert judged.outcome is CanaryOutcome.BETTER and judged.effect_s == pytest.approx(-0.010, abs=0.003)
    assert "no controls" in judged.reason
    with pytest.raises(ValueError, match="controls_before, controls_after: 1 and 0 nodes"):
        judge_canary(window(0.1), window(0.1), [window(0.1)], [])


def test_a_canary_that_did_not_start_where_its_controls_did_is_unclear_not_better():
    # the canary still drained a previous trial's backlog (P95 130 ms against the controls' 100 ms); its return
    # to 100 ms would otherwise pass for a 30 ms improvement
    judged = judge_canary(window(0.130, seed=1), window(0.100, seed=2),
                          [window(0.100, 60_000, seed=3)], [window(0.100, 60_000, seed=4)])
    assert judged.outcome is CanaryOutcome.UNCLEAR
    assert "% off the controls'" in judged.reason and "beyond ±15%: no common baseline" in judged.reason
    # within the gap the difference in differences is judged as usual
    assert judge_canary(window(0.105, seed=1), window(0.080, seed=2), [window(0.100, 60_000, seed=3)],
                        [window(0.100, 60_000, seed=4)]).outcome is CanaryOutcome.BETTER


def test_a_canary_on_other_traffic_than_its_controls_is_judged_against_its_usual_ratio_to_them():
    # the canary carries 500 ev/s, the controls 150: on the pool's config its P95 is half theirs (1.5 s
    # against 3 s), which is no gap to that usual ratio; its fall to 1.2 s is judged
    before, controls = window(1.5, seed=1), [window(3.0, 60_000, seed=3)]
    judged = judge_canary(before, window(1.2, seed=2), controls, [window(3.0, 60_000, seed=4)], usual_ratio=0.5)
    assert judged.outcome is CanaryOutcome.BETTER
    # against like traffic's ratio the same windows start 50 % apart: unclear
    assert judge_canary(before, window(1.2, seed=2), controls, [window(3.0, 60_000, seed=4)]
                        ).outcome is CanaryOutcome.UNCLEAR
    # and a canary 30 % above its usual ratio (a backlog left) is unclear, saying against what
    drained = judge_canary(window(1.95, seed=1), window(1.5, seed=2), controls, [window(3.0, 60_000, seed=4)],
                           usual_ratio=0.5)
    assert drained.outcome is CanaryOutcome.UNCLEAR and "× its usual 0.50, beyond ±15%" in drained.reason


def test_controls_that_move_apart_on_their_own_widen_the_interval_beyond_the_events_noise():
    # Each control's own load moved its P95 by up to ±15 ms while nothing changed on it: a -8 ms canary is
    # within that, so the placebos (each control against the others) make it unclear; the bootstrap over
    # events alone, blind to per-node load, would call it better.
    before = [window(0.100, 60_000, seed=3), window(0.100, 60_000, seed=5), window(0.100, 60_000, seed=7)]
    after = [window(0.115, 60_000, seed=4), window(0.088, 60_000, seed=6), window(0.097, 60_000, seed=8)]
    canary = (window(0.100, 60_000, seed=1), window(0.092, 60_000, seed=2))
    events_only = judge_canary(*canary, [LatencyHistogram.merge(before)], [LatencyHistogram.merge(after)])
    assert events_only.outcome is CanaryOutcome.BETTER and "placebo" not in events_only.reason
    judged = judge_canary(*canary, before, after)
    assert judged.effect_s == pytest.approx(events_only.effect_s)
    assert judged.outcome is CanaryOutcome.UNCLEAR and judged.low_s < 0 < judged.high_s
    assert "placebo spread ±" in judged.reason and "over 3" in judged.reason


def test_a_change_well_beyond_the_controls_spread_is_still_better():
    before = [window(0.100, 60_000, seed=3), window(0.100, 60_000, seed=5), window(0.100, 60_000, seed=7)]
    after = [window(0.102, 60_000, seed=4), window(0.099, 60_000, seed=6), window(0.100, 60_000, seed=8)]
    judged = judge_canary(window(0.100, 60_000, seed=1), window(0.060, 60_000, seed=2), before, after)
    assert judged.outcome is CanaryOutcome.BETTER
    assert judged.high_s < -0.030


def test_windows_merge_node_by_node_and_a_node_missing_from_one_is_left_out():
    a, b = window(0.1, 500, seed=1), window(0.2, 700, seed=2)
    merged = merge_windows([{"n1": a, "n2": b}, {"n1": b}])
    assert set(merged) == {"n1"} and merged["n1"].total == 1200
    with pytest.raises(ValueError, match="windows: nothing to merge"):
        merge_windows([])


def test_a_promoted_node_is_judged_against_the_nodes_whose_config_held_whatever_its_level():
    # node-3 carries a flash sale (P95 twice the others'): the change took it 200 -> 300 ms while the held
    # nodes (one already promoted, two not yet) moved with the load alone; levels that differ do not matter
    before = {"node-3": window(0.200, 60_000, seed=1), "node-1": window(0.080, 60_000, seed=3),
              "node-2": window(0.100, 60_000, seed=5), "node-4": window(0.100, 60_000, seed=7)}
    after = {"node-3": window(0.300, 60_000, seed=2), "node-1": window(0.082, 60_000, seed=4),
             "node-2": window(0.099, 60_000, seed=6), "node-4": window(0.101, 60_000, seed=8)}
    judged = judge_step(before, after, ["node-3"], ["node-1", "node-2", "node-4"])
    assert judged["node-3"].outcome is CanaryOutcome.WORSE
    assert judged["node-3"].effect_s == pytest.approx(0.100, abs=0.01) and "placebo spread" in judged["node-3"].reason
    # a node that moved as the held ones did is no worse
    after["node-3"] = window(0.202, 60_000, seed=2)
    assert judge_step(before, after, ["node-3"], ["node-1", "node-2", "node-4"])["node-3"].outcome \
        is not CanaryOutcome.WORSE


def test_a_promoted_node_without_latency_in_both_windows_is_unclear():
    before = {"node-2": window(0.1, seed=1), "node-1": window(0.1, seed=3)}
    judged = judge_step(before, {"node-1": window(0.1, seed=4)}, ["node-2"], ["node-1"])
    assert judged["node-2"].outcome is CanaryOutcome.UNCLEAR and "no latency of node-2" in judged["node-2"].reason
