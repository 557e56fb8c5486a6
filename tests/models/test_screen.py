"""Pre-screening on a twin: what the twin expects of a config, and the bar a candidate must reach."""

import pytest

from models.policy import Policy
from models.presets import preset
from models.screen import SCREEN_STEP, TwinScreen, screen_bar
from models.twin import load

FLOOR = Policy().min_throughput_ratio


def test_a_config_keeps_up_on_the_twin_below_its_capacity_and_falls_behind_above_it():
    screen = TwinScreen(load("local-filebeat-kafka"), window_s=5.0)
    assert screen.ratio(preset("defaults"), 300.0) > FLOOR
    assert screen.ratio(preset("defaults"), 60_000.0) < 0.5


def test_the_screen_asks_for_headroom_above_the_offered_load():
    # defaults keep up with 6,870 ev/s on the filebeat-kafka twin (0.8 × their capacity), not with 1.5 × that
    calibration = load("local-filebeat-kafka")
    assert TwinScreen(calibration, headroom=1.0).ratio(preset("defaults"), 6870.0) > FLOOR
    assert TwinScreen(calibration, headroom=1.5).ratio(preset("defaults"), 6870.0) < FLOOR


def test_where_the_twin_expects_every_config_that_kept_up_to_keep_up_the_bar_is_the_policys_floor():
    assert screen_bar([1.0, 0.97], [], FLOOR) == FLOOR


def test_where_the_twin_doubts_a_config_that_kept_up_a_candidate_must_come_within_a_step_of_the_weakest():
    # the pipeline showed both keeping up: the twin's 0.80 for one says the twin is off, not the config
    assert screen_bar([1.0, 0.80], [], FLOOR) == pytest.approx(SCREEN_STEP * 0.80)
    assert screen_bar([0.80], [], FLOOR, step=1.0) == 0.80  # the incumbent's own ratio, no step beyond it


def test_a_candidate_must_rank_above_every_config_that_fell_behind():
    assert screen_bar([0.80], [0.78], FLOOR) > 0.78
    assert screen_bar([1.0], [0.99], FLOOR) > 0.99  # even above the floor: the twin ranks it no better


def test_a_config_that_fell_behind_where_the_twin_ranks_it_above_one_that_kept_up_bars_nothing():
    # the twin put it at 1.15, above the incumbent's 1.05 that kept up: its ranking says nothing there
    assert screen_bar([1.05], [1.15], FLOOR) == FLOOR
    assert screen_bar([1.05], [1.15, 0.97], FLOOR) == pytest.approx(0.97 + 1e-9)
