"""The probe's consume loop: Kafka records in, latencies and ledger entries out."""

from __future__ import annotations

import threading
import time
from typing import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from agents.probe.events import parse_record
from agents.probe.ledger import Ledger
from agents.probe.metrics import ProbeMetrics


def consumer_settings(bootstrap: str, group_id: str) -> dict:
    """librdkafka settings the probe always uses; the tunable fetch settings (`kafka.consumer.*`) come on
    top, from the consumer.properties the agent renders."""
    return {"bootstrap.servers": bootstrap, "group.id": group_id, "auto.offset.reset": "earliest",
            "enable.auto.commit": True, "client.id": "pipetune-probe"}


class Probe:
    """Consumes one topic; every record updates the metrics and the ledger."""

    def __init__(self, settings: dict, topic: str, metrics: ProbeMetrics, ledger: Ledger,
                 clock: Callable[[], float] = time.time) -> None:
        self.consumer = Consumer(settings)
        self.consumer.subscribe([topic])
        self.topic = topic
        self.metrics = metrics
        self.ledger = ledger
        self.clock = clock
        self.lock = threading.Lock()  # the ledger is read by the report writer's thread

    def poll(self, max_records: int = 2000, timeout_s: float = 0.2) -> int:
        """Consume what is available (up to `max_records`); returns how many records were read."""
        # consume() with a timeout waits for all `max_records` (or the timeout), which would add up to
        # `timeout_s` of latency: take what is queued, and block only while nothing is.
        records = self.consumer.consume(max_records, 0)
        if not records:
            first = self.consumer.poll(timeout_s)
            records = [first, *self.consumer.consume(max_records - 1, 0)] if first is not None else []
        parsed = 0
        with self.lock:
            for record in records:
                if record.error() is not None:
                    if record.error().code() != KafkaError._PARTITION_EOF:
                        self.metrics.unparsed.inc()
                    continue
                received_at = self.clock()
                try:
                    stamps = parse_record(record.value(), record.timestamp()[1])
                except ValueError:
                    self.metrics.unparsed.inc()
                    continue
                self.metrics.observe(stamps.latencies(received_at))
                parsed += 1
                duplicate, late = self.ledger.record(stamps.request_id, received_at)
                if duplicate:
                    self.metrics.duplicates.inc()
                if late:
                    self.metrics.late.inc()
            self.metrics.events.inc(parsed)
        return len(records)

    def update_lag(self) -> int | None:
        """Records between the consumer's position and the end of each assigned partition; None (the gauge
        keeps its last value) when the broker did not answer in time."""
        lag = 0
        for part in self.consumer.assignment():
            try:
                low, high = self.consumer.get_watermark_offsets(part, timeout=1.0, cached=False)
            except KafkaException:
                # librdkafka queues the offsets request behind a fetch that may block for the whole
                # fetch.wait.max.ms: the lag is unknown this pass, and the probe must go on consuming.
                return None
            position = self.consumer.position([TopicPartition(part.topic, part.partition)])[0].offset
            lag += high - (position if position >= 0 else low)
        self.metrics.lag.set(lag)
        return lag

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.poll()

    def close(self) -> None:
        self.consumer.close()
