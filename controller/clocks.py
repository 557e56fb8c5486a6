"""Each node's clock offset, from NTP-style exchanges with its agent; written where the probe reads it.

The maths is `models.clock_offset` (pure); here are the exchanges over HTTP and the offsets file. The
offset is the node's clock minus this host's: the probe, on this host's clock, takes it off each
node's event times. `NodeClocks` measures them as a window starts and again as it ends, and says how far each
clock moved in between (or since the last window ended): a window a clock stepped in is disturbed
(models.disturbance.clock_disturbance), and so is the next one, whose first second or so the probe still reads on
the offset from before the step (it re-reads the file once a second, Prometheus scrapes it after that).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Mapping, Protocol

import httpx

from agents.client import AgentError
from controller.state import ClockOffsetReport
from models.clock_offset import (ClockMove, ClockOffset, Exchange, estimate, larger, moved, offsets_document,
                                 refined)

log = logging.getLogger("pipetune.clocks")
EXCHANGES = 5  # the shortest of five round trips: a stray slow answer costs nothing


class NodeClock(Protocol):
    """What an offset estimate needs of a node: its agent's `clock()` (agents.client.AgentClient)."""

    def clock(self) -> float: ...


def measure_offset(node: NodeClock, exchanges: int = EXCHANGES, clock: Callable[[], float] = time.time
                   ) -> ClockOffset:
    """The node's offset from `exchanges` timed requests for its time."""
    samples = []
    for _ in range(exchanges):
        t0 = clock()
        t_node = node.clock()
        samples.append(Exchange(t0, t_node, clock()))
    return estimate(samples)


def measure_offsets(nodes: Mapping[str, NodeClock], clock: Callable[[], float] = time.time
                    ) -> dict[str, ClockOffset]:
    """Every reachable node's offset; a node that does not answer is left out (and logged)."""
    out = {}
    for name, node in nodes.items():
        try:
            out[name] = measure_offset(node, clock=clock)
        except (httpx.HTTPError, AgentError, ValueError, KeyError) as err:
            log.warning("clock of node %s not measured: %s", name, err)
    return out


class NodeClocks:
    """Each node's clock offset as last measured, the offsets file the probe reads, and the largest move of each
    clock between two measurements since `moves` was last asked."""

    def __init__(self, nodes: Mapping[str, NodeClock], path: Path | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.nodes = nodes
        self.path = path
        self.clock = clock
        self.offsets: dict[str, ClockOffset] = {}  # a node that stops answering keeps its last one in the file
        self._moves: dict[str, ClockMove] = {}
        self._last: dict[str, ClockMove] = {}  # what the last measurement found each clock moved by
        self._ended: dict[str, ClockMove] = {}  # what the measurement that ended the window before found

    def measure(self) -> dict[str, ClockOffset]:
        """Measure every reachable node's offset now and write all known ones where the probe reads them (it
        corrects from then on); returns those of the nodes just measured (`refined`: a wide estimate that adds
        nothing keeps the tighter one before it)."""
        fresh = measure_offsets(self.nodes, self.clock)
        self._last = {}
        for node, offset in fresh.items():
            if node in self.offsets:
                self._last[node] = move = moved(self.offsets[node], offset)
                self._moves[node] = larger(self._moves.get(node), move)
            self.offsets[node] = refined(self.offsets.get(node), offset)
        if self.path is not None and self.offsets:
            write_offsets(self.path, self.offsets)
        return {node: self.offsets[node] for node in fresh}

    def moves(self) -> dict[str, ClockMove]:
        """Each node's largest move between two measurements since this was last asked (asked as a window ends,
        after its last measurement), or, marked `before_window`, the move the measurement that ended the window
        before found, when that says more: the probe read this window's first second or so on the offset from
        before it."""
        found, self._moves = self._moves, {}
        for node, move in self._ended.items():
            found[node] = larger(found.get(node), move)
        self._ended = {node: replace(move, before_window=True) for node, move in self._last.items()}
        self._last = {}
        return found


def write_offsets(path: Path, offsets: dict[str, ClockOffset]) -> None:
    """Write the offsets file atomically (the probe re-reads it when it changes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(offsets_document(offsets), indent=1))
    os.replace(tmp, path)


def offset_warnings(offsets: dict[str, ClockOffset]) -> list[str]:
    """A sentence per node whose clock is off by more than `models.clock_offset.WARN_ABOVE_S`, for the
    decision log."""
    return [w for node, offset in sorted(offsets.items()) if (w := offset.warning(node)) is not None]


def offset_reports(offsets: dict[str, ClockOffset]) -> dict[str, ClockOffsetReport]:
    """`Status.clock_offsets`: every node's offset, with its warning when it is large."""
    return {node: ClockOffsetReport(offset_s=o.offset_s, error_s=o.error_s, measured_at=o.measured_at,
                                    warning=o.warning(node)) for node, o in sorted(offsets.items())}
