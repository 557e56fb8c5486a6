"""A node's clock offset from NTP-style exchanges, and the offsets file the probe applies.

One exchange: here at `t0` we ask the node its time, it answers `t_node`, here it is `t1` when the
answer is back. If the request and the answer took equally long, the node read its clock at
(t0 + t1) / 2 of ours, so offset = t_node − (t0 + t1) / 2, and whatever the split of the round trip,
the true offset lies within ± (t1 − t0) / 2 of it. Of several exchanges the one with the shortest
round trip has the tightest bound.

A node's clock that moves against ours between two estimates (a step: NTP setting it, an operator, a VM resumed;
or drift) moves its events' latencies by as much until the offset is measured again: `ClockMove` says whether a
window's figure can be trusted.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Iterable

WARN_ABOVE_S = 0.050  # an offset this large skews latencies measured across nodes: said in status and log
# A clock that moves this share of a window's P95 moves the window's figure up to as much: the learner's own noise
# level (5 % of the P95), below which a window's figure cannot tell configs apart anyway.
MOVE_SHARE_OF_P95 = 0.05
# How fast a clock may drift from ours (NTP's frequency tolerance, 500 ppm): an estimate's bound widens by as much
# a second as it ages.
MAX_DRIFT = 500e-6
_EPOCH_STEP_S = 1e-6  # a float epoch time's step is 0.24 us: an estimate at its bound may exceed it by as much


@dataclass(frozen=True)
class Exchange:
    """One request for a node's time: sent at `t0_s`, answered `t_node_s`, answer back at `t1_s`."""

    t0_s: float
    t_node_s: float
    t1_s: float

    @property
    def round_trip_s(self) -> float:
        return self.t1_s - self.t0_s


@dataclass(frozen=True)
class ClockOffset:
    """Node clock minus ours, with its error bound (half the round trip it was measured over)."""

    offset_s: float
    error_s: float
    measured_at: float

    @property
    def correction_s(self) -> float:
        """What the probe takes off the node's stamps: the offset, or none when the exchange cannot tell it from
        none (within its bound). On one host the estimate reads +0.03-0.26 ms against a bound of 0.6-1 ms (the
        agent reads its clock late in the round trip); taken off, it put every latency that much high, 3-17 % of a
        3 ms P95 (docs/foreign.md)."""
        return 0.0 if abs(self.offset_s) <= self.error_s + _EPOCH_STEP_S else self.offset_s

    def warning(self, node: str) -> str | None:
        """A sentence for the status and the decision log when the offset is large, else None."""
        if abs(self.offset_s) <= WARN_ABOVE_S:
            return None
        return (f"node {node}: clock {self.offset_s * 1000:+.0f} ms off (± {self.error_s * 1000:.0f} ms, above "
                f"{WARN_ABOVE_S * 1000:.0f} ms): latencies from this node are corrected by it")


@dataclass(frozen=True)
class ClockMove:
    """How far a node's clock moved against ours between two estimates, and the error bound of that figure.
    `before_window`: found by the measurement that ended the window before; the probe applies the offset written
    then at its next bookkeeping (once a second) and Prometheus scrapes it after that, so the first second or so of
    this window is still read on the old offset."""

    moved_s: float
    error_s: float
    before_window: bool = False

    def disturbs(self, p95_s: float, resolution_s: float) -> bool:
        """Whether events measured across the move have latencies off by enough to put a window's P95 off: the
        move exceeds its error bound by more than `MOVE_SHARE_OF_P95` of the P95, and by more than the event
        time's resolution (a move inside one step of the stamps cannot show)."""
        allowed = max(resolution_s, MOVE_SHARE_OF_P95 * p95_s if math.isfinite(p95_s) else 0.0)
        return abs(self.moved_s) - self.error_s > allowed


def larger(first: ClockMove | None, second: ClockMove) -> ClockMove:
    """The move that says more: the one whose size exceeds its error bound by more."""
    if first is None or abs(second.moved_s) - second.error_s > abs(first.moved_s) - first.error_s:
        return second
    return first


def refined(previous: ClockOffset | None, fresh: ClockOffset) -> ClockOffset:
    """The offset to correct by after a fresh estimate: the previous one while it is the tighter (its bound widened
    by the drift its age allows) and the fresh one agrees with it within both bounds, else the fresh one. A busy
    node answers late, and its estimate, as wide as that round trip, would put latencies off by up to as much."""
    if previous is None:
        return fresh
    aged_error_s = previous.error_s + MAX_DRIFT * max(fresh.measured_at - previous.measured_at, 0.0)
    agrees = abs(fresh.offset_s - previous.offset_s) <= fresh.error_s + aged_error_s
    return replace(previous, error_s=aged_error_s) if agrees and aged_error_s < fresh.error_s else fresh


def moved(before: ClockOffset, after: ClockOffset) -> ClockMove:
    """The move of a node's clock from one estimate to a later one; their error bounds add up."""
    return ClockMove(after.offset_s - before.offset_s, before.error_s + after.error_s)


def estimate(exchanges: Iterable[Exchange]) -> ClockOffset:
    """The offset from the exchange with the shortest round trip; raises `ValueError` with none valid."""
    valid = [e for e in exchanges if e.round_trip_s >= 0]
    if not valid:
        raise ValueError("no clock exchange to estimate from")
    best = min(valid, key=lambda e: e.round_trip_s)
    return ClockOffset(best.t_node_s - (best.t0_s + best.t1_s) / 2, best.round_trip_s / 2, best.t1_s)


def offsets_document(offsets: dict[str, ClockOffset]) -> dict:
    """The offsets file's content (JSON): `{"nodes": {node: {offset_s, error_s, measured_at}}}`."""
    return {"nodes": {node: asdict(offset) for node, offset in sorted(offsets.items())}}


def offsets_from_document(document: object) -> dict[str, ClockOffset]:
    """Read an offsets file's content; raises `ValueError` naming the node and field that is wrong."""
    if not isinstance(document, dict) or not isinstance(document.get("nodes"), dict):
        raise ValueError('clock offsets: expected {"nodes": {NODE: {"offset_s": ..., "error_s": ...}}}')
    out = {}
    for node, entry in document["nodes"].items():
        try:
            out[str(node)] = ClockOffset(float(entry["offset_s"]), float(entry.get("error_s", 0.0)),
                                         float(entry.get("measured_at", 0.0)))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ValueError(f"clock offsets: nodes.{node}: needs a number offset_s (and error_s)") from None
    return out
