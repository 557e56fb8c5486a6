"""Heartbeat sequence bookkeeping: gaps lost only after the grace, duplicates, a restarted writer."""

import pytest

from agents.probe.heartbeats import RESET_BELOW, HeartbeatTracker


def test_gap_filled_within_the_grace_is_not_lost():
    tracker = HeartbeatTracker(grace_s=30)
    for seq, now in [(10, 0.0), (13, 1.0), (12, 20.0)]:
        assert not tracker.record("n", seq, now)
    assert tracker.pending("n") == 1 and tracker.expire(30.9) == {}
    assert tracker.expire(31.0) == {"n": 1} and tracker.expire(100.0) == {}


def test_duplicates_and_nodes_are_apart():
    tracker = HeartbeatTracker(grace_s=5)
    assert not tracker.record("a", 1, 0.0) and not tracker.record("b", 1, 0.0)
    assert tracker.record("a", 1, 0.1)
    assert not tracker.record("a", 2, 0.2) and tracker.expire(10.0) == {}


def test_a_writer_that_lost_its_state_starts_a_new_count_not_a_flood_of_duplicates():
    tracker = HeartbeatTracker(grace_s=5)
    tracker.record("n", RESET_BELOW + 500, 0.0)
    assert not tracker.record("n", 0, 1.0) and not tracker.record("n", 1, 1.1)
    assert tracker.resets["n"] == 1 and tracker.expire(100.0) == {}


def test_grace_must_be_positive():
    with pytest.raises(ValueError, match="grace"):
        HeartbeatTracker(grace_s=0)
