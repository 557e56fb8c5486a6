"""Logstash and Kafka semantics: batch.delay, batch.size, the memory queue's backpressure, linger.ms, acks."""

from __future__ import annotations

import numpy as np
import pytest

from tests.models.twin.helpers import QUIET, config, poisson, run

FAST_FILEBEAT = {"filebeat__backoff": 0.001, "filebeat__max_backoff": 0.001,
                 "filebeat__queue__mem__flush__min_events": 1}


@pytest.mark.parametrize("delay_ms", [50.0, 300.0])
def test_batch_delay_bounds_how_long_a_partial_batch_waits(delay_ms: float) -> None:
    twin = run(config(logstash__pipeline__batch__delay=delay_ms, **FAST_FILEBEAT), [1.0], 10.0)
    spent = twin.stamps.ls_out[0] - twin.stamps.ls_in[0]
    cost = QUIET.logstash.cpu_per_batch_s + QUIET.logstash.cpu_per_event_s
    assert spent == pytest.approx(delay_ms / 1000 + cost, abs=1e-4)


def test_a_full_batch_goes_without_waiting_for_batch_delay() -> None:
    twin = run(config(logstash__pipeline__batch__size=10, logstash__pipeline__batch__delay=5000.0,
                      **FAST_FILEBEAT), np.linspace(1.0, 1.001, 10), 20.0)
    assert np.all(twin.stamps.ls_out - twin.stamps.ls_in < 1.0)


@pytest.mark.parametrize("linger_ms", [0.0, 5.0, 40.0])
def test_linger_ms_delays_a_lone_record(linger_ms: float) -> None:
    twin = run(config(logstash__output__kafka__linger_ms=linger_ms, **FAST_FILEBEAT), [1.0], 10.0)
    spent = twin.stamps.kafka[0] - twin.stamps.ls_out[0]
    assert spent == pytest.approx(linger_ms / 1000, abs=0.001)


def test_a_full_producer_batch_is_sent_without_lingering() -> None:
    records_per_batch = 16384 // QUIET.event_bytes
    twin = run(config(logstash__output__kafka__linger_ms=500.0, **FAST_FILEBEAT),
               np.linspace(1.0, 1.0001, records_per_batch), 10.0)
    assert np.all(twin.stamps.kafka - twin.stamps.ls_out < 0.01)


def test_linger_caps_logstash_when_each_worker_sends_one_record_at_a_time() -> None:
    # batch.size 1: a worker blocks on its lone record's linger, so 2 workers move < 2 / linger ev/s
    arrivals = poisson(600, 20)
    slow = run(config("micro-batching", logstash__output__kafka__linger_ms=20.0), arrivals, 20.0)
    fast = run(config("micro-batching", logstash__output__kafka__linger_ms=0.0), arrivals, 20.0)
    assert slow.observe(5.0, 20.0).throughput_eps < 2 / 0.020
    assert fast.observe(5.0, 20.0).throughput_eps > 500


def test_a_full_logstash_queue_holds_back_filebeat_acks() -> None:
    # one worker, batch of 1, slow filter: Logstash is the bottleneck, so batches wait in Filebeat
    cal = QUIET.scaled(logstash__cpu_per_event_s=0.01)
    cfg = config("hybrid", logstash__pipeline__workers=1)
    twin = run(cfg, poisson(300, 20), 20.0, cal=cal)
    obs = twin.observe(5.0, 20.0)
    assert obs.throughput_eps < 110
    assert twin.downstream.pushed - twin.downstream.taken <= twin.downstream.capacity() == 1
    assert obs.stage_mean_s["filebeat->logstash"] > 0.1  # waiting for the queue to take each event


def test_acks_zero_frees_the_worker_before_the_broker_answers() -> None:
    cal = QUIET.scaled(network__rtt_s=0.05)
    arrivals = poisson(200, 10)
    one = run(config("hybrid", logstash__output__kafka__acks="1"), arrivals, 10.0, cal=cal)
    zero = run(config("hybrid", logstash__output__kafka__acks="0"), arrivals, 10.0, cal=cal)
    assert zero.observe(2.0, 10.0).stage_mean_s["filebeat->logstash"] < \
        one.observe(2.0, 10.0).stage_mean_s["filebeat->logstash"]
