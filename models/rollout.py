"""A pool's rollout of a new config: the canary nodes first, then the rest in steps, and each node's record.

`plan_rollout` says which nodes take a candidate and in which order; `canary_next` what a canary's
judgement leads to; `NodeVersion` is what the daemon persists per node (which config version it runs,
and where that node stands in the rollout), so that a restart in the middle of a promotion knows what
each node runs and can finish or revert it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Sequence

from models.canary import CanaryOutcome


class NodeState(StrEnum):
    PENDING = "pending"  # waits for its step of a promotion
    CANARY = "canary"  # runs the candidate, being judged against the controls
    PROMOTED = "promoted"  # runs the candidate, health-checked after its step
    ROLLED_BACK = "rolled_back"  # back on the config it ran before the candidate
    FAILED = "failed"  # failed health on the candidate and could not be rolled back: needs a person
    # its agent did not answer a change (or could not take one: not healthy): on `version` or the config asked
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class NodeVersion:
    """Which config version `node` runs and where it stands in the pool's rollout; `judgement`: what its
    promotion step's window said of it (empty for a node not judged on its own)."""

    node: str
    version: int
    state: NodeState
    judgement: str = ""

    def __post_init__(self) -> None:
        if not self.node:
            raise ValueError("node: must be a non-empty node name")
        if self.version < 0:
            raise ValueError(f"version: {self.version} is below 0")


@dataclass(frozen=True)
class RolloutPlan:
    """The canary nodes, then the steps that promote the candidate to the rest of the pool, in order."""

    canary: tuple[str, ...]
    steps: tuple[tuple[str, ...], ...]


def plan_rollout(nodes: Sequence[str], canary_nodes: int, max_unavailable: int) -> RolloutPlan:
    """The first `canary_nodes` of `nodes` as canaries, the others in steps of at most `max_unavailable`,
    in the order given. A pool of one node is its own canary (it has no controls to be judged against)."""
    names = tuple(nodes)
    if not names:
        raise ValueError("nodes: a pool needs at least one node")
    seen: set[str] = set()
    for i, name in enumerate(names):
        if not name:
            raise ValueError(f"nodes.{i}: empty node name")
        if name in seen:
            raise ValueError(f"nodes.{i}: {name!r} appears more than once")
        seen.add(name)
    most = max(len(names) - 1, 1)
    if not 1 <= canary_nodes <= most:
        raise ValueError(f"canary_nodes: {canary_nodes} is outside 1..{most} for a pool of {len(names)} node(s)")
    if max_unavailable < 1:
        raise ValueError(f"max_unavailable: {max_unavailable} is below 1")
    rest = names[canary_nodes:]
    return RolloutPlan(names[:canary_nodes],
                       tuple(rest[i:i + max_unavailable] for i in range(0, len(rest), max_unavailable)))


class CanaryNext(StrEnum):
    PROMOTE = "promote"
    EXTEND = "extend"  # unclear: the canary runs one more window and is judged again over all of them
    ROLL_BACK = "roll_back"


def canary_next(outcome: CanaryOutcome, windows: int, max_windows: int) -> CanaryNext:
    """What a canary judged `outcome` over its first `windows` windows leads to: better is promoted, worse
    rolled back, unclear judged again with one more window until `max_windows` (as Kayenta's canary
    analysis runs several intervals): noise that hides an effect in one window shrinks over more, and
    only a canary still unclear after them is rolled back."""
    if not 1 <= windows <= max_windows:
        raise ValueError(f"windows: {windows} is outside 1..{max_windows} (max_windows)")
    if outcome is CanaryOutcome.BETTER:
        return CanaryNext.PROMOTE
    if outcome is CanaryOutcome.UNCLEAR and windows < max_windows:
        return CanaryNext.EXTEND
    return CanaryNext.ROLL_BACK
