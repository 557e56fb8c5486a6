"""models.tradeoff: each config's P95 and CPU at one load, the front no config beats on both, the best within
a budget."""

import math

import pytest

from models.presets import preset
from models.space import PIPELINE_SPACE
from models.tradeoff import Point, Window, best_within, front, points

DEFAULTS = preset("defaults")
FAST = PIPELINE_SPACE.config({"filebeat.queue.mem.flush.timeout": 0.001}, base=DEFAULTS)
BUSY = PIPELINE_SPACE.config({"filebeat.scan_frequency": 0.01}, base=FAST)


def test_a_configs_cpu_is_its_cpu_per_event_at_the_tradeoffs_load_and_its_p95_the_median_of_its_windows():
    windows = [Window(FAST, 0.010, 0.20, 1000.0, True), Window(FAST, 0.030, 0.40, 2000.0, True),
               Window(FAST, 0.020, 0.20, 1000.0, True)]
    [point] = points(windows, {}, rate_eps=500.0)
    assert point.p95_s == 0.020 and point.cpu_cores == pytest.approx(0.10)  # 0.2 ms per event at 500 ev/s
    assert point.windows == 3 and point.label == "config 1"


def test_presets_are_named_others_numbered_and_windows_without_load_or_figures_left_out():
    windows = [Window(DEFAULTS, 2.0, 0.1, 300.0, True), Window(FAST, 0.01, 0.2, 300.0, True),
               Window(BUSY, 0.005, math.nan, 300.0, True), Window(BUSY, 0.005, 0.3, 0.0, True)]
    shown = points(windows, {"defaults": DEFAULTS, "baseline": DEFAULTS}, rate_eps=300.0)
    assert [p.label for p in shown] == ["defaults", "config 1"]


def test_a_config_that_fell_behind_in_most_of_its_windows_did_not_keep_up():
    shown = points([Window(FAST, 0.01, 0.2, 300.0, ok) for ok in (True, False, False)]
                   + [Window(BUSY, 0.01, 0.2, 300.0, ok) for ok in (True, True, False)], {}, rate_eps=300.0)
    assert [p.kept_up for p in shown] == [False, True]


def _point(label: str, p95_s: float, cpu_cores: float, kept_up: bool = True) -> Point:
    return Point(label, DEFAULTS, p95_s, cpu_cores, 3, kept_up)


def test_the_front_holds_what_nothing_beats_on_both_p95_and_cpu_cheapest_first():
    cheap, mid, fast = _point("cheap", 2.0, 0.10), _point("mid", 0.5, 0.20), _point("fast", 0.01, 0.50)
    worse = _point("worse", 1.0, 0.30)  # mid is faster for less CPU
    behind = _point("behind", 0.001, 0.05, kept_up=False)  # fast and cheap, but it did not keep up
    twin = _point("twin of mid", 0.5, 0.20)
    assert [p.label for p in front([fast, worse, behind, mid, cheap, twin])] == ["cheap", "mid", "twin of mid", "fast"]


def test_the_best_within_a_budget_is_the_fastest_that_kept_up_for_no_more_cpu():
    shown = [_point("cheap", 2.0, 0.10), _point("fast", 0.01, 0.50), _point("behind", 0.001, 0.05, False)]
    assert best_within(shown, 0.2).label == "cheap" and best_within(shown, math.inf).label == "fast"
    assert best_within(shown, 0.05) is None
