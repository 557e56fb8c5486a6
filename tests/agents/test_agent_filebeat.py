"""The agent changing a real Filebeat process: validation, Filebeat's own check, reload vs restart,
rollback of a component that dies, idempotent and serialised requests, the audit log."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import yaml

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


def test_input_change_reloads_live_and_queue_change_restarts(agent):
    pid = agent.pid()
    live = agent.client.put_config("filebeat", 1, {"filebeat.backoff": 0.02})
    assert (live.status, live.action, live.version) == ("applied", "inputs reloaded", 1)
    assert agent.pid() == pid
    [entry] = yaml.safe_load((agent.config_dir / "inputs.d" / "replay.yml").read_text())
    assert entry["backoff.init"] == "20ms"

    restart = agent.client.put_config("filebeat", 2, {"filebeat.queue.mem.events": 8192})
    assert (restart.status, restart.action, restart.version) == ("applied", "restarted", 2)
    assert agent.pid() != pid and agent.client.component("filebeat")["health"]["ok"]
    assert yaml.safe_load(agent.main_file())["queue.mem"]["events"] == 8192
    assert restart.params["filebeat.backoff"] == 0.02  # the earlier change is kept


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
