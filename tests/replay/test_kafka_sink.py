"""The Kafka sink against the session's real broker."""

import json
import time

import pytest
from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient, NewTopic

from replay import arrivals
from replay.engine import run
from replay.sinks import SinkSpec


@pytest.mark.slow
def test_kafka_sink_produces_every_event_once(testbed):
    bootstrap = f"127.0.0.1:{testbed.kafka.port}"
    topic = "replay-sink-test"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    finally:
        admin.close()
    result = run(arrivals.steady(1000, 2), SinkSpec("kafka", f"{bootstrap}/{topic}"), run_id="kafka")
    assert result.sink.delivered == 2000 and not result.sink.failed_request_ids

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             group_id="replay-sink-test", consumer_timeout_ms=2000)
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while len(seen) < 2000 and time.monotonic() < deadline:
        for record in consumer:
            event = json.loads(record.value)
            assert record.key.decode() == event["request_id"] and "ts_nginx" in event
            seen.append(event["request_id"])
    consumer.close()
    assert sorted(seen) == [f"kafka-{i:08d}" for i in range(2000)]
