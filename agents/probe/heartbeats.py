"""Lost and duplicated heartbeats per node, by sequence number (the method of LinkedIn's Kafka Monitor).

A sequence number above the highest seen opens a gap for the numbers skipped; a gap still open
`grace_s` after it was seen counts as lost, so a heartbeat that is merely slower than the next one (two
harvesters, a partition) is not called lost. A number seen before is a duplicate. A number far below
the highest (the agent lost its state and started again) restarts the node's count.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

RESET_BELOW = 100_000  # a sequence this far under the highest is a restarted writer, not a duplicate


@dataclass
class _Node:
    highest: int
    seen: set[int] = field(default_factory=set)  # numbers above highest - RESET_BELOW
    pending: dict[int, float] = field(default_factory=dict)  # skipped number -> when the gap was seen


class HeartbeatTracker:
    """Per-node sequence bookkeeping; `record` each heartbeat, `expire` once in a while."""

    def __init__(self, grace_s: float) -> None:
        if grace_s <= 0:
            raise ValueError(f"heartbeat grace must be > 0 s, got {grace_s}")
        self.grace_s = grace_s
        self._nodes: dict[str, _Node] = {}
        self.resets: dict[str, int] = defaultdict(int)

    def record(self, node: str, seq: int, now: float) -> bool:
        """Count one heartbeat; says whether it duplicates one already seen."""
        state = self._nodes.get(node)
        if state is None or seq < state.highest - RESET_BELOW:
            if state is not None:
                self.resets[node] += 1
            self._nodes[node] = _Node(highest=seq, seen={seq})
            return False
        if seq in state.seen:
            return True
        state.seen.add(seq)
        if seq > state.highest:
            state.pending.update(dict.fromkeys(range(state.highest + 1, seq), now))
            state.highest = seq
            floor = seq - RESET_BELOW
            if len(state.seen) > 2 * RESET_BELOW:
                state.seen = {s for s in state.seen if s >= floor}
        else:
            state.pending.pop(seq, None)  # a late one fills its gap
        return False

    def expire(self, now: float) -> dict[str, int]:
        """Heartbeats lost per node: gaps older than the grace (each counted once, then forgotten)."""
        lost: dict[str, int] = {}
        for node, state in self._nodes.items():
            due = [seq for seq, seen_at in state.pending.items() if now - seen_at >= self.grace_s]
            for seq in due:
                del state.pending[seq]
            if due:
                lost[node] = len(due)
        return lost

    def pending(self, node: str) -> int:
        """Skipped numbers of a node still within their grace."""
        state = self._nodes.get(node)
        return len(state.pending) if state else 0
