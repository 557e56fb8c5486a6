"""The Kafka sink: delivery accounting and producer properties without a broker, every event once
against the session's real broker, and `pipetune replay --producer-properties` refusing a bad file."""

import json
import time

import pytest
from confluent_kafka import KafkaException
from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient, NewTopic
from typer.testing import CliRunner

from cli.main import app
from replay import arrivals
from replay.engine import run
from replay.sinks import KafkaSink, SinkSpec
from tests.conftest import free_ports


@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])  # 2: how the replay reaches its top rate
def test_kafka_sink_produces_every_event_once(testbed, processes):
    bootstrap = f"127.0.0.1:{testbed.kafka.port}"
    topic = f"replay-sink-test-{processes}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    finally:
        admin.close()
    result = run(arrivals.steady(1000, 2), SinkSpec("kafka", f"{bootstrap}/{topic}"), run_id="kafka",
                 processes=processes)
    assert result.sink.delivered == 2000 and not result.sink.failed_request_ids
    # Each acknowledged record's produce-to-ack latency, as Kafka's producer perf test reports it.
    assert len(result.sink.ack_latency_s) == 2000 and min(result.sink.ack_latency_s) > 0
    summary = result.summary()
    assert 0 < summary["ack_latency_p50_ms"] <= summary["ack_latency_p99_ms"] <= summary["ack_latency_p999_ms"]

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             group_id=topic, consumer_timeout_ms=2000)
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while len(seen) < 2000 and time.monotonic() < deadline:
        for record in consumer:
            event = json.loads(record.value)
            assert record.key.decode() == event["request_id"] and "ts_nginx" in event
            seen.append(event["request_id"])
    consumer.close()
    assert sorted(seen) == [f"kafka-{i:08d}" for i in range(2000)]


def test_records_no_broker_acknowledges_are_failed_by_request_id():
    [port] = free_ports(1)  # nobody listens: every record times out in the producer
    spec = SinkSpec("kafka", f"127.0.0.1:{port}/t", producer_properties=(("message.timeout.ms", "300"),))
    result = run(arrivals.steady(100, 0.2), spec, run_id="lost")
    assert result.sink.delivered == 0 and not result.sink.ack_latency_s
    assert sorted(result.sink.failed_request_ids) == [f"lost-{i:08d}" for i in range(20)]
    assert "ack_latency_p99_ms" not in result.summary()


def test_the_sink_hands_its_properties_to_librdkafka():
    with pytest.raises(KafkaException, match="queue.buffering.max.ms"):
        KafkaSink("127.0.0.1:9", "t", {"linger.ms": "-1"})


def _replay(tmp_path, properties: str, *sink: str):
    path = tmp_path / "producer.properties"
    path.write_text(properties)
    wide = CliRunner(env={"COLUMNS": "1000"})  # rich would break the file's long path across lines
    result = wide.invoke(app, ["replay", "--rate", "10", "--duration", "1", *sink, "--producer-properties", str(path)])
    return result.exit_code, " ".join(result.output.replace("│", " ").split())


@pytest.mark.parametrize("properties, message", [
    ("acks=1\nlinger.ms=1000000\n", "librdkafka refused linger.ms=1000000: "),
    ("acks=2\ncompression.type=brotli\n", "librdkafka refused compression.type=brotli: "),
    # As Java reads a .properties file, a key alone has the empty value, which librdkafka refuses.
    ("acks=1\nlinger.ms\n", "librdkafka refused linger.ms=: "),
])
def test_replay_refuses_a_bad_producer_properties_file_naming_the_property(tmp_path, properties, message):
    code, output = _replay(tmp_path, properties, "--kafka", "127.0.0.1:9/t")
    assert code != 0 and "--producer-properties" in output and message in output


def test_producer_properties_need_the_kafka_sink(tmp_path):
    code, output = _replay(tmp_path, "acks=1\n", "--out", str(tmp_path / "a.log"))
    assert code != 0 and "only the --kafka sink has a producer" in output
    assert not (tmp_path / "a.log").exists()
