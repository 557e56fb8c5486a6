"""The probe's consume loop: Kafka records in; latencies by source and node, heartbeat and ledger counts out."""

from __future__ import annotations

import json
import logging
import math
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

from confluent_kafka import (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, Message,
                             TopicPartition)

from agents.probe.events import HEARTBEAT_MARK, PUBLISH_CONSUME, Record, decode_record, heartbeat_of, latencies
from agents.probe.heartbeats import HeartbeatTracker
from agents.probe.ledger import Ledger
from agents.probe.metrics import EVENT_TIME, HEARTBEAT, ProbeMetrics
from models.clock_offset import offsets_from_document
from models.event_time import EventTimeSpec

log = logging.getLogger("pipetune.probe")

# The testbed's replayed events: nginx `$msec` written as `ts_nginx`.
REPLAY_EVENT_TIME = EventTimeSpec(format="epoch_s", field="ts_nginx")
_UNTIMED_LOG_EVERY_S = 10.0  # one example line per this long, with the count since the last
_BOOKKEEPING_EVERY_S = 1.0
_QUEUED_FETCHES = 256  # fetches received but not yet read; beyond, receiving waits for reading
# A record's timestamp type, as `pipetune_kafka_timestamp_records_total` labels it: only the broker's append time
# (a LogAppendTime topic) marks a hop; a CreateTime topic's is the producer's, Filebeat's `@timestamp`.
TIMESTAMP_TYPES = {TIMESTAMP_LOG_APPEND_TIME: "log_append_time", TIMESTAMP_CREATE_TIME: "create_time"}


@dataclass(frozen=True)
class ProbeOptions:
    """What the probe reads and what it leaves out of the window's figures."""

    event_time: EventTimeSpec = REPLAY_EVENT_TIME
    backfill_after_s: float = 3600.0  # older than this: written before an outage, counted apart
    future_tolerance_s: float = 2.0  # further ahead than this: a clock the offsets do not explain
    sample_above_eps: float = 50_000.0  # observe every event up to this rate (0: always every event)
    canary_grace_s: float = 30.0  # heartbeats: as the flag (--canary-grace-s) names it
    clock_offsets: Path | None = None  # JSON written by the controller (models.clock_offset), re-read

    def __post_init__(self) -> None:
        for name in ("backfill_after_s", "future_tolerance_s", "canary_grace_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.sample_above_eps < 0:
            raise ValueError(f"sample_above_eps must be >= 0, got {self.sample_above_eps}")


def consumer_settings(bootstrap: str, group_id: str) -> dict:
    """librdkafka settings the probe always uses; the tunable fetch settings (`kafka.consumer.*`) come on
    top, from the consumer.properties the agent renders."""
    return {"bootstrap.servers": bootstrap, "group.id": group_id, "auto.offset.reset": "earliest",
            "enable.auto.commit": True, "client.id": "pipetune-probe"}


@dataclass
class _Pass:
    """What the current bookkeeping pass has seen."""

    started_at: float
    records: int = 0
    resolution_s: float = 0.0


class Fetched(NamedTuple):
    """Records as (value, Kafka append time in ms or None), and when the consumer got them."""

    records: list[tuple[bytes, int | None]]
    received_at: float


class Probe:
    """Consumes one topic; every record updates the metrics, the heartbeat tracker and the ledger.

    `run` receives on a thread of its own, which stamps each fetch's arrival the moment it has it, and
    reads (parses, measures) on the caller's: stamping as records are read would add to each record the
    time the probe spent reading those before it (a few ms at 5k ev/s, when the pipeline's own P95 is ~10).
    """

    def __init__(self, settings: dict, topic: str, metrics: ProbeMetrics, ledger: Ledger,
                 options: ProbeOptions = ProbeOptions(), clock: Callable[[], float] = time.time) -> None:
        self.consumer = Consumer(settings)
        self.consumer.subscribe([topic])
        self.topic = topic
        self.reader = RecordReader(metrics, ledger, options, clock)
        self.lock = self.reader.lock
        self._create_time_said = False

    def fetch(self, max_records: int = 2000, timeout_s: float = 0.2) -> Fetched:
        """What is available (up to `max_records`), waiting up to `timeout_s` while nothing is."""
        # consume() with a timeout waits for all `max_records` (or the timeout), which would add up to
        # `timeout_s` of latency: take what is queued, and block only while nothing is.
        records = self.consumer.consume(max_records, 0)
        if not records:
            first = self.consumer.poll(timeout_s)
            records = [first, *self.consumer.consume(max_records - 1, 0)] if first is not None else []
        received_at = self.reader.clock()
        batch = []
        for record in records:
            if record.error() is not None:
                if record.error().code() != KafkaError._PARTITION_EOF:
                    self.reader.metrics.unparsed.inc()
                continue
            batch.append((record.value(), self._append_ms(record)))
        return Fetched(batch, received_at)

    def _append_ms(self, record: Message) -> int | None:
        """The broker's append time of `record` (ms), None when its timestamp is not that; counted by type."""
        kind, ms = record.timestamp()
        self.reader.metrics.timestamp_types.labels(type=TIMESTAMP_TYPES.get(kind, "none")).inc()
        if kind == TIMESTAMP_CREATE_TIME and not self._create_time_said:
            self._create_time_said = True
            log.warning("topic %s stamps its records with CreateTime (Kafka's default): the timestamp is Filebeat's "
                        "own, not the broker's append, so Filebeat's publish and the way to this consumer are "
                        "measured as one stage, %s; message.timestamp.type=LogAppendTime on the topic measures "
                        "them apart", self.topic, PUBLISH_CONSUME)
        return ms if kind == TIMESTAMP_LOG_APPEND_TIME else None

    def poll(self) -> int:
        """Fetch and read on this thread; returns how many records were read."""
        fetched = self.fetch()
        self.reader.read(*fetched)
        return len(fetched.records)

    def run(self, stop: threading.Event, bookkeeping: Callable[[], None]) -> None:
        """Consume until `stop` is set, calling `bookkeeping` about once a second between reads. Every
        record received is read before this returns, so offsets committed afterwards cover only read ones."""
        fetched: queue.Queue[Fetched | None] = queue.Queue(_QUEUED_FETCHES)
        receiver = threading.Thread(target=self._receive, args=(stop, fetched), name="probe-receive", daemon=True)
        receiver.start()
        next_pass = 0.0
        while (item := self._next(fetched, receiver)) is not None:
            if item.records:
                self.reader.read(*item)
            if time.monotonic() >= next_pass:
                next_pass = time.monotonic() + _BOOKKEEPING_EVERY_S
                bookkeeping()
        receiver.join()

    @staticmethod
    def _next(fetched: queue.Queue[Fetched | None], receiver: threading.Thread) -> Fetched | None:
        """The next fetch; an empty one while none comes (so bookkeeping runs); None once receiving ended."""
        try:
            return fetched.get(timeout=_BOOKKEEPING_EVERY_S)
        except queue.Empty:
            if not receiver.is_alive():
                raise RuntimeError("the probe's receiving thread died") from None
            return Fetched([], 0.0)

    def _receive(self, stop: threading.Event, fetched: queue.Queue[Fetched | None]) -> None:
        """The receiving thread: every consumer call happens here (the lag gauge too, once a second)."""
        next_lag = 0.0
        try:
            while not stop.is_set():
                item = self.fetch()
                if item.records:
                    fetched.put(item)
                if time.monotonic() >= next_lag:
                    next_lag = time.monotonic() + _BOOKKEEPING_EVERY_S
                    self.update_lag()
        except Exception:
            log.exception("receiving from Kafka failed")
            return  # without the end mark: the reading side finds this thread dead and fails
        fetched.put(None)

    def update_lag(self) -> int | None:
        """Records between the consumer's position and the end of each assigned partition; None (the gauge
        keeps its last value) before the first fetch has told the end."""
        lag = 0
        assigned = self.consumer.assignment()
        self.reader.metrics.partitions.set(len(assigned))
        for part in assigned:
            # The end as of the last fetch response: asking the broker would queue behind a fetch that may
            # block for the whole fetch.wait.max.ms, and every record waiting meanwhile would be measured
            # that much later (seen on the testbed: the probe's own consume stage at ~1 s P95).
            low, high = self.consumer.get_watermark_offsets(part, cached=True)
            if high < 0:
                return None
            position = self.consumer.position([TopicPartition(part.topic, part.partition)])[0].offset
            lag += high - (position if position >= 0 else max(low, 0))
        self.reader.metrics.lag.set(lag)
        return lag

    def close(self) -> None:
        self.consumer.close()


class RecordReader:
    """Everything the probe does with a record's bytes, apart from Kafka: testable on its own."""

    def __init__(self, metrics: ProbeMetrics, ledger: Ledger, options: ProbeOptions = ProbeOptions(),
                 clock: Callable[[], float] = time.time) -> None:
        self.metrics = metrics
        self.ledger = ledger
        self.options = options
        self.clock = clock
        self.heartbeats = HeartbeatTracker(options.canary_grace_s)
        self.stride = 1
        self._count = 0
        self._last_node = ""  # of the last event observed
        self._pass = _Pass(clock())
        self._untimed = 0  # since the last example was logged
        self._untimed_example = ""
        self._untimed_logged_at = clock()
        self._corrections: dict[str, float] = {}  # node -> what to take off its stamps (ClockOffset.correction_s)
        self._offsets_mtime: float | None = None
        self.lock = threading.Lock()  # the ledger is read by the report writer's thread
        self._json_lines = options.event_time.field is not None
        self.end_pass()  # the offsets file, if any, before the first record

    def read(self, batch: list[tuple[bytes, int | None]], received_at: float) -> None:
        """Account for records given as (value, Kafka append time in ms or None), all received at `received_at`."""
        by_node: dict[str, int] = {}
        skipped = 0  # sampled out since the last event observed: counted for that event's node
        with self.lock:
            self.metrics.records.inc(len(batch))
            self._pass.records += len(batch)
            for value, kafka_ms in batch:
                self._count += 1
                is_heartbeat = HEARTBEAT_MARK in value
                if self.stride > 1 and not is_heartbeat and self._count % self.stride:
                    skipped += 1
                    continue  # sampled out: at this rate every event would cost more than the probe has
                try:
                    record = decode_record(value, kafka_ms, self._json_lines or is_heartbeat)
                    heartbeat = heartbeat_of(record.line) if is_heartbeat else None
                except ValueError:
                    self.metrics.unparsed.inc()
                    by_node[""] = by_node.get("", 0) + 1
                    continue
                if heartbeat is not None:
                    by_node[heartbeat.node] = by_node.get(heartbeat.node, 0) + 1
                    self._heartbeat(heartbeat.node, heartbeat.seq, heartbeat.ts_s, record, received_at)
                else:
                    self._last_node = record.node
                    by_node[record.node] = by_node.get(record.node, 0) + 1 + skipped
                    skipped = 0
                    self._event(record, received_at)
            if skipped:
                by_node[self._last_node] = by_node.get(self._last_node, 0) + skipped
            for node, records in by_node.items():
                self.metrics.node_records.labels(node=node).inc(records)

    def _offset(self, node: str) -> float:
        return self._corrections.get(node, 0.0)

    def _heartbeat(self, node: str, seq: int, ts_s: float, record: Record, received_at: float) -> None:
        self.metrics.heartbeat_received.labels(node=node).inc()
        if self.heartbeats.record(node, seq, received_at):
            self.metrics.heartbeat_duplicate.labels(node=node).inc()
            return
        offset = self._offset(node)
        self.metrics.observe(latencies(ts_s - offset, record, received_at, offset), HEARTBEAT, node)

    def _event(self, record: Record, received_at: float) -> None:
        line = record.line
        if isinstance(line, dict) and "request_id" in line:
            duplicate, late = self.ledger.record(str(line["request_id"]), received_at)
            self.metrics.duplicates.inc(duplicate)
            self.metrics.late.inc(late)
        try:
            when = self.options.event_time.read(line)
        except ValueError as err:
            self.metrics.untimed.inc()
            self._untimed += 1
            self._untimed_example = self._untimed_example or f"{err}: {str(line)[:200]}"
            return
        offset = self._offset(record.node)
        # A stamp is the start of its clock step: the write happened somewhere in the step, on average mid-way.
        ts_event = when.ts_s + when.resolution_s / 2 - offset
        age_s = received_at - ts_event
        if age_s > self.options.backfill_after_s:
            self.metrics.backfill["past"].inc()
            return
        if age_s < -self.options.future_tolerance_s:
            self.metrics.backfill["future"].inc()
            return
        self._pass.resolution_s = max(self._pass.resolution_s, when.resolution_s)
        self.metrics.observe(latencies(ts_event, record, received_at, offset), EVENT_TIME, record.node)
        self.metrics.events.inc(self.stride)

    def end_pass(self) -> None:
        """Once a second: sampling stride, resolution, heartbeat losses, the offsets file, untimed examples."""
        with self.lock:
            now = self.clock()
            done = self._pass
            elapsed = max(now - done.started_at, 1e-3)
            limit = self.options.sample_above_eps
            self.stride = max(1, math.ceil(done.records / elapsed / limit)) if limit else 1
            self.metrics.stride.set(self.stride)
            if done.resolution_s:
                self.metrics.resolution.set(done.resolution_s)
            for node, lost in self.heartbeats.expire(now).items():
                self.metrics.heartbeat_lost.labels(node=node).inc(lost)
            self._pass = _Pass(now)
            if self._untimed and now - self._untimed_logged_at >= _UNTIMED_LOG_EVERY_S:
                log.warning("%d events without a readable event time, e.g. %s", self._untimed, self._untimed_example)
                self._untimed, self._untimed_example, self._untimed_logged_at = 0, "", now
            self._read_offsets()

    def _read_offsets(self) -> None:
        path = self.options.clock_offsets
        if path is None:
            return
        try:
            mtime = path.stat().st_mtime
            if mtime == self._offsets_mtime:
                return
            offsets = offsets_from_document(json.loads(path.read_text()))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as err:
            log.warning("clock offsets %s not applied: %s", path, err)
            return
        self._corrections = {node: offset.correction_s for node, offset in offsets.items()}
        self._offsets_mtime = mtime
        self.metrics.clock_offset.clear()
        for node, correction_s in self._corrections.items():
            self.metrics.clock_offset.labels(node=node).set(correction_s)
