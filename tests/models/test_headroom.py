"""The spare CPU of a window that kept up, as the margin the throughput model learns."""

import math

import pytest

from models.headroom import SPARE_MAX, spare_margins

FLOOR = -0.05  # the default policy's: output 95 % of input


def test_a_window_that_kept_up_is_told_the_share_of_the_cores_it_left_unused_up_to_a_cap():
    margins = spare_margins([0.9, 0.8, 0.1], [0.0, 0.0, 0.0], FLOOR)
    assert margins.tolist() == pytest.approx([0.1, 0.2, SPARE_MAX])


def test_a_window_that_kept_up_on_all_the_cores_or_more_had_nothing_spare():
    # a twin charges its slowdown as CPU time; a node's counters can overshoot by a scrape's jitter
    assert spare_margins([1.0, 1.4], [0.0, -0.01], FLOOR).tolist() == pytest.approx([0.0, -0.01])


def test_the_spare_counts_less_the_closer_a_window_came_to_falling_behind_and_not_at_all_beyond():
    # a hair short (events in flight at its edges) is still far from the cliff with the cores half idle;
    # on the policy's floor or below, the window fell behind whatever the CPU did
    margins = spare_margins([0.5, 0.5, 0.5, 0.2], [-0.01, -0.025, FLOOR, -0.4], FLOOR)
    assert margins.tolist() == pytest.approx([-0.01 + 0.8 * SPARE_MAX, -0.025 + 0.5 * SPARE_MAX, FLOOR, -0.4])


def test_a_window_whose_share_is_unknown_keeps_its_margin():
    assert spare_margins([math.nan, math.nan], [0.0, -0.3], FLOOR).tolist() == pytest.approx([0.0, -0.3])
