"""The operator's consumer group lag, read through Kafka's admin API (confluent_kafka's AdminClient).

Lag = end offsets − committed offsets over every partition of the topics the group has committed on
(a partition the group never committed counts from its earliest offset). A group commits in steps (a
consumer's auto-commit interval, a Spark batch), so its lag is a saw-tooth even when it keeps up: the
`LagWatch` samples it every second and a window's lag is the smallest sample over the last two commit
intervals, the floor that grows only when the group falls behind.
"""

from __future__ import annotations

import atexit
import logging
import math
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from controller.pipelines import PipelineUnavailable

SAMPLE_INTERVAL_S = 1.0
KEPT_SAMPLES = 3600  # an hour at one a second: longer than any window


class LagUnknown(PipelineUnavailable):
    """The group's lag cannot be read (the brokers do not answer, or no sample covers the window)."""


@dataclass(frozen=True)
class LagSample:
    """The group's offsets at one moment, summed over its partitions."""

    at_s: float
    committed: int
    end: int

    @property
    def lag_events(self) -> int:
        return max(self.end - self.committed, 0)


class LagReader(Protocol):
    def sample(self) -> LagSample:
        """The group's offsets now; `LagUnknown` when Kafka does not answer."""
        ...

    def close(self) -> None:
        """Let go of the connection to Kafka."""
        ...


class GroupLag:
    """A `LagReader` of one consumer group through the admin client."""

    def __init__(self, bootstrap: str, group: str, *, timeout_s: float = 5.0, clock=time.time) -> None:
        self.group = group
        self.timeout_s = timeout_s
        self.clock = clock
        self.bootstrap = bootstrap
        self._admin: AdminClient | None = None

    @property
    def admin(self) -> AdminClient:
        """Connected on first use: a deployment loaded only to be checked never reaches Kafka."""
        if self._admin is None:
            # librdkafka's own log (a broker away: every reconnect) goes to logging, not to the terminal.
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap, "client.id": "pipetune-lag",
                                       "logger": logging.getLogger("pipetune.kafka_lag")})
        return self._admin

    def close(self) -> None:
        """Drop the admin client, so librdkafka is torn down now, in this thread, and not by the interpreter's
        last collection, with its threads still running under a dying process (a segfault in rdk:main)."""
        self._admin = None

    def committed(self) -> dict[TopicPartition, int]:
        """The group's committed offset per partition (-1: none yet) over every partition of its topics."""
        futures = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(self.group)],
                                                         request_timeout=self.timeout_s)
        committed = {TopicPartition(tp.topic, tp.partition): tp.offset
                     for tp in futures[self.group].result().topic_partitions}
        if not committed:  # a lag of 0 would hide a misspelt group: say so instead
            raise LagUnknown(f"consumer group {self.group!r} has committed no offsets (is kafka.consumer_group "
                             f"the group that reads the pipeline's topic?)")
        for topic in {tp.topic for tp in committed}:
            metadata = self.admin.list_topics(topic=topic, timeout=self.timeout_s).topics[topic]
            for partition in metadata.partitions:
                committed.setdefault(TopicPartition(topic, partition), -1)
        return committed

    def sample(self) -> LagSample:
        at_s = self.clock()
        try:
            committed = self.committed()
            end = self._offsets(committed, OffsetSpec.latest())
            never = [tp for tp, offset in committed.items() if offset < 0]
            earliest = self._offsets(never, OffsetSpec.earliest()) if never else {}
        except KafkaException as err:
            raise LagUnknown(f"consumer group {self.group!r}: lag not readable ({err.args[0]})") from err
        position = {tp: offset if offset >= 0 else earliest[tp] for tp, offset in committed.items()}
        return LagSample(at_s, sum(position.values()), sum(end[tp] for tp in committed))

    def _offsets(self, partitions, spec: OffsetSpec) -> dict[TopicPartition, int]:
        futures = self.admin.list_offsets({tp: spec for tp in partitions}, request_timeout=self.timeout_s)
        return {TopicPartition(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}


def lag_floor(samples: list[LagSample], start_s: float, end_s: float, span_s: float) -> float:
    """The smallest lag sampled in the last `span_s` of [start_s, end_s] (the whole window when shorter);
    NaN when no sample falls there."""
    since = max(start_s, end_s - span_s)
    inside = [s.lag_events for s in samples if since <= s.at_s <= end_s]
    return float(min(inside)) if inside else math.nan


class LagWatch:
    """Samples a group's lag every `interval_s` from a thread, from its first use until `close()`, or the
    interpreter's exit; `lag_events(start, end)` is the window's floor over `span_s` (twice the group's commit
    interval). The first window has one sample, taken then (no window before it to compare its backlog with)."""

    def __init__(self, reader: LagReader, span_s: float, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.reader = reader
        self.span_s = span_s
        self.interval_s = interval_s
        self._samples: deque[LagSample] = deque(maxlen=KEPT_SAMPLES)
        self._failure: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pipetune-lag", daemon=True)
        _OPEN.add(self)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                sample = self.reader.sample()
                with self._lock:
                    self._samples.append(sample)
                    self._failure = None
            except LagUnknown as err:
                with self._lock:
                    self._failure = str(err)

    def lag_events(self, start_s: float, end_s: float) -> float:
        """The window's lag floor; `LagUnknown` (saying why) when no sample covers it."""
        if self._thread.ident is None and not self._stop.is_set():  # first use
            first = self.reader.sample()  # LagUnknown when Kafka does not answer
            with self._lock:
                self._samples.append(first)
            self._thread.start()
            end_s = max(end_s, first.at_s)
        with self._lock:
            floor = lag_floor(list(self._samples), start_s, end_s, self.span_s)
            failure = self._failure
        if math.isnan(floor):
            raise LagUnknown(failure or f"consumer group lag: no sample in the last {self.span_s:g} s of the window")
        return floor

    def close(self) -> None:
        """Stop sampling, then let go of Kafka."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.reader.close()
        _OPEN.discard(self)


# A watch left open would be stopped by the interpreter's exit in the middle of a librdkafka call while the
# admin client is torn down under it: a segfault (seen at the end of a test session). Each is closed first.
_OPEN: "weakref.WeakSet[LagWatch]" = weakref.WeakSet()


@atexit.register
def close_open_watches() -> None:
    """Close every watch still open: at the interpreter's exit, and before the brokers they sample go away (the
    test session's Kafka: librdkafka crashed in rdk:main with a watch still sampling them, session 17)."""
    for watch in list(_OPEN):
        watch.close()
