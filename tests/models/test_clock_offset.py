"""A node's clock moving between two offset estimates: a move the window's P95 cannot bear disturbs it; one within
the estimates' error, the event time's resolution or 5 % of the P95 does not."""

import math

import pytest

from models.clock_offset import MOVE_SHARE_OF_P95, ClockMove, ClockOffset, moved


def test_a_move_is_the_later_offset_minus_the_earlier_with_both_error_bounds():
    move = moved(ClockOffset(0.010, 0.001, 100.0), ClockOffset(2.012, 0.002, 110.0))
    assert move.moved_s == pytest.approx(2.002) and move.error_s == pytest.approx(0.003)


@pytest.mark.parametrize("moved_s", [2.0, -2.0])
def test_a_two_second_step_either_way_disturbs_a_window_of_any_p95_it_could_hide_in(moved_s):
    for p95_s in (0.005, 0.060, 1.0, 10.0, math.nan):
        assert ClockMove(moved_s, 0.002).disturbs(p95_s, 0.001)


def test_a_move_beyond_5_percent_of_the_p95_disturbs_and_one_within_it_does_not():
    p95_s, error_s = 0.200, 0.001
    bearable = MOVE_SHARE_OF_P95 * p95_s + error_s
    assert not ClockMove(bearable - 1e-4, error_s).disturbs(p95_s, 0.001)
    assert ClockMove(-(bearable + 1e-4), error_s).disturbs(p95_s, 0.001)


def test_a_move_inside_the_error_bound_or_one_step_of_the_stamps_never_disturbs():
    assert not ClockMove(0.004, 0.005).disturbs(0.010, 0.001)  # the estimates cannot tell it from none
    assert not ClockMove(0.8, 0.001).disturbs(0.5, 1.0)  # `time_local` stamps: whole seconds
    assert not ClockMove(0.0005, 0.0).disturbs(math.nan, 0.001)  # no P95 (no events): the resolution still holds
