"""agent.yaml: a bad file is refused with the field named; the CLI refuses to start without a token."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agents.config import AgentConfigError, load_agent_config


def _write(tmp_path: Path, **component: object) -> Path:
    entry = {"name": "fb", "kind": "filebeat", "binary": "/usr/bin/filebeat", "config": str(tmp_path / "filebeat.yml"),
             "inputs": [{"id": "nginx-access"}], "http_port": 5066} | component
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "components": [entry]}))
    return path


def test_a_valid_file_loads_with_loopback_and_process_defaults(tmp_path):
    config = load_agent_config(_write(tmp_path))
    assert config.host == "127.0.0.1"
    assert config.components[0].runtime.kind == "process"


@pytest.mark.parametrize("changes, field", [
    ({"http_port": 70000}, "components.0.http_port"),
    ({"params": {"filebeat.backoff": 100}}, "params.filebeat.backoff"),
    ({"params": {"logstash.pipeline.workers": 2}}, "params.logstash.pipeline.workers: not a filebeat parameter"),
    ({"runtime": {"kind": "docker"}}, "components.0.runtime.container"),
    ({"kind": "fluentd"}, "components.0"),
    ({"inputs": [{"id": "a", "path": "/var/log/*.log"}]}, "components.0.inputs.0: give one of id or path"),
    ({"inputs": []}, "components.0.inputs"),
])
def test_a_bad_field_is_named(tmp_path, changes, field):
    with pytest.raises(AgentConfigError) as err:
        load_agent_config(_write(tmp_path, **changes))
    assert field in str(err.value)


def test_agent_refuses_to_start_without_a_token(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "from cli.main import app; app()", "agent", "--config",
                           str(_write(tmp_path))], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode != 0 and "PIPETUNE_AGENT_TOKEN" in proc.stderr


@pytest.mark.parametrize("changes, field", [
    ({"runtime": {}}, "components.0.runtime.argv: Field required"),
    ({"runtime": {"argv": []}}, "components.0.runtime.argv"),
    ({"health_url": "127.0.0.1:9100/metrics"}, "components.0.health_url"),
    ({"params": {"filebeat.backoff": 1}}, "params.filebeat.backoff: not a kafka.consumer parameter"),
])
def test_a_kafka_consumer_needs_its_command_a_health_url_and_its_own_params(tmp_path, changes, field):
    consumer = {"name": "probe", "kind": "kafka-consumer", "properties": str(tmp_path / "consumer.properties"),
                "health_url": "http://127.0.0.1:9100/metrics", "runtime": {"argv": ["probe"]}}
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "components": [consumer | changes]}))
    with pytest.raises(AgentConfigError) as err:
        load_agent_config(path)
    assert field in str(err.value)


def _load_producer(tmp_path: Path, **changes: object):
    producer = {"name": "replay", "kind": "kafka-producer", "properties": str(tmp_path / "producer.properties"),
                "runtime": {"argv": ["pipetune", "replay"]}} | changes
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "components": [producer]}))
    return load_agent_config(path)


def test_a_kafka_producer_may_go_without_a_health_url(tmp_path):
    [spec] = _load_producer(tmp_path, params={"kafka.producer.acks": "all"}).components
    assert spec.kind == "kafka-producer" and spec.health_url is None and spec.params == {"kafka.producer.acks": "all"}


@pytest.mark.parametrize("changes, field", [
    ({"runtime": {}}, "components.0.runtime.argv: Field required"),
    ({"health_url": "127.0.0.1:9100/metrics"}, "components.0.health_url"),
    ({"params": {"kafka.consumer.fetch.min.bytes": 1}}, "params.kafka.consumer.fetch.min.bytes: not a kafka.producer"),
    ({"params": {"kafka.producer.acks": "2"}}, "params.kafka.producer.acks: kafka.producer.acks='2' is not allowed"),
])
def test_a_kafka_producer_needs_its_command_and_its_own_params(tmp_path, changes, field):
    with pytest.raises(AgentConfigError) as err:
        _load_producer(tmp_path, **changes)
    assert field in str(err.value)


@pytest.mark.parametrize("canary, field", [
    ({"path": "/var/log/canary.log", "canary_eps": 0}, "canary.canary_eps"),
    ({"canary_eps": 10}, "canary.path"),
    ({"path": "/var/log/canary.log", "node": "a b"}, "canary.node"),
])
def test_a_bad_canary_section_is_named(tmp_path, canary, field):
    path = _write(tmp_path)
    path.write_text(yaml.safe_dump(yaml.safe_load(path.read_text()) | {"canary": canary}))
    with pytest.raises(AgentConfigError, match=field.replace(".", r"\.")):
        load_agent_config(path)


def test_canaries_default_to_ten_a_second_and_are_off_when_omitted(tmp_path):
    path = _write(tmp_path)
    assert load_agent_config(path).canary is None
    path.write_text(yaml.safe_dump(yaml.safe_load(path.read_text()) | {"canary": {"path": "/tmp/c.log"}}))
    assert load_agent_config(path).canary.canary_eps == 10
