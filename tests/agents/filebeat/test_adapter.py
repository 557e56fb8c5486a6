"""The agent changing a real Filebeat process: validation, Filebeat's own check, every change a restart,
rollback of a component that dies, idempotent and serialised requests, the audit log; input changes
under load lose no line; an operator's edit made while the agent runs survives a restart, a rollback and the
agent's own start, and a tuned key edited by hand is held, not overwritten."""

from __future__ import annotations

import json
import os
import secrets
import signal
import threading
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import yaml
from confluent_kafka import Consumer

from agents.client import AgentError
from agents.component import ManagedComponent
from agents.config import AgentConfig
from tests.agents.conftest import ServedAgent, filebeat_agent_config

pytestmark = pytest.mark.slow


class Agent(ServedAgent):
    """A served agent and its one Filebeat."""

    def __init__(self, config: AgentConfig) -> None:
        super().__init__(config)
        self.fb: ManagedComponent = self.components["filebeat"]
        self.config_dir = Path(config.components[0].config).parent

    def pid(self) -> int | None:
        return self.fb.runtime.pid()  # type: ignore[union-attr]

    def main_file(self) -> str:
        return (self.config_dir / "filebeat.yml").read_text()


@pytest.fixture
def agent(installed, tmp_path) -> Iterator[Agent]:
    running = Agent(filebeat_agent_config(tmp_path, installed.filebeat))
    try:
        yield running
    finally:
        running.close()


def test_agent_starts_filebeat_at_version_0_and_reports_it(agent):
    [state] = agent.client.components()
    assert state["name"] == "filebeat" and state["version"] == 0
    assert state["health"]["ok"] is True and state["runtime"]["pid"] == agent.pid() is not None
    assert state["params"]["filebeat.backoff"] == 0.01
    assert state["params_allowed"]["filebeat.queue.mem.events"]["cost"] == "restart"


def test_invalid_value_is_422_naming_the_field_and_range_and_writes_nothing(agent):
    before = agent.main_file()
    with pytest.raises(AgentError) as err:
        agent.client.put_config("filebeat", 1, {"filebeat.queue.mem.events": 64, "filebeat.backoff": 100})
    assert err.value.status == 422
    assert err.value.detail["field"] == "filebeat.backoff"
    assert err.value.detail["allowed"] == "a number in [0.001, 10] s"
    with pytest.raises(AgentError) as unknown:
        agent.client.put_config("filebeat", 1, {"logstash.pipeline.workers": 4})
    assert unknown.value.status == 422 and unknown.value.detail["field"] == "logstash.pipeline.workers"
    assert agent.main_file() == before
    assert agent.client.component("filebeat")["version"] == 0


def test_config_filebeat_rejects_is_refused_and_the_running_config_stays(agent):
    before, pid = agent.main_file(), agent.pid()
    # In range for each parameter alone, but Filebeat wants flush.min_events below queue.mem.events.
    result = agent.client.put_config("filebeat", 1, {"filebeat.queue.mem.events": 64})
    assert result.status == "rejected" and result.version == 0
    assert "flush.min_events must be less events" in result.message
    assert agent.main_file() == before and agent.pid() == pid
    assert [e["event"] for e in agent.client.audit("filebeat")] == ["started", "rejected"]


def test_input_and_queue_changes_restart_filebeat(agent):
    """Even with the input in a file Filebeat reloads itself: its live reload can lose a line (issue #14)."""
    pid = agent.pid()
    state = agent.client.component("filebeat")
    assert {allowed["cost"] for allowed in state["params_allowed"].values()} == {"restart"}
    inputs = agent.client.put_config("filebeat", 1, {"filebeat.backoff": 0.02})
    assert (inputs.status, inputs.action, inputs.version) == ("applied", "restarted", 1)
    assert agent.pid() not in (None, pid)
    [entry] = yaml.safe_load((agent.config_dir / "inputs.d" / "replay.yml").read_text())
    assert entry["backoff.init"] == "20ms"

    pid = agent.pid()
    restart = agent.client.put_config("filebeat", 2, {"filebeat.queue.mem.events": 8192})
    assert (restart.status, restart.action, restart.version) == ("applied", "restarted", 2)
    assert agent.pid() not in (None, pid) and agent.client.component("filebeat")["health"]["ok"]
    assert yaml.safe_load(agent.main_file())["queue.mem"]["events"] == 8192
    assert restart.params["filebeat.backoff"] == 0.02  # the earlier change is kept


class LineWriter:
    """Appends numbered lines to a log from a thread, `batch` every 10 ms, until the `with` block ends."""

    def __init__(self, log: Path, batch: int) -> None:
        self.log, self.batch, self.written = log, batch, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, daemon=True)

    def _write(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a") as out:
            while not self._stop.is_set():
                out.write("".join(f'{{"seq": {self.written + i}, "pad": "{"x" * 150}"}}\n' for i in range(self.batch)))
                out.flush()
                self.written += self.batch
                time.sleep(0.01)

    def __enter__(self) -> "LineWriter":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def missing_lines(bootstrap: str, topic: str, written: int, timeout_s: float) -> list[int]:
    """The numbers in range(written) no record of `topic` carries, once every one arrived or at the timeout."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reload-{secrets.token_hex(4)}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + timeout_s
        while len(seen) < written and time.monotonic() < deadline:
            for record in consumer.consume(5000, 1.0):
                if record.error() is None:
                    seen.add(json.loads(json.loads(record.value())["message"])["seq"])
    finally:
        consumer.close()
    return sorted(set(range(written)) - seen)


INPUT_CHANGES = 12


def test_input_changes_under_load_lose_no_line(installed, testbed, kafka_topic, tmp_path):
    """Issue #14: a live input reload abandons the line its harvester waits to publish, yet resumes past it.
    With a queue small enough that the harvester mostly waits, a dozen input changes (each a restart,
    which resumes from acknowledged offsets) while lines are written: every line reaches Kafka."""
    config = filebeat_agent_config(tmp_path, installed.filebeat, bootstrap=testbed.bootstrap, topic=kafka_topic)
    running = Agent(config)
    try:
        small = {"filebeat.queue.mem.events": 32, "filebeat.queue.mem.flush.min_events": 0,
                 "filebeat.queue.mem.flush.timeout": 0.0, "filebeat.output.bulk_max_size": 4}
        assert running.client.put_config("filebeat", 1, small).status == "applied"
        with LineWriter(tmp_path / "logs" / "access.log", batch=20) as writer:
            for version in range(2, 2 + INPUT_CHANGES):
                backoff = {"filebeat.max_backoff": 0.06 + version % 2 / 100}
                result = running.client.put_config("filebeat", version, backoff)
                assert (result.status, result.action) == ("applied", "restarted"), result.message
        assert writer.written > 0
        missing = missing_lines(testbed.bootstrap, kafka_topic, writer.written, 120)
        assert not missing, f"{len(missing)} of {writer.written} lines never reached Kafka, e.g. {missing[:10]}"
    finally:
        running.close()


def test_a_retried_version_is_answered_again_without_a_second_restart(agent):
    first = agent.client.put_config("filebeat", 1, {"filebeat.queue.mem.flush.timeout": 0.5})
    pid = agent.pid()
    again = agent.client.put_config("filebeat", 1, {"filebeat.queue.mem.flush.timeout": 0.5})
    assert (again.status, again.version, again.action) == (first.status, 1, "restarted")
    assert agent.pid() == pid
    with pytest.raises(AgentError) as reused:
        agent.client.put_config("filebeat", 1, {"filebeat.queue.mem.flush.timeout": 2})
    assert reused.value.status == 409
    with pytest.raises(AgentError) as stale:
        agent.client.put_config("filebeat", 0, {"filebeat.queue.mem.flush.timeout": 2})
    assert stale.value.status in (409, 422)


def test_a_component_that_dies_after_a_restart_is_rolled_back_and_runs_again(agent):
    before = agent.main_file()
    (agent.config_dir / "crash-next").touch()
    result = agent.client.put_config("filebeat", 1, {"filebeat.queue.mem.flush.timeout": 0.2})
    assert result.status == "rolled_back" and result.version == 0
    assert "not running after the change" in result.message and "version 0 is back in force" in result.message
    assert agent.main_file() == before
    state = agent.client.component("filebeat")
    assert state["version"] == 0 and state["health"]["ok"] and agent.pid() is not None
    assert agent.client.audit("filebeat")[-1]["event"] == "rolled_back"


def test_rollback_returns_to_the_version_before(agent):
    agent.client.put_config("filebeat", 1, {"filebeat.queue.mem.events": 8192})
    v1 = agent.main_file()
    agent.client.put_config("filebeat", 2, {"filebeat.queue.mem.events": 16384})
    back = agent.client.rollback("filebeat")
    assert (back.status, back.version) == ("applied", 1)
    assert agent.main_file() == v1 and agent.client.component("filebeat")["health"]["ok"]
    assert agent.client.next_version("filebeat") == 3  # numbers are never reused


def test_concurrent_requests_are_serialised(agent):
    results: dict[int, object] = {}

    def put(version: int) -> None:
        try:
            results[version] = agent.client.put_config("filebeat", version, {"filebeat.queue.mem.events": 4096 * (version + 1)})
        except AgentError as err:
            results[version] = err

    threads = [threading.Thread(target=put, args=(v,)) for v in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    events = [e["event"] for e in agent.client.audit("filebeat") if e["event"] in ("change_started", "applied")]
    # Each change finishes before the next one starts (version 1 is refused as stale if 2 came first).
    assert events in (["change_started", "applied"], ["change_started", "applied"] * 2)
    final = agent.client.component("filebeat")
    assert final["version"] == 2 and yaml.safe_load(agent.main_file())["queue.mem"]["events"] == 12288


def test_requests_without_the_right_token_are_refused(agent):
    with httpx.Client(base_url=agent.url) as anonymous:
        assert anonymous.get("/components").status_code == 401
        wrong = anonymous.put("/components/filebeat/config", json={"version": 1, "params": {}},
                              headers={"Authorization": "Bearer not-the-token"})
        assert wrong.status_code == 403
    assert agent.client.component("filebeat")["version"] == 0


def test_a_component_killed_outside_a_change_is_restarted_on_the_version_in_force(agent):
    assert agent.client.put_config("filebeat", 1, {"filebeat.queue.mem.events": 8192}).status == "applied"
    pid, in_force = agent.pid(), agent.main_file()
    os.kill(pid, signal.SIGKILL)

    def restarts() -> list[dict]:  # audited once the restarted process is healthy
        return [entry for entry in agent.client.audit("filebeat") if entry["event"] == "restarted"]

    deadline = time.monotonic() + 30
    while not restarts() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert restarts() and restarts()[-1]["reason"] == "found not running" and restarts()[-1]["version"] == 1
    state = agent.client.component("filebeat")
    assert agent.pid() not in (None, pid) and state["health"]["ok"]
    assert state["version"] == 1 and state["params"]["filebeat.queue.mem.events"] == 8192
    assert agent.main_file() == in_force


# An operator's edit made while the agent runs, of keys the agent does not tune: a comment and a setting.
EDIT = ("  required_acks: 1\n", "  required_acks: 1\n  # raised by hand for the big events (ticket 4711)\n"
                                "  max_message_bytes: 2000000\n")


def _edit(path: Path, old: str, new: str) -> str:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return text.replace(old, new)


def _wait_for(agent: Agent, event: str, count: int, timeout_s: float = 30) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [entry for entry in agent.client.audit("filebeat") if entry["event"] == event]
        if len(found) >= count:
            return found
        time.sleep(0.2)
    raise AssertionError(f"no {count} {event!r} audit entries within {timeout_s} s")


def test_an_operators_edit_survives_the_restart_that_loads_it(agent):
    """Issue 39: the operator restarted Filebeat to load an edit, and the agent's supervisor started it again on
    the whole file it had stored, erasing the edit without a word."""
    assert agent.client.put_config("filebeat", 1, {"filebeat.queue.mem.events": 8192}).status == "applied"
    edited = _edit(agent.config_dir / "filebeat.yml", *EDIT)
    os.kill(agent.pid(), signal.SIGKILL)
    [restarted] = _wait_for(agent, "restarted", 1)
    assert agent.main_file() == edited and agent.client.component("filebeat")["health"]["ok"]
    assert (restarted["reason"], restarted["files"]) == ("found not running", "as they are")


def test_a_rollback_rebases_onto_the_operators_edit(agent):
    agent.client.put_config("filebeat", 1, {"filebeat.queue.mem.events": 8192})
    agent.client.put_config("filebeat", 2, {"filebeat.queue.mem.events": 16384, "filebeat.backoff": 0.02})
    edited = _edit(agent.config_dir / "filebeat.yml", *EDIT)
    back = agent.client.rollback("filebeat")
    assert (back.status, back.version) == ("applied", 1)
    assert agent.main_file() == edited.replace("events: 16384", "events: 8192")
    [entry] = yaml.safe_load((agent.config_dir / "inputs.d" / "replay.yml").read_text())
    assert entry["backoff.init"] == "10ms" and agent.client.component("filebeat")["health"]["ok"]


def test_an_agent_that_starts_and_finds_filebeat_stopped_keeps_the_operators_edit(installed, tmp_path):
    config = filebeat_agent_config(tmp_path, installed.filebeat)
    first = Agent(config)
    try:
        assert first.client.put_config("filebeat", 1, {"filebeat.queue.mem.events": 8192}).status == "applied"
    finally:
        first.close()  # stops Filebeat too
    edited = _edit(first.config_dir / "filebeat.yml", *EDIT)
    again = Agent(config)
    try:
        state = again.client.component("filebeat")
        assert state["version"] == 1 and state["health"]["ok"] and again.main_file() == edited
        assert again.client.audit("filebeat")[-1]["reason"] == "not running at agent start"
    finally:
        again.close()


def test_a_tuned_key_edited_by_hand_is_held_not_overwritten(agent):
    assert agent.client.put_config("filebeat", 1, {"filebeat.queue.mem.events": 8192}).status == "applied"
    inputs = agent.config_dir / "inputs.d" / "replay.yml"
    edited = _edit(inputs, "backoff.init: 10ms", "backoff.init: 3s")
    with pytest.raises(AgentError) as refused:
        agent.client.rollback("filebeat")
    assert refused.value.status == 409
    said = refused.value.detail["held"]
    assert f"{inputs}:" in said and "backoff.init is 3s on disk" in said and "filebeat.backoff 0.01 s" in said
    os.kill(agent.pid(), signal.SIGKILL)  # and the restart that loads it keeps it too
    _wait_for(agent, "restarted", 1)
    assert inputs.read_text() == edited and agent.client.component("filebeat")["health"]["ok"]
    assert [e["event"] for e in agent.client.audit("filebeat")][-2:] == ["held", "restarted"]
    assert agent.client.component("filebeat")["version"] == 1
