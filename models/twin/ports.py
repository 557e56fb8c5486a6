"""The seams between the twin's parts: what each part calls on its neighbours, and nothing more.

Work flows down (harvester -> memory queue -> output -> Logstash or the broker -> sink); room and
acknowledgements flow back up (the queue wakes its reader, the receiver ACKs the output). A part is
given its neighbours as these ports, so it can be built and driven alone against stubs.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

Segment = tuple[float, int, int]  # records [lo, hi) appended to the broker at a time (which may lie ahead)


class EventQueue(Protocol):
    """Where the harvester publishes the events it reads (Filebeat's memory queue)."""

    def space(self) -> int:
        """Events it can take before the reader must block."""

    def insert(self, lo: int, hi: int, times: np.ndarray) -> None:
        """Events [lo, hi), read at `times`, enter the queue (lo is the end of what it holds)."""


class Reader(Protocol):
    """The part that fills a queue and blocks when it is full."""

    def wake(self) -> None:
        """The queue has room again."""


class Consumer(Protocol):
    """The part that drains a queue."""

    def kick(self) -> None:
        """New events may be visible: look again."""


class Source(Protocol):
    """A queue as its consumer sees it: events become visible, are taken in batches, are ACKed."""

    def next_available(self) -> float:
        """When the earliest waiting event is visible (inf: none waits)."""

    def take(self, max_events: int, t_s: float) -> tuple[int, int]:
        """Up to `max_events` events visible at `t_s`, as an index range."""

    def ack(self, lo: int) -> None:
        """The batch taken from `lo` is acknowledged."""


class Receiver(Protocol):
    """What Filebeat's output sends batches to (Logstash's beats input, or the Kafka broker)."""

    def receive(self, lo: int, hi: int, arrive_s: float, conn: int) -> None:
        """Events [lo, hi) arrive at `arrive_s` on connection `conn`."""


class Sender(Protocol):
    """The part a receiver ACKs (Filebeat's output)."""

    def acked(self, lo: int) -> None:
        """The batch that began at `lo` is acknowledged."""


class Sink(Protocol):
    """The end of the pipeline, reading what the broker appended."""

    def add(self, segments: list[Segment]) -> None:
        """Records [lo, hi) of each segment are appended at its time."""
