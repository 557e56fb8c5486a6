"""The testbed's brokers export what a window costs the cluster, and the telemetry reads it as on an operator's:
Produce requests and bytes in as the brokers count them, and each broker's process CPU."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from controller.telemetry import PRODUCE_REQUESTS, PrometheusTelemetry
from testbed.prometheus import prometheus_url

pytestmark = pytest.mark.slow
TOPIC = "pytest-broker-cost"  # a topic of its own: the probe reads the pipeline's


def _scraped_after(telemetry: PrometheusTelemetry, moment: float) -> None:
    """Wait for a scrape of the broker's Produce requests taken after `moment`."""
    deadline = time.monotonic() + 60
    while not telemetry.scalar(f"max(timestamp({PRODUCE_REQUESTS}))", time.time()) > moment:
        assert time.monotonic() < deadline, "no scrape of the broker's Produce requests within 60 s"
        time.sleep(0.2)


def test_the_telemetry_reads_the_produce_requests_a_broker_took_and_its_cpu(testbed):
    records, size = 300, 200
    admin = KafkaAdminClient(bootstrap_servers=testbed.bootstrap)
    admin.create_topics([NewTopic(TOPIC, 1, 1)])
    admin.close()
    telemetry = PrometheusTelemetry(prometheus_url(testbed))
    producer = KafkaProducer(bootstrap_servers=testbed.bootstrap)
    # a broker counts a kind of request from the first one it takes: a long-running cluster's series exists
    producer.send(TOPIC, b"first").get(timeout=10)
    start = time.time()
    _scraped_after(telemetry, start + 0.5)  # the window's first sample comes before the records
    for _ in range(records):
        producer.send(TOPIC, b"x" * size).get(timeout=10)  # waited for: one Produce request each
    producer.close()
    _scraped_after(telemetry, time.time())
    _scraped_after(telemetry, time.time())  # a second scrape: increase() sees the whole step inside the window
    window = telemetry.window(start, time.time())
    seconds = window.duration_s
    # increase() extrapolates to the window's edges: never less than was counted; the session's broker is shared
    # (the testbed's own producers may ship in the same window), so only this run's part of it is certain
    assert window.produce_requests_per_s * seconds >= records
    assert window.kafka_bytes_in_per_s * seconds >= records * size
    assert window.cpu_cores["broker-1"] > 0
