"""The agent changing a real Kafka producer process (`pipetune replay --kafka`) on the session's broker:
Param ranges and librdkafka's own check refuse bad values and leave the producer running; a change
recreates the producer on the new properties, and records keep arriving from it."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from agents.client import AgentError
from agents.config import AgentConfig
from tests.agents.conftest import ServedAgent, wider_range, write_wrapper
from tests.conftest import free_ports

pytestmark = pytest.mark.slow


def end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pipetune-test-offsets"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def events_from(bootstrap: str, topic: str, offset: int, count: int, timeout_s: float = 20) -> list[dict]:
    """`count` events produced at or after `offset` (fewer if they do not come within `timeout_s`)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pipetune-test-events",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, offset)])
    events: list[dict] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(events) < count and time.monotonic() < deadline:
            record = consumer.poll(0.5)
            if record is not None and record.error() is None:
                events.append(json.loads(record.value()))
    finally:
        consumer.close()
    return events


def run_id(event: dict) -> str:
    """The replay run an event came from: each `pipetune replay` process draws its own."""
    return event["request_id"].rsplit("-", 1)[0]


@dataclasses.dataclass
class Producing:
    """A served agent running one `pipetune replay` into `topic`."""

    agent: ServedAgent
    bootstrap: str
    topic: str
    properties_file: Path

    def pid(self) -> int | None:
        return self.agent.components["replay"].runtime.pid()  # type: ignore[union-attr]

    def events_from(self, offset: int, count: int) -> list[dict]:
        return events_from(self.bootstrap, self.topic, offset, count)


@pytest.fixture
def producing(testbed, kafka_topic, tmp_path) -> Iterator[Producing]:
    [agent_port] = free_ports(1)
    config_dir = tmp_path / "replay"
    wrapper = write_wrapper(config_dir)
    (config_dir / "producer.properties").write_text("# the replay's producer (librdkafka names)\n")
    argv = ["/bin/sh", str(wrapper), sys.executable, "-m", "cli", "replay", "--profile", "steady",
            "--rate", "200", "--duration", "600", "--kafka", f"{testbed.bootstrap}/{kafka_topic}",
            "--producer-properties", str(config_dir / "producer.properties")]
    # No health URL: health is that the process runs, so it must stay up past its start-up (settle_s).
    config = AgentConfig.model_validate({
        "state_dir": str(tmp_path / "state"), "port": agent_port, "health_timeout_s": 30, "settle_s": 3.0,
        "components": [{"name": "replay", "kind": "kafka-producer",
                        "properties": str(config_dir / "producer.properties"),
                        "params": {"kafka.producer.linger.ms": 2}, "runtime": {"argv": argv, "stop_timeout_s": 10}}]})
    agent = ServedAgent(config)
    try:
        yield Producing(agent, testbed.bootstrap, kafka_topic, config_dir / "producer.properties")
    finally:
        agent.close()


def test_the_producer_starts_at_version_0_on_the_patched_properties_and_produces(producing):
    [state] = producing.agent.client.components()
    assert state["name"] == "replay" and state["version"] == 0 and state["health"]["ok"]
    assert "no health_url" in state["health"]["detail"] and state["runtime"]["pid"] == producing.pid() is not None
    # agent.yaml's starting value is written; the others hold their defaults where the file sets none: not written
    assert producing.properties_file.read_text().splitlines()[1:] == ["linger.ms=2"]
    events = producing.events_from(0, 50)
    assert len(events) == 50 and all("ts_nginx" in e for e in events)


def test_invalid_value_is_422_naming_the_field_and_writes_nothing(producing):
    before, pid = producing.properties_file.read_text(), producing.pid()
    for params, field in [({"kafka.producer.linger.ms": -5}, "kafka.producer.linger.ms"),
                          ({"kafka.producer.acks": "2"}, "kafka.producer.acks"),
                          ({"kafka.consumer.fetch.min.bytes": 1}, "kafka.consumer.fetch.min.bytes")]:
        with pytest.raises(AgentError) as err:
            producing.agent.client.put_config("replay", 1, params)
        assert err.value.status == 422 and err.value.detail["field"] == field
    assert producing.properties_file.read_text() == before and producing.pid() == pid
    assert producing.agent.client.component("replay")["version"] == 0


def test_a_value_librdkafka_refuses_is_rejected_and_the_running_producer_is_untouched(producing):
    # librdkafka takes a linger up to 900000 ms: past it, only the client's own check stops the value.
    component = wider_range(producing.agent, "replay", "kafka.producer.linger.ms", 1e7)
    before, pid = producing.properties_file.read_text(), producing.pid()
    result = component.change(1, {"kafka.producer.linger.ms": 1_000_000})
    assert result.status == "rejected" and result.version == 0
    assert "librdkafka refused linger.ms=1000000: " in result.message
    assert "outside allowed range 0..900000" in result.message
    assert producing.properties_file.read_text() == before and producing.pid() == pid
    assert component.state()["health"]["ok"]


def test_a_change_recreates_the_producer_with_the_new_properties_and_records_keep_arriving(producing):
    [first] = producing.events_from(0, 1)
    pid = producing.pid()
    result = producing.agent.client.put_config("replay", 1, {"kafka.producer.linger.ms": 20.5,
                                                             "kafka.producer.compression.type": "lz4"})
    assert (result.status, result.action, result.version) == ("applied", "restarted", 1)
    assert producing.pid() not in (None, pid) and producing.agent.client.component("replay")["health"]["ok"]
    assert producing.properties_file.read_text().splitlines()[1:] == ["linger.ms=20.5", "compression.type=lz4"]
    after = producing.events_from(end_offset(producing.bootstrap, producing.topic), 100)
    # They come from the new process: a replay run of its own, stamped after the change.
    assert len(after) == 100 and len({run_id(e) for e in after}) == 1 and run_id(after[0]) != run_id(first)
    assert min(e["ts_nginx"] for e in after) > first["ts_nginx"]
