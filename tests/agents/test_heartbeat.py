"""The heartbeat writer and the agent's clock: heartbeat lines the probe reads, a sequence that survives
restarts and rotation, and the time the controller's offset estimate asks for."""

import json
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from agents.config import AgentConfig
from agents.heartbeat import HeartbeatWriter
from agents.probe.events import heartbeat_of
from agents.service import create_app
from tests.clock import VirtualClock

TOKEN = "t0ken"


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_lines_carry_node_sequence_and_write_time_in_ms(tmp_path):
    clock = VirtualClock(1_800_000_000.0)
    writer = HeartbeatWriter(tmp_path / "canary.log", "web-1", 10, tmp_path / "state", clock=clock.time)
    for _ in range(3):
        writer.write_one()
        clock.advance(0.1)
    writer.stop()
    beats = [heartbeat_of(line) for line in lines(tmp_path / "canary.log")]
    assert [(c.node, c.seq) for c in beats] == [("web-1", 0), ("web-1", 1), ("web-1", 2)]
    assert [c.ts_s for c in beats] == pytest.approx([1_800_000_000.0, 1_800_000_000.1, 1_800_000_000.2])


def test_the_sequence_continues_across_restarts_and_follows_rotation(tmp_path):
    log, state = tmp_path / "canary.log", tmp_path / "state"
    first = HeartbeatWriter(log, "n", 10, state)
    first.write_one()
    first.write_one()
    log.rename(tmp_path / "canary.log.1")  # logrotate: the writer follows the path
    first.write_one()
    first.stop()
    second = HeartbeatWriter(log, "n", 10, state)
    second.write_one()
    second.stop()
    assert [c["pipetune_canary"]["seq"] for c in lines(tmp_path / "canary.log.1")] == [0, 1]
    assert [c["pipetune_canary"]["seq"] for c in lines(log)] == [2, 3]


def test_a_bad_rate_is_refused(tmp_path):
    with pytest.raises(ValueError, match="eps"):
        HeartbeatWriter(tmp_path / "c.log", "n", 0, tmp_path)


def _config(tmp_path: Path, **heartbeat) -> AgentConfig:
    return AgentConfig.model_validate({
        "state_dir": str(tmp_path / "state"),
        "components": [{"name": "broker", "kind": "kafka", "bootstrap": "127.0.0.1:1"}],
        "canary": {"path": str(tmp_path / "canary.log"), "node": "web-1", **heartbeat}})


def _wait_for(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout_s} s")
        time.sleep(0.05)


def test_the_agent_writes_heartbeats_while_it_serves_and_tells_its_time(tmp_path):
    config = _config(tmp_path, canary_eps=50)
    log = tmp_path / "canary.log"
    with TestClient(create_app(config, TOKEN, components={})) as http:
        assert http.get("/clock").status_code == 401
        before = time.time()
        answer = http.get("/clock", headers={"Authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 200 and before <= answer.json()["time_s"] <= time.time()
        _wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= 3)
    written = len(log.read_text().splitlines())
    with TestClient(create_app(config, TOKEN, components={})):
        _wait_for(lambda: len(log.read_text().splitlines()) > written)
    seqs = [c["pipetune_canary"]["seq"] for c in lines(log)]
    assert seqs == list(range(len(seqs)))  # one sequence across both agents, none lost or repeated
