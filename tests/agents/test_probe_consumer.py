"""The probe's consume loop without a broker: arrival is stamped when a fetch is received, not when the
probe gets round to reading it, and `run` reads every record it received before it returns. With the session's
broker: the stages of a CreateTime topic's records."""

import json
import secrets
import threading
import time
from datetime import datetime, timezone

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from agents.probe.consumer import Probe, RecordReader, consumer_settings
from agents.probe.ledger import Ledger
from agents.probe.metrics import ProbeMetrics
from tests.clock import VirtualClock

NOW = 1_800_000_000.0


class Message:
    def __init__(self, ts_nginx: float) -> None:
        self._value = json.dumps({"message": json.dumps({"ts_nginx": ts_nginx}), "host": {"name": "web-1"}}).encode()

    def error(self):
        return None

    def value(self) -> bytes:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return 0, 0


class Consumer:
    """Serves its fetches one `consume` call at a time, then nothing."""

    def __init__(self, fetches: list[list[Message]]) -> None:
        self.fetches = list(fetches)
        self.idle = threading.Event()  # set once every fetch was served

    def consume(self, max_records: int, timeout_s: float) -> list[Message]:
        if self.fetches:
            return self.fetches.pop(0)
        self.idle.set()
        return []

    def poll(self, timeout_s: float):
        self.idle.wait(timeout_s)
        return None

    def assignment(self) -> list:
        return []


def probe_over(consumer: Consumer, clock: VirtualClock) -> tuple[Probe, ProbeMetrics]:
    metrics = ProbeMetrics()
    probe = Probe.__new__(Probe)  # no broker: the consumer is the fake above
    probe.consumer = consumer
    probe.reader = RecordReader(metrics, Ledger(late_after_s=10), clock=clock.time)
    return probe, metrics


def e2e_sum(metrics: ProbeMetrics) -> float:
    labels = {"stage": "e2e", "source": "event_time", "node": "web-1"}
    return metrics.registry.get_sample_value("pipetune_e2e_latency_seconds_sum", labels)


def test_a_record_is_measured_to_when_it_was_received_not_to_when_it_was_read():
    clock = VirtualClock(NOW)
    probe, metrics = probe_over(Consumer([[Message(NOW - 0.004)]]), clock)
    fetched = probe.fetch()
    clock.advance(0.5)  # the probe busy reading records fetched before
    probe.reader.read(*fetched)
    assert e2e_sum(metrics) == pytest.approx(0.004, abs=0.001)  # ms stamps: within one


def test_run_reads_every_received_record_before_it_returns():
    clock = VirtualClock(NOW)
    consumer = Consumer([[Message(NOW - 0.01)] * 300, [Message(NOW - 0.02)] * 200, [Message(NOW - 0.03)]])
    probe, metrics = probe_over(consumer, clock)
    stop = threading.Event()
    passes = []

    def bookkeeping() -> None:
        passes.append(metrics.registry.get_sample_value("pipetune_records_total"))
        if consumer.idle.is_set():
            stop.set()

    runner = threading.Thread(target=probe.run, args=(stop, bookkeeping))
    runner.start()
    runner.join(60)
    assert not runner.is_alive(), "run did not return within 60 s of its stop"
    assert metrics.registry.get_sample_value("pipetune_records_total") == 501 and passes
    assert e2e_sum(metrics) == pytest.approx(300 * 0.01 + 200 * 0.02 + 0.03, abs=501 * 0.001)


def test_run_fails_loudly_when_receiving_dies():
    class Broken(Consumer):
        def consume(self, max_records: int, timeout_s: float) -> list[Message]:
            raise RuntimeError("broker handle destroyed")

    probe, _ = probe_over(Broken([]), VirtualClock(NOW))
    with pytest.raises(RuntimeError, match="receiving thread died"):
        probe.run(threading.Event(), lambda: None)


def _stage_mean_s(metrics: ProbeMetrics, stage: str) -> float | None:
    labels = {"stage": stage, "source": "event_time", "node": "web-1"}
    count = metrics.registry.get_sample_value("pipetune_e2e_latency_seconds_count", labels)
    return metrics.registry.get_sample_value("pipetune_e2e_latency_seconds_sum", labels) / count if count else None


@pytest.mark.slow
@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_filebeats_wait_stays_out_of_the_consumers_stage_whatever_the_topics_timestamp_type(testbed, timestamp_type):
    """Issue 39: on a CreateTime topic (Kafka's default) Filebeat stamps each record with its `@timestamp`, the
    read time; the probe took it as the append time, so Filebeat's 67 ms flush wait landed in `kafka_consume`.
    Here every line was read 2 s before it was published (a queue flush wait of 2 s)."""
    topic = f"probe-test-{secrets.token_hex(4)}"
    admin = AdminClient({"bootstrap.servers": testbed.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"message.timestamp.type": timestamp_type})])[topic].result(30)
    metrics = ProbeMetrics()
    probe = Probe(consumer_settings(testbed.bootstrap, f"{topic}-probe"), topic, metrics, Ledger(late_after_s=60))
    try:
        producer = Producer({"bootstrap.servers": testbed.bootstrap})
        for _ in range(5):
            read_at = time.time() - 2.0
            event = {"@timestamp": datetime.fromtimestamp(read_at, tz=timezone.utc).isoformat(timespec="milliseconds"),
                     "message": json.dumps({"ts_nginx": round(read_at - 0.1, 3)}), "host": {"name": "web-1"}}
            # Filebeat's Kafka output sets the record's timestamp to the event's @timestamp
            producer.produce(topic, json.dumps(event).encode(), timestamp=int(read_at * 1000))
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 60
        while metrics.registry.get_sample_value("pipetune_events_total") != 5 and time.monotonic() < deadline:
            probe.poll()
    finally:
        probe.close()
        admin.delete_topics([topic])[topic].result(30)
    assert _stage_mean_s(metrics, "e2e") == pytest.approx(2.1, abs=1.0) and _stage_mean_s(metrics, "e2e") >= 2.1
    assert _stage_mean_s(metrics, "filebeat_read") == pytest.approx(0.1, abs=0.002)
    if timestamp_type == "CreateTime":  # no append time: Filebeat's publish and the consume are one stage
        assert _stage_mean_s(metrics, "kafka_consume") is None and _stage_mean_s(metrics, "filebeat_publish") is None
        assert _stage_mean_s(metrics, "filebeat_publish+kafka_consume") >= 2.0
    else:
        assert _stage_mean_s(metrics, "filebeat_publish") >= 2.0 and _stage_mean_s(metrics, "kafka_consume") < 1.0
    kind = {"CreateTime": "create_time", "LogAppendTime": "log_append_time"}[timestamp_type]
    assert metrics.registry.get_sample_value("pipetune_kafka_timestamp_records_total", {"type": kind}) == 5
