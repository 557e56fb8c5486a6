"""The probe's consume loop without a broker: arrival is stamped when a fetch is received, not when the
probe gets round to reading it, and `run` reads every record it received before it returns."""

import json
import threading

import pytest

from agents.probe.consumer import Probe, RecordReader
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
