"""A pool's rollout plan: canaries first, then steps no larger than max_unavailable; bad sizes named."""

import re

import pytest

from models.canary import CanaryOutcome
from models.rollout import CanaryNext, NodeState, NodeVersion, RolloutPlan, canary_next, plan_rollout

POOL = [f"node-{i}" for i in range(1, 8)]


def test_the_canary_goes_first_then_the_rest_in_steps_of_at_most_max_unavailable():
    plan = plan_rollout(POOL, canary_nodes=1, max_unavailable=2)
    assert plan == RolloutPlan(("node-1",), (("node-2", "node-3"), ("node-4", "node-5"), ("node-6", "node-7")))


def test_every_node_is_in_exactly_one_place_of_the_plan_and_the_order_is_kept():
    for canaries in range(1, len(POOL)):
        for width in range(1, len(POOL) + 2):
            plan = plan_rollout(POOL, canaries, width)
            assert len(plan.canary) == canaries
            assert all(1 <= len(step) <= width for step in plan.steps)
            assert list(plan.canary) + [n for step in plan.steps for n in step] == POOL


def test_a_wide_max_unavailable_promotes_the_rest_in_one_step():
    assert plan_rollout(POOL[:3], 1, 10).steps == (("node-2", "node-3"),)


def test_a_pool_of_one_node_is_its_own_canary_with_nothing_left_to_promote():
    assert plan_rollout(["solo"], 1, 1) == RolloutPlan(("solo",), ())


@pytest.mark.parametrize("nodes, canaries, width, message", [
    ([], 1, 1, "nodes: a pool needs at least one node"),
    (["a", "b", "a"], 1, 1, "nodes.2: 'a' appears more than once"),
    (["a", ""], 1, 1, "nodes.1: empty node name"),
    (["a", "b", "c"], 0, 1, "canary_nodes: 0 is outside 1..2 for a pool of 3 node(s)"),
    (["a", "b", "c"], 3, 1, "canary_nodes: 3 is outside 1..2"),
    (["a"], 2, 1, "canary_nodes: 2 is outside 1..1"),
    (["a", "b"], 1, 0, "max_unavailable: 0 is below 1"),
])
def test_bad_plans_name_the_argument_and_its_range(nodes, canaries, width, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        plan_rollout(nodes, canaries, width)


def test_node_versions_record_the_state_by_name_and_refuse_a_bad_record():
    record = NodeVersion("node-1", 3, NodeState("rolled_back"))
    assert record.state is NodeState.ROLLED_BACK and str(record.state) == "rolled_back"
    with pytest.raises(ValueError, match="version: -1 is below 0"):
        NodeVersion("node-1", -1, NodeState.PENDING)
    with pytest.raises(ValueError, match="node: must be a non-empty"):
        NodeVersion("", 1, NodeState.PENDING)


@pytest.mark.parametrize("outcome, windows, expected", [
    (CanaryOutcome.BETTER, 1, CanaryNext.PROMOTE),
    (CanaryOutcome.WORSE, 1, CanaryNext.ROLL_BACK),
    (CanaryOutcome.UNCLEAR, 1, CanaryNext.EXTEND),
    (CanaryOutcome.UNCLEAR, 2, CanaryNext.EXTEND),
    (CanaryOutcome.UNCLEAR, 3, CanaryNext.ROLL_BACK),
    (CanaryOutcome.BETTER, 3, CanaryNext.PROMOTE),
])
def test_an_unclear_canary_runs_another_window_until_the_bound_then_goes_back(outcome, windows, expected):
    assert canary_next(outcome, windows, max_windows=3) is expected


def test_a_canary_window_count_outside_its_bound_is_refused():
    with pytest.raises(ValueError, match=re.escape("windows: 4 is outside 1..3 (max_windows)")):
        canary_next(CanaryOutcome.UNCLEAR, 4, 3)
