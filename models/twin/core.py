"""What every part of the twin shares: the clock, the node's CPU, service-time noise, the per-event stamps.

Events are indexed by write order and every stage is FIFO, so a stage's contents are an index range
and a batch is a slice: handlers cost per batch, not per event, and stamps are numpy slice writes.
`Env` bundles these with the calibration; each part is given one at construction.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from models.twin.calibration import Calibration

COMPONENTS = ("writer", "filebeat", "logstash", "kafka", "sink")


class Clock:
    """A discrete-event scheduler: `at(t, fn, arg)` runs `fn(arg)` at simulated time `t`."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[Any], None], Any]] = []
        self._seq = 0

    def at(self, t_s: float, fn: Callable[[Any], None], arg: Any = None) -> None:
        heapq.heappush(self._heap, (max(t_s, self.now), self._seq, fn, arg))
        self._seq += 1

    def run_until(self, t_s: float) -> None:
        heap = self._heap
        pop = heapq.heappop
        while heap and heap[0][0] <= t_s:
            t, _, fn, arg = pop(heap)
            self.now = t
            fn(arg)
        self.now = max(self.now, t_s)


class Cpu:
    """The node's cores, shared by every component.

    Work is charged to the slice in which it starts. A slice whose demand exceeds the cores slows
    every service that starts in the next slice by demand / cores (processor sharing, one slice late),
    so CPU-heavy settings lower every component's capacity at once.
    """

    def __init__(self, cores: float, background_cores: float, slice_s: float, horizon_s: float) -> None:
        self.cores = cores
        self.background_cores = background_cores
        self.slice_s = slice_s
        n = int(horizon_s / slice_s) + 8
        # CPU seconds per slice by component name, in COMPONENTS order; plain lists: the hot path adds
        # one float at a time, which numpy indexing makes slow
        self._used = {name: [0.0] * n for name in COMPONENTS}
        self._packets = [0.0] * n
        self._cached = (-1, 1.0)

    def slot(self, t_s: float) -> int:
        k = int(t_s / self.slice_s)
        if k >= len(self._packets):
            grow = max(k + 8, 2 * len(self._packets)) - len(self._packets)
            for row in self._used.values():
                row.extend([0.0] * grow)
            self._packets.extend([0.0] * grow)
        return k

    def charge(self, component: str, t_s: float, cpu_s: float) -> None:
        """Charge `cpu_s` to `component` (a name in COMPONENTS) in the slice holding `t_s`."""
        self._used[component][self.slot(t_s)] += cpu_s

    def charge_many(self, component: str, t_s: np.ndarray, cpu_s: float) -> None:
        """Charge `cpu_s` for each time in `t_s` (sorted)."""
        if t_s.size:
            self.slot(float(t_s[-1]))
            counts = np.bincount((t_s / self.slice_s).astype(np.int64))
            row = self._used[component]
            for k in np.flatnonzero(counts).tolist():
                row[k] += counts[k] * cpu_s

    def send(self, t_s: float, packets: float) -> None:
        self._packets[self.slot(t_s)] += packets

    def slowdown(self, t_s: float) -> float:
        k = int(t_s / self.slice_s)
        if k == self._cached[0]:
            return self._cached[1]
        value = 1.0
        if k >= 1:
            self.slot(t_s)
            demand = sum(row[k - 1] for row in self._used.values()) / self.slice_s + self.background_cores
            value = demand / self.cores if demand > self.cores else 1.0
        self._cached = (k, value)
        return value

    def used(self, first: int, last: int) -> np.ndarray:
        """CPU seconds per component (in COMPONENTS order) charged in slices [first, last)."""
        self.slot(last * self.slice_s)
        return np.array([sum(row[first:last]) for row in self._used.values()])

    def packets(self, first: int, last: int) -> float:
        self.slot(last * self.slice_s)
        return float(sum(self._packets[first:last]))


class Jitter:
    """Multiplicative service-time noise with mean 1, drawn up front so the hot path stays cheap."""

    def __init__(self, rng: np.random.Generator, cv: float, size: int = 1 << 16) -> None:
        sigma = math.sqrt(math.log1p(cv * cv))
        self._values = rng.lognormal(-sigma * sigma / 2, sigma, size).tolist() if cv > 0 else [1.0]
        self._i = 0

    def __call__(self) -> float:
        self._i = (self._i + 1) % len(self._values)
        return self._values[self._i]


@dataclass
class Stamps:
    """When each event passed each point (inf: not yet). Index = write order."""

    write: np.ndarray
    read: np.ndarray
    sent: np.ndarray
    ls_in: np.ndarray
    ls_out: np.ndarray
    kafka: np.ndarray
    sink: np.ndarray

    @classmethod
    def empty(cls, write_s: np.ndarray) -> "Stamps":
        n = write_s.size
        return cls(write_s, *(np.full(n, np.inf) for _ in range(6)))


@dataclass(frozen=True)
class Env:
    """The shared run every part is given: it schedules on `clock`, charges `cpu` by component name,
    multiplies service times by `jitter()`, costs work by `calibration` and writes `stamps`."""

    clock: Clock
    cpu: Cpu
    jitter: Jitter
    calibration: Calibration
    stamps: Stamps

    @classmethod
    def create(cls, calibration: Calibration, write_s: np.ndarray, rng: np.random.Generator) -> "Env":
        """A fresh run at time 0 for events written at `write_s`; draws the jitter from `rng`."""
        horizon_s = float(write_s[-1]) + 120.0 if write_s.size else 120.0
        node = calibration.node
        cpu = Cpu(node.cores, node.background_cores, node.slowdown_slice_s, horizon_s)
        return cls(Clock(), cpu, Jitter(rng, calibration.jitter_cv), calibration, Stamps.empty(write_s))


def packets_for(payload_bytes: float, mss_bytes: int) -> int:
    """Segments of one request plus the segment carrying its response/ACK."""
    return max(1, math.ceil(payload_bytes / mss_bytes)) + 1
