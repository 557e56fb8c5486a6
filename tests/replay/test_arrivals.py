"""Arrival processes: counts, per-phase rates, determinism, and the trace transform."""

import numpy as np
import pytest

from replay import arrivals
from replay.arrivals import Stage


def _rate_in(times, start, end):
    return np.count_nonzero((times >= start) & (times < end)) / (end - start)


def _poisson_tolerance(rate, seconds):
    return 4 * np.sqrt(rate * seconds) / seconds  # 4 sigma of a Poisson count, as a rate


@pytest.mark.parametrize("poisson", [False, True])
def test_steady_has_the_rate_and_is_sorted_within_the_run(poisson):
    s = arrivals.steady(300, 60, poisson=poisson, seed=1)
    assert np.all(np.diff(s.times_s) >= 0)
    assert s.times_s.min() >= 0 and s.times_s.max() <= 60
    tol = _poisson_tolerance(300, 60) if poisson else 0.05
    assert abs(s.events / 60 - 300) <= tol


def test_uniform_spacing_is_even():
    gaps = np.diff(arrivals.steady(100, 10).times_s)
    assert np.allclose(gaps, 0.01, atol=1e-6)


def test_poisson_interarrivals_are_exponential():
    gaps = np.diff(arrivals.steady(1000, 60, poisson=True, seed=3).times_s)
    assert gaps.mean() == pytest.approx(1e-3, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # coefficient of variation of Exp is 1


@pytest.mark.parametrize("poisson", [False, True])
def test_step_burst_follows_the_papers_profile(poisson):
    s = arrivals.step_burst(300, poisson=poisson, seed=2)
    assert [(p.start_s, p.end_s) for p in s.phases] == [(0, 60), (60, 90), (90, 180)]
    for start, end, rate in [(0, 60, 300), (60, 90, 600), (90, 180, 300)]:
        tol = _poisson_tolerance(rate, end - start) if poisson else 1.0
        assert abs(_rate_in(s.times_s, start, end) - rate) <= tol


def test_flash_sale_spikes_then_decays_back():
    s = arrivals.flash_sale(200, 120, 40, 70, factor=8, seed=4)
    assert _rate_in(s.times_s, 40, 41) > 5 * 200
    assert _rate_in(s.times_s, 0, 40) == pytest.approx(200, rel=0.1)
    assert _rate_in(s.times_s, 80, 120) == pytest.approx(200, rel=0.1)
    assert _rate_in(s.times_s, 40, 45) > _rate_in(s.times_s, 50, 55) > _rate_in(s.times_s, 65, 70)


def test_diurnal_swings_around_the_mean_with_the_depth():
    s = arrivals.diurnal(500, 400, period_s=200, depth=0.6, poisson=True, seed=5)
    assert s.events / 400 == pytest.approx(500, rel=0.03)
    trough, peak = _rate_in(s.times_s, 0, 10), _rate_in(s.times_s, 95, 105)
    assert trough == pytest.approx(500 * (1 - 0.6), rel=0.15)
    assert peak == pytest.approx(500 * (1 + 0.6), rel=0.1)


def test_k6_stages_ramp_linearly_between_targets():
    s = arrivals.stages([Stage(10, 100), Stage(20, 100), Stage(10, 0)])
    assert s.duration_s == 40
    assert _rate_in(s.times_s, 0, 10) == pytest.approx(50, abs=1.5)  # mean of a 0 -> 100 ramp
    assert _rate_in(s.times_s, 10, 30) == pytest.approx(100, abs=1)
    assert _rate_in(s.times_s, 0, 2) < _rate_in(s.times_s, 8, 10)
    assert [round(p.target_eps) for p in s.phases] == [50, 100, 50]


def test_mmpp_alternates_normal_and_burst_states():
    s = arrivals.mmpp(200, 600, factor=5, mean_normal_s=30, mean_burst_s=10, seed=6)
    levels = {round(p.target_eps) for p in s.phases}
    assert levels == {200, 1000}
    for p in s.phases:
        if p.end_s - p.start_s > 5:
            assert abs(_rate_in(s.times_s, p.start_s, p.end_s) - p.target_eps) <= _poisson_tolerance(
                p.target_eps, p.end_s - p.start_s)
    per_second = np.bincount(np.floor(s.times_s).astype(int))
    assert per_second.var() > 10 * per_second.mean()  # overdispersed, unlike a plain Poisson process


def test_same_seed_same_schedule_other_seed_other_schedule():
    a = arrivals.mmpp(300, 60, seed=7).times_s
    assert np.array_equal(a, arrivals.mmpp(300, 60, seed=7).times_s)
    assert not np.array_equal(a, arrivals.mmpp(300, 60, seed=8).times_s)


def test_trace_replay_scales_time_and_amplifies_counts():
    rng = np.random.default_rng(0)
    original = np.sort(rng.uniform(0, 100, 1000)) + 1.7e9
    base = arrivals.trace(original, seed=1)
    assert base.events == 1000 and base.duration_s == pytest.approx(100, rel=0.02)
    fast = arrivals.trace(original, time_scale=4, amplify=3, seed=1)
    assert fast.events == 3000
    assert fast.duration_s == pytest.approx(25, rel=0.02)
    # the shape is kept: the busiest tenth of the original stays the busiest after the transform
    orig_counts = np.histogram(original - original[0], bins=10, range=(0, 100))[0]
    fast_counts = np.histogram(fast.times_s, bins=10, range=(0, 25))[0]
    assert np.argmax(fast_counts) == np.argmax(orig_counts)


def test_trace_spreads_whole_second_stamps_within_their_second():
    stamps = np.repeat(np.arange(1.7e9, 1.7e9 + 10), 50)  # 50 requests per second, 1 s resolution
    s = arrivals.trace(stamps, seed=2)
    assert np.bincount(np.floor(s.times_s).astype(int)).max() <= 60
    assert len(np.unique(s.times_s)) == s.events


@pytest.mark.parametrize("make", [
    lambda: arrivals.steady(0, 10),
    lambda: arrivals.step_burst(100, 60, 50, 70),
    lambda: arrivals.flash_sale(100, 60, 30, 20),
    lambda: arrivals.diurnal(100, 60, 60, depth=1.5),
    lambda: arrivals.stages([]),
    lambda: arrivals.trace(np.array([])),
])
def test_bad_parameters_are_refused(make):
    with pytest.raises(ValueError):
        make()
