"""The agent changing a real Kafka consumer process (the probe) on the session's broker: Param ranges
and librdkafka's own check refuse bad values, a change recreates the client, a client that dies on
its new settings is rolled back."""

from __future__ import annotations

import dataclasses
import secrets
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from agents.adapter import ConfigStore
from agents.client import AgentError
from agents.component import ManagedComponent
from agents.config import AgentConfig
from agents.kafka.client import KafkaConsumerAdapter
from tests.agents.conftest import ServedAgent, write_wrapper
from tests.conftest import free_ports

pytestmark = pytest.mark.slow


class ConsumerAgent(ServedAgent):
    """A served agent running one probe on a topic of its own."""

    def __init__(self, config: AgentConfig, bootstrap: str, topic: str) -> None:
        super().__init__(config)
        self.bootstrap, self.topic = bootstrap, topic
        self.probe: ManagedComponent = self.components["probe"]
        self.spec = config.components[0]
        self.properties_file = Path(self.spec.properties)

    def pid(self) -> int | None:
        return self.probe.runtime.pid()  # type: ignore[union-attr]

    def produce(self, count: int) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap})
        for _ in range(count):
            producer.produce(self.topic, f'{{"request_id": "{secrets.token_hex(8)}", "ts_nginx": {time.time()}}}')
        assert producer.flush(10) == 0

    def events(self) -> float:
        """The running probe's `pipetune_events_total`."""
        with urllib.request.urlopen(self.spec.health_url, timeout=2) as response:
            lines = response.read().decode().splitlines()
        return float(next(line.split()[1] for line in lines if line.startswith("pipetune_events_total ")))

    def wait_events(self, count: int, timeout_s: float = 30) -> float:
        deadline = time.monotonic() + timeout_s
        while self.events() < count and time.monotonic() < deadline:
            time.sleep(0.2)
        return self.events()


@pytest.fixture
def agent(testbed, tmp_path) -> Iterator[ConsumerAgent]:
    topic = f"consumer-test-{secrets.token_hex(4)}"
    admin = AdminClient({"bootstrap.servers": testbed.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    metrics_port, agent_port = free_ports(2)
    config_dir = tmp_path / "probe"
    wrapper = write_wrapper(config_dir)
    (config_dir / "consumer.properties").write_text("# the probe's consumer\n")
    argv = ["/bin/sh", str(wrapper), sys.executable, "-m", "agents.probe", "--bootstrap", testbed.bootstrap,
            "--topic", topic, "--group-id", topic, "--metrics-port", str(metrics_port),
            "--manifests", str(tmp_path / "manifests"), "--reports", str(tmp_path / "reports"),
            "--consumer-properties", str(config_dir / "consumer.properties")]
    config = AgentConfig.model_validate({
        "state_dir": str(tmp_path / "state"), "port": agent_port, "health_timeout_s": 30, "settle_s": 0.5,
        "components": [{"name": "probe", "kind": "kafka-consumer",
                        "properties": str(config_dir / "consumer.properties"),
                        "health_url": f"http://127.0.0.1:{metrics_port}/metrics",
                        "params": {"kafka.consumer.fetch.max.wait.ms": 100},
                        "runtime": {"argv": argv, "stop_timeout_s": 10}}]})
    running = ConsumerAgent(config, testbed.bootstrap, topic)
    try:
        yield running
    finally:
        running.close()
        admin.delete_topics([topic])[topic].result(30)


def test_the_probe_starts_at_version_0_on_the_patched_properties(agent):
    [state] = agent.client.components()
    assert state["name"] == "probe" and state["version"] == 0 and state["health"]["ok"]
    assert state["runtime"]["pid"] == agent.pid() is not None
    # agent.yaml's starting value is written; fetch.min.bytes holds the default where the file sets none: not written
    assert agent.properties_file.read_text().splitlines()[1:] == ["fetch.wait.max.ms=100"]


def test_invalid_value_is_422_naming_the_field_and_writes_nothing(agent):
    before, pid = agent.properties_file.read_text(), agent.pid()
    with pytest.raises(AgentError) as err:
        agent.client.put_config("probe", 1, {"kafka.consumer.fetch.max.wait.ms": -5})
    assert err.value.status == 422 and err.value.detail["field"] == "kafka.consumer.fetch.max.wait.ms"
    with pytest.raises(AgentError) as foreign:
        agent.client.put_config("probe", 1, {"filebeat.backoff": 1})
    assert foreign.value.status == 422 and foreign.value.detail["field"] == "filebeat.backoff"
    assert agent.properties_file.read_text() == before and agent.pid() == pid
    assert agent.client.component("probe")["version"] == 0


def test_a_value_librdkafka_refuses_is_rejected_and_the_running_probe_is_untouched(agent):
    # A parameter range wider than librdkafka's (1..100000000 bytes): only the client's own check stops it.
    adapter = KafkaConsumerAdapter("probe", agent.spec.properties, agent.spec.health_url)
    adapter.params = tuple(dataclasses.replace(p, high=1e9) if p.name == "kafka.consumer.fetch.min.bytes" else p
                           for p in adapter.params)
    component = ManagedComponent(adapter, agent.probe.runtime, ConfigStore(agent.config.state_dir, "probe"), {},
                                 settle_s=0.5)
    component.start()  # adopts the running probe on version 0
    before, pid = agent.properties_file.read_text(), agent.pid()
    result = component.change(1, {"kafka.consumer.fetch.min.bytes": 200_000_000})
    assert result.status == "rejected" and result.version == 0
    assert "outside allowed range 1..100000000" in result.message
    assert agent.properties_file.read_text() == before and agent.pid() == pid
    assert component.state()["health"]["ok"]


def test_a_change_recreates_the_client_with_the_new_properties_and_events_keep_arriving(agent):
    agent.produce(20)
    assert agent.wait_events(20) == 20
    pid = agent.pid()
    result = agent.client.put_config("probe", 1, {"kafka.consumer.fetch.min.bytes": 4096,
                                                  "kafka.consumer.fetch.max.wait.ms": 20.4})
    assert (result.status, result.action, result.version) == ("applied", "restarted", 1)
    assert agent.pid() not in (None, pid) and agent.client.component("probe")["health"]["ok"]
    assert agent.properties_file.read_text().splitlines()[1:] == ["fetch.wait.max.ms=20", "fetch.min.bytes=4096"]
    agent.produce(30)
    # The old client committed its offsets as it closed: the new one reads only what came after.
    assert agent.wait_events(30) == 30


def test_a_probe_that_dies_on_start_is_rolled_back_and_runs_again(agent):
    before = agent.properties_file.read_text()
    (agent.properties_file.parent / "crash-next").touch()
    result = agent.client.put_config("probe", 1, {"kafka.consumer.fetch.max.wait.ms": 50})
    assert result.status == "rolled_back" and result.version == 0
    assert "not running after the change" in result.message
    assert agent.properties_file.read_text() == before
    state = agent.client.component("probe")
    assert state["version"] == 0 and state["health"]["ok"] and agent.pid() is not None
    agent.produce(5)
    assert agent.wait_events(5) == 5
