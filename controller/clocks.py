"""Each node's clock offset, from NTP-style exchanges with its agent; written where the probe reads it.

The maths is `models.clock_offset` (pure); here are the exchanges over HTTP and the offsets file. The
offset is the node's clock minus this host's: the probe, on this host's clock, takes it off each
node's event times.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Callable, Mapping, Protocol

import httpx

from agents.client import AgentError
from controller.state import ClockOffsetReport
from models.clock_offset import ClockOffset, Exchange, estimate, offsets_document

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
