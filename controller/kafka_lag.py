"""The operator's consumer group lag, read through Kafka's admin API (kafka-python's KafkaAdminClient).

Lag = end offsets − committed offsets over every partition of the topics the group has committed on
(a partition the group never committed counts from its earliest offset). A group commits in steps (a
consumer's auto-commit interval, a Spark batch), so its lag is a saw-tooth even when it keeps up: the
`LagWatch` samples it every second and a window's lag is the smallest sample over the last two commit
intervals, the floor that grows only when the group falls behind. How far that floor rose within a window
(`lag_rise`) is said beside a window the cluster disturbed (models.disturbance).

kafka-python, not librdkafka: librdkafka's admin client aborts the whole process when a group's coordinator drops
its connection during a ListConsumerGroupOffsets (`rd_kafka_enq_once_del_source_return: Assertion eonce->refcnt > 0`,
confluentinc/librdkafka#4605, seen here when the broker that coordinated the probe's group was killed); a pure-Python
client raises instead, and a window in which the lag cannot be read is a gap the daemon holds through.
"""

from __future__ import annotations

import atexit
import math
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from kafka import KafkaAdminClient, OffsetSpec, TopicPartition
from kafka.errors import KafkaError

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
        self._admin: KafkaAdminClient | None = None

    @property
    def admin(self) -> KafkaAdminClient:
        """Connected on first use: a deployment loaded only to be checked never reaches Kafka."""
        if self._admin is None:
            timeout_ms = round(self.timeout_s * 1000)
            # a broker back after a failover is tried again within a sample's second, not after up to 30 s
            self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap.split(","), client_id="pipetune-lag",
                                           request_timeout_ms=timeout_ms, bootstrap_timeout_ms=timeout_ms,
                                           reconnect_backoff_max_ms=round(SAMPLE_INTERVAL_S * 1000))
        return self._admin

    def close(self) -> None:
        """Let go of the connections to Kafka."""
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def committed(self) -> dict[TopicPartition, int]:
        """The group's committed offset per partition (-1: none yet) over every partition of its topics."""
        committed = {tp: meta.offset for tp, meta in self.admin.list_group_offsets(self.group)[self.group].items()}
        if not committed:  # a lag of 0 would hide a misspelt group: say so instead
            raise LagUnknown(f"consumer group {self.group!r} has committed no offsets (is kafka.consumer_group "
                             f"the group that reads the pipeline's topic?)")
        for topic in self.admin.describe_topics(sorted({tp.topic for tp in committed})):
            for partition in topic["partitions"]:
                committed.setdefault(TopicPartition(topic["name"], partition["partition_index"]), -1)
        return committed

    def sample(self) -> LagSample:
        at_s = self.clock()
        try:
            committed = self.committed()
            end = self._offsets(committed, OffsetSpec.LATEST)
            never = [tp for tp, offset in committed.items() if offset < 0]
            earliest = self._offsets(never, OffsetSpec.EARLIEST) if never else {}
        except KafkaError as err:
            # a fresh client next time: this one keeps asking the group's coordinator before a failover, which
            # answers NotCoordinator for good
            self.close()
            raise LagUnknown(f"consumer group {self.group!r}: lag not readable ({err})") from err
        position = {tp: offset if offset >= 0 else earliest[tp] for tp, offset in committed.items()}
        return LagSample(at_s, sum(position.values()), sum(end[tp] for tp in committed))

    def _offsets(self, partitions, spec: OffsetSpec) -> dict[TopicPartition, int]:
        found = self.admin.list_partition_offsets({tp: spec for tp in partitions})
        return {tp: found[tp].offset for tp in partitions}


def lag_floor(samples: list[LagSample], start_s: float, end_s: float, span_s: float) -> float:
    """The smallest lag sampled in the last `span_s` of [start_s, end_s] (the whole window when shorter);
    NaN when no sample falls there."""
    since = max(start_s, end_s - span_s)
    inside = [s.lag_events for s in samples if since <= s.at_s <= end_s]
    return float(min(inside)) if inside else math.nan


def lag_rise(samples: list[LagSample], start_s: float, end_s: float, span_s: float) -> float:
    """How far the lag floor rose within [start_s, end_s]: the highest floor at a sample of the window (over the
    `span_s` before it, so a commit interval's saw-tooth is not a rise) less the floor as the window began (its
    first sample's, without one before it); 0 when it did not rise, NaN when no sample falls in the window."""
    near = [s for s in samples if start_s - span_s <= s.at_s <= end_s]
    floors = [lag_floor(near, s.at_s - span_s, s.at_s, span_s) for s in near if s.at_s >= start_s]
    if not floors:
        return math.nan
    before = lag_floor(near, start_s - span_s, start_s, span_s)
    return max(max(floors) - (floors[0] if math.isnan(before) else before), 0.0)


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

    def rise_events(self, start_s: float, end_s: float) -> float:
        """How far the window's lag floor rose (`lag_rise`); NaN when no sample covers it."""
        with self._lock:
            return lag_rise(list(self._samples), start_s, end_s, self.span_s)

    def close(self) -> None:
        """Stop sampling, then let go of Kafka."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.reader.close()
        _OPEN.discard(self)


# A watch left open would be stopped by the interpreter's exit in the middle of a call to Kafka while its client is
# torn down under it (with librdkafka, read before, a segfault at the end of a test session). Each is closed first.
_OPEN: "weakref.WeakSet[LagWatch]" = weakref.WeakSet()


@atexit.register
def close_open_watches() -> None:
    """Close every watch still open: at the interpreter's exit, and before the brokers they sample go away (the
    test session's Kafka: a watch still sampling them waits out its timeouts against brokers that are gone)."""
    for watch in list(_OPEN):
        watch.close()
