"""Acceptance: an operator-shaped Filebeat config (`golden/operator/filebeat.yml`: two filestream inputs with
ids, processors, an output.kafka with several hosts and compression, comments throughout) tuned through a
real agent and a real Filebeat. Only the tuned keys of the selected input, the queue and the output
change; the other input is byte-identical; `filebeat test config` accepts the result (a patch it
refuses never reaches the file); and the Filebeat
started from it ships a line written into the selected input's file to the session testbed's Kafka."""

from __future__ import annotations

import difflib
import json
import re
import secrets
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer

from agents.config import AgentConfig
from tests.agents.conftest import ServedAgent
from tests.conftest import free_ports

pytestmark = pytest.mark.slow

GOLDEN = Path(__file__).parents[1] / "golden" / "operator" / "filebeat.yml"
# The TLS and SASL lines of the golden output: this testbed's broker speaks plaintext.
_SECURITY = re.compile(r"^  (ssl\.certificate_authorities|sasl\.mechanism|username|password):.*\n", re.M)
TUNED_KEYS = ("prospector.scanner.check_interval", "init", "max", "close.on_state_change.inactive", "buffer_size",
              "events", "flush.min_events", "flush.timeout", "bulk_max_size", "worker")


def operator_text(directory: Path, bootstrap: str, topic: str) -> str:
    """The golden config, its output pointed at the testbed's broker and topic and its inputs at `directory`."""
    text = _SECURITY.sub("", GOLDEN.read_text())
    text = text.replace('hosts: ["k1:9093", "k2:9093", "k3:9093"]', f'hosts: ["{bootstrap}", "{bootstrap}"]')
    text = text.replace("topic: 'web-%{[fields.log_type]}'", f"topic: '{topic}'")
    text = text.replace("/var/log/nginx/access.log*", str(directory / "logs" / "access.log*"))
    return text.replace("/var/log/app/*.log", str(directory / "logs" / "app" / "*.log"))


def _agent(installed, tmp_path: Path, text: str, input_id: str, params: dict) -> tuple[ServedAgent, Path]:
    """A served agent tuning input `input_id` of the operator's config `text`, starting Filebeat itself."""
    (tmp_path / "logs" / "app").mkdir(parents=True)
    (tmp_path / "logs" / "access.log").touch()
    config = tmp_path / "filebeat.yml"
    config.write_text(text)
    config.chmod(0o600)  # Filebeat refuses a config others can write
    [agent_port] = free_ports(1)
    argv = [str(installed.filebeat), "-c", str(config), "--path.home", str(tmp_path / "home"), "--path.config",
            str(tmp_path), "--path.data", str(tmp_path / "data"), "--path.logs", str(tmp_path / "fblogs")]
    return ServedAgent(AgentConfig.model_validate({
        "state_dir": str(tmp_path / "state"), "port": agent_port, "health_timeout_s": 30, "settle_s": 1.0,
        "components": [{"name": "filebeat", "kind": "filebeat", "binary": str(installed.filebeat),
                        "config": str(config), "inputs": [{"id": input_id}], "params": params,
                        "runtime": {"kind": "process", "argv": argv, "stop_timeout_s": 10}}]})), config


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end)]


@pytest.fixture
def operator_node(installed, testbed, kafka_topic, tmp_path) -> Iterator[tuple[ServedAgent, Path]]:
    agent, config = _agent(installed, tmp_path, operator_text(tmp_path, testbed.bootstrap, kafka_topic), "nginx-access",
                           {"filebeat.scan_frequency": 10, "filebeat.backoff": 1, "filebeat.max_backoff": 10})
    try:
        yield agent, config
    finally:
        agent.close()


def _consume_until(bootstrap: str, topic: str, needle: str) -> dict | None:
    """The first record of `topic` holding `needle` (read from the beginning), waiting up to a minute for it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"acceptance-{secrets.token_hex(4)}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            record = consumer.poll(1.0)
            if record is not None and record.error() is None and needle in record.value().decode():
                return json.loads(record.value())
        return None
    finally:
        consumer.close()


def test_an_operators_filebeat_is_tuned_in_place_and_ships(operator_node, installed, testbed, kafka_topic, tmp_path):
    agent, config = operator_node
    state = agent.client.component("filebeat")
    assert state["health"]["ok"], state["health"]
    # Every Filebeat key costs a restart (input keys too: a live input reload can lose a line).
    assert {v["cost"] for v in state["params_allowed"].values()} == {"restart"}

    result = agent.client.put_config("filebeat", 1, {
        "filebeat.backoff": 0.05, "filebeat.max_backoff": 0.5, "filebeat.scan_frequency": 0.5,
        "filebeat.queue.mem.events": 8192,
        "filebeat.queue.mem.flush.min_events": 64, "filebeat.queue.mem.flush.timeout": 0.1,
        "filebeat.output.bulk_max_size": 512})
    assert (result.status, result.action) == ("applied", "restarted"), result.message

    before = operator_text(tmp_path, testbed.bootstrap, kafka_topic)
    after = config.read_text()
    changed = [line for line in difflib.ndiff(before.splitlines(), after.splitlines()) if line[:2] in ("- ", "+ ")]
    assert changed, "nothing was tuned"
    for line in changed:
        assert re.match(rf"^[-+] \s*({'|'.join(map(re.escape, TUNED_KEYS))}): ", line), line
    assert "    prospector.scanner.check_interval: 500ms   # default\n" in after  # the comment stays
    assert "      init: 50ms\n" in after
    assert "queue.mem:\n  events: 8192\n  flush.min_events: 64\n  flush.timeout: 100ms\n" in after
    assert "  compression: gzip\n" in after and "  bulk_max_size: 512\n" in after
    other = ("  # application errors", "filebeat.config.modules")
    assert _section(after, *other) == _section(before, *other)  # the other input: byte-identical
    assert _section(after, "processors:\n  - add_host", "queue.mem") == _section(before, "processors:\n  - add_host",
                                                                                 "queue.mem")

    refused = agent.client.put_config("filebeat", 2, {"filebeat.queue.mem.events": 32})  # below flush.min_events
    assert refused.status == "rejected" and "filebeat test config" in refused.message
    assert config.read_text() == after and not list(tmp_path.glob(".pipetune-check-*"))

    check = subprocess.run([str(installed.filebeat), "test", "config", "-c", str(config), "--path.config",
                            str(tmp_path), "--path.home", str(tmp_path / "home")],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr

    needle = f"acceptance-{secrets.token_hex(6)}"
    with open(tmp_path / "logs" / "access.log", "a") as log:
        log.write(json.dumps({"request_id": needle, "status": 200}) + "\n")
    shipped = _consume_until(testbed.bootstrap, kafka_topic, needle)
    assert shipped is not None, f"{needle} never reached {kafka_topic}"
    assert shipped["request_id"] == needle  # the ndjson parser of the operator's input ran
    assert "name" in shipped["host"]  # and the global add_host_metadata


def test_the_agents_first_start_writes_nothing_into_the_operators_filebeat(installed, tmp_path):
    """Issue 39: on its first start the agent wrote the log input's defaults into a filestream input
    (`backoff.init: 1s` where Filebeat's filestream waits 2s, `close.on_state_change.inactive: 300s`) and moved the
    operator's P95 before any decision. The `app-errors` input sets none of the tuned keys."""
    text = operator_text(tmp_path, "127.0.0.1:1", "web")  # Filebeat runs without reaching its brokers
    agent, config = _agent(installed, tmp_path, text, "app-errors", {})
    try:
        state = agent.client.component("filebeat")
        assert state["version"] == 0 and state["health"]["ok"]
        assert config.read_text() == text  # byte for byte
        assert state["params"]["filebeat.backoff"] == 2.0 and state["params"]["filebeat.multiline.timeout"] == 5.0
        assert "filebeat.close_inactive" not in state["params_allowed"]  # filestream's 0s (never) is left alone
        change = agent.client.put_config("filebeat", 1, {"filebeat.queue.mem.flush.timeout": 0.1})
        assert change.status == "applied", change.message
        assert [line for line in config.read_text().splitlines() if line not in text.splitlines()] == \
            ["  flush.timeout: 100ms"]
    finally:
        agent.close()
