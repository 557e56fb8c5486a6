"""A full disk where the agent writes a component's config, where it keeps its versions and audit log, and where
Filebeat keeps its registry (issue 41, fault 3), on small filesystems the tests mount themselves.

A change is refused with 507 naming the path: the config on disk stays byte for byte, the version in force and
its record stay, nothing half-written is left, the audit log says what happened (or the answer says it could not),
and the same change succeeds once there is room. Real Filebeat with its registry's disk full ships on and loses
nothing; the agent reports it not healthy and refuses the restart a change would need until there is room."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from agents.adapter import DiskFull
from agents.client import AgentError
from agents.filebeat.registry import registry_offsets
from agents.runtimes import ProcessRuntime
from cli.main import app
from tests.agents.conftest import filebeat_agent_config
from tests.agents.filebeat.test_adapter import Agent, LineWriter
from testbed.faults import fill
from tests.faults.conftest import AGENT_AUTH, StandInAgent, agent_init, filebeat_log


class Node(StandInAgent):
    """A stand-in agent served through FastAPI's test client, its filebeat.yml, agent state and Filebeat's registry
    (path.data) each on a small filesystem of their own."""

    def __init__(self, tmp_path: Path, small_disk) -> None:
        super().__init__(*(small_disk(tmp_path / name, "1m") for name in ("conf", "state", "data")), tmp_path)
        self.http = TestClient(self.app, headers=AGENT_AUTH)

    def put(self, version: int, params: dict) -> tuple[int, dict]:
        answer = self.http.put("/components/filebeat/config", json={"version": version, "params": params})
        return answer.status_code, answer.json()

    def state_of(self) -> dict:
        return self.http.get("/components/filebeat").json()

    def snapshot(self) -> dict[str, bytes]:
        """Every file under the config's and the state's filesystems, by path (the ballast aside)."""
        return {str(p): p.read_bytes() for root in (self.conf, self.state) for p in sorted(root.rglob("*"))
                if p.is_file() and p.name != ".ballast"}


@pytest.fixture
def node(tmp_path: Path, small_disk) -> Iterator[Node]:
    served = Node(tmp_path, small_disk)
    assert served.put(1, {"filebeat.max_backoff": 4.0})[0] == 200  # a version 1 in force, with a record
    yield served
    served.http.close()


CHANGE = {"filebeat.queue.mem.flush.timeout": 0.1}


def test_a_change_with_the_configs_disk_full_is_507_naming_the_file_and_touches_nothing(node):
    before, starts = node.snapshot(), len(node.runtime.started_on)
    ballast = fill(node.conf)
    status, body = node.put(2, CHANGE)
    assert status == 507, body
    assert body["path"] == str(node.config) and body["version"] == 1
    assert f"no space left on device: {node.config}" in body["message"]
    assert "version 1 stays in force, untouched" in body["message"] and "audit" not in body
    after = node.snapshot()
    audit = str(node.state / "filebeat" / "audit.jsonl")
    assert {p: b for p, b in after.items() if p != audit} == {p: b for p, b in before.items() if p != audit}
    assert len(node.runtime.started_on) == starts and node.runtime.running()  # not even restarted
    state = node.state_of()
    assert (state["version"], state["highest_version"], state["health"]["ok"]) == (1, 1, True)
    [refused] = [e for e in node.component.audit() if e["event"] == "no_space"]
    assert refused["path"] == str(node.config) and "written" not in refused
    ballast.unlink()
    status, body = node.put(2, CHANGE)  # the same change, once there is room
    assert (status, body["status"], body["version"]) == (200, "applied", 2)
    assert "flush.timeout: 100ms" in node.config.read_text()


def test_a_change_with_the_agents_state_disk_full_is_507_and_the_audit_says_so_or_the_answer_does(node):
    config, starts = node.config.read_bytes(), len(node.runtime.started_on)
    ballast = fill(node.state)
    # The audit log's last block has room for a few lines: each refusal is audited until it has none.
    for attempt in range(100):
        status, body = node.put(2, CHANGE)
        assert status == 507, body
        assert body["path"] == str(node.state / "filebeat" / "pending") and body["version"] == 1  # written first
        if "audit" in body:
            break
    assert body["audit"].startswith(f"not written: no space left on device: {node.state / 'filebeat' / 'audit.jsonl'}")
    assert "the audit log cannot be written either" in body["message"]
    assert node.config.read_bytes() == config and len(node.runtime.started_on) == starts
    assert not (node.state / "filebeat" / "v2.json").exists() and not (node.state / "filebeat" / "pending").exists()
    assert node.state_of()["version"] == 1
    shown = node.http.get("/components/filebeat/audit").json()  # the line the disk had no room for, shown unwritten
    assert shown[-1]["event"] == "no_space" and shown[-1]["written"] is False
    ballast.unlink()
    status, body = node.put(2, CHANGE)
    assert (status, body["status"], body["version"]) == (200, "applied", 2)
    lines = (node.state / "filebeat" / "audit.jsonl").read_text().splitlines()
    events = [json.loads(line)["event"] for line in lines]  # every line whole: none was cut by the full disk
    # the refusal kept in memory written before the next line, in its place
    assert events[-(attempt + 3):] == ["no_space"] * (attempt + 1) + ["change_started", "applied"]


def test_a_config_directory_that_cannot_be_written_rejects_the_change_and_touches_nothing(node):
    before, starts = node.config.read_bytes(), len(node.runtime.started_on)
    subprocess.run(["mount", "-o", "remount,ro", str(node.conf)], check=True)  # root writes through any mode bits
    status, body = node.put(2, CHANGE)
    assert (status, body["status"], body["version"]) == (422, "rejected", 1), body
    assert "Read-only file system" in body["message"] and str(node.conf) in body["message"]
    assert node.config.read_bytes() == before and len(node.runtime.started_on) == starts
    subprocess.run(["mount", "-o", "remount,rw", str(node.conf)], check=True)
    assert node.put(3, CHANGE)[0] == 200


def test_a_disk_that_fills_during_the_change_puts_the_version_in_force_back(node):
    started = node.runtime.restart

    def restart_then_the_disk_fills() -> None:  # another writer takes the room while Filebeat restarts
        started()
        node.runtime.restart = started
        fill(node.state)

    node.runtime.restart = restart_then_the_disk_fills
    status, body = node.put(2, CHANGE)
    assert status == 507, body
    assert "version 1 is back in force" in body["message"] and body["version"] == 1
    # version 1's values on disk again (the key written back explicit, at Filebeat's default), and running on them
    assert node.component.adapter.read()["filebeat.queue.mem.flush.timeout"] == 1.0
    assert node.runtime.started_on[-1] == node.config.read_text()
    assert node.state_of()["version"] == 1 and not (node.state / "filebeat" / "v2.json").exists()
    (node.state / ".ballast").unlink()
    assert node.put(2, CHANGE)[0] == 200


def test_filebeats_registry_disk_full_is_not_healthy_and_a_change_is_refused_until_there_is_room(node):
    starts = len(node.runtime.started_on)
    ballast = fill(node.data)
    health = node.state_of()["health"]
    assert health["ok"] is False
    assert f"no space left on device: {node.data} (Filebeat's registry" in health["detail"]
    assert "a restart now would send again every line since its last registry write" in health["detail"]
    status, body = node.put(2, CHANGE)
    assert status == 507 and body["path"] == str(node.data), body
    assert len(node.runtime.started_on) == starts
    ballast.unlink()
    assert node.state_of()["health"]["ok"] is True
    assert node.put(2, CHANGE)[0] == 200


def test_an_agent_whose_state_disk_is_full_does_not_start_and_says_why(tmp_path, small_disk):
    out = small_disk(tmp_path / "out", "1m")
    agent_yaml, token = agent_init(tmp_path, out)
    fill(out)
    result = CliRunner().invoke(app, ["agent", "run", "--config", str(agent_yaml), "--token-file", str(token)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert f"pipetune agent: cannot start: no space left on device: {out / 'state'}" in result.output


def test_a_process_whose_pid_file_does_not_fit_is_not_left_running(tmp_path, small_disk):
    run_dir = small_disk(tmp_path / "run", "1m")
    runtime = ProcessRuntime("sleeper", ["sleep", "600"], run_dir)
    fill(run_dir)
    with pytest.raises(DiskFull) as full:
        runtime.restart()
    assert full.value.path == runtime.pid_file
    assert runtime._child is None  # the pid file is written before the start: nothing started that nobody knows of
    assert not runtime.running() and not any(p.name.endswith(".tmp") for p in run_dir.iterdir())
    os.remove(run_dir / ".ballast")
    runtime.restart()
    assert runtime.running()
    runtime.stop()


# Real Filebeat, its output on the session's Kafka: what it does with its registry's disk full, measured.


class Arrivals:
    """Every record of a topic, counted by the `seq` its line carries, read as they come."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"disk-full-{secrets.token_hex(4)}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.consumer.subscribe([topic])
        self.seen: Counter[int] = Counter()

    def until(self, condition, what: str, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < deadline, f"{what}: not within {timeout_s:g} s ({len(self.seen)} lines arrived)"
            for record in self.consumer.consume(5000, 0.5):
                if record.error() is None:
                    self.seen[json.loads(json.loads(record.value())["message"])["seq"]] += 1

    def close(self) -> None:
        self.consumer.close()


def _poll(condition, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:g} s"
        time.sleep(0.2)


@pytest.fixture
def real_node(installed, testbed, kafka_topic, tmp_path: Path, small_disk) -> Iterator[Agent]:
    """A served agent and a real Filebeat writing to a topic of the test's own; Filebeat's config directory (its
    path.home) and, inside it, its path.data on small filesystems of their own."""
    home = small_disk(tmp_path / "filebeat", "4m")
    small_disk(home / "data", "4m")
    running = Agent(filebeat_agent_config(tmp_path, installed.filebeat, bootstrap=testbed.bootstrap,
                                          topic=kafka_topic))
    try:
        yield running
    finally:
        running.close()


@pytest.mark.slow
def test_real_filebeat_a_change_with_its_config_disk_full_is_507_and_filebeat_runs_on_untouched(real_node):
    config_files = {p: p.read_bytes() for p in (real_node.config_dir / "filebeat.yml",
                                                 real_node.config_dir / "inputs.d" / "replay.yml")}
    pid = real_node.pid()
    ballast = fill(real_node.config_dir)
    with pytest.raises(AgentError) as refused:
        real_node.client.put_config("filebeat", 1, {"filebeat.queue.mem.flush.timeout": 0.1})
    assert refused.value.status == 507
    assert refused.value.detail["path"] == str(real_node.config_dir / "filebeat.yml")
    assert {p: p.read_bytes() for p in config_files} == config_files
    assert not [p for p in real_node.config_dir.rglob("*") if p.name.startswith(".") and p.name != ".ballast"]
    state = real_node.client.component("filebeat")
    assert (real_node.pid(), state["version"], state["health"]["ok"]) == (pid, 0, True)
    ballast.unlink()
    result = real_node.client.put_config("filebeat", 1, {"filebeat.queue.mem.flush.timeout": 0.1})
    assert (result.status, result.action, result.version) == ("applied", "restarted", 1)


@pytest.mark.slow
def test_real_filebeat_with_its_registry_disk_full_ships_on_is_not_healthy_and_loses_nothing(
        real_node, testbed, kafka_topic, tmp_path):
    data = real_node.config_dir / "data"
    log = tmp_path / "logs" / "access.log"
    arrivals = Arrivals(testbed.bootstrap, kafka_topic)
    try:
        with LineWriter(log, batch=2) as writer:
            _poll(lambda: registry_offsets(data), "Filebeat's registry written")
            pid = real_node.pid()
            ballast = fill(data)
            health = real_node.client.component("filebeat")["health"]
            assert health["ok"] is False and f"no space left on device: {data} (Filebeat's registry" in health["detail"]
            with pytest.raises(AgentError) as refused:
                real_node.client.put_config("filebeat", 1, {"filebeat.queue.mem.flush.timeout": 0.1})
            assert refused.value.status == 507 and refused.value.detail["path"] == str(data)
            # The registry's last block fills (a few seconds of updates), then every write fails and Filebeat says so.
            _poll(lambda: "Failed to update state in the registry" in filebeat_log(real_node.config_dir),
                  "a registry write failed")
            stale, written_when_full = registry_offsets(data), writer.written
            # It ships on: lines written since reach Kafka; the registry stays where it was; no restart was made.
            arrivals.until(lambda: max(arrivals.seen, default=-1) >= written_when_full + 200,
                           "lines written with the registry's disk full reach Kafka")
            assert registry_offsets(data) == stale and real_node.pid() == pid
            ballast.unlink()
            _poll(lambda: real_node.client.component("filebeat")["health"]["ok"], "healthy once there is room")
            _poll(lambda: registry_offsets(data) != stale, "the registry written again")  # a whole checkpoint
        identity = (log.stat().st_dev, log.stat().st_ino)
        arrivals.until(lambda: len(arrivals.seen) >= writer.written, "every line written arrived")
        # Filebeat 7.17 keeps its registry log's write error after the disk had room again: every other update
        # fails, the others write a whole checkpoint, so the registry may stay one update behind (no restart clears it
        # but its own). The restart a change makes sends that update's lines again, and nothing before them.
        recorded = registry_offsets(data)[identity]
        result = real_node.client.put_config("filebeat", 1, {"filebeat.queue.mem.flush.timeout": 0.1})
        assert (result.status, result.action) == ("applied", "restarted"), result.message
        # One line after the restart: Filebeat reads in order into one partition, so whatever the restart sends
        # again comes before it.
        with open(log, "a") as out:
            out.write(f'{{"seq": {writer.written}}}\n')
        arrivals.until(lambda: writer.written in arrivals.seen, "the line written after the restart arrived")
    finally:
        arrivals.close()
    assert sorted(arrivals.seen) == list(range(writer.written + 1))  # nothing lost
    starts = _line_starts(log)
    again = sorted(seq for seq, count in arrivals.seen.items() if count > 1)
    assert all(starts[seq] >= recorded for seq in again), (recorded, [(seq, starts[seq]) for seq in again])


def _line_starts(log: Path) -> dict[int, int]:
    """Each line's `seq` -> the byte offset the line starts at."""
    starts, offset = {}, 0
    for line in log.read_bytes().splitlines(keepends=True):
        starts[json.loads(line)["seq"]] = offset
        offset += len(line)
    return starts
