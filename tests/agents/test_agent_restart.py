"""`pipetune agent` killed in the middle of a change comes back knowing the version in force."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from agents.client import AgentClient
from agents.runtimes import ProcessRuntime
from tests.agents.conftest import TOKEN, filebeat_agent_config

pytestmark = pytest.mark.slow


def _start_agent(config_file: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PIPETUNE_AGENT_TOKEN": TOKEN}
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-c", "from cli.main import app; app()", "agent",
                                 "--config", str(config_file)], stdout=out, stderr=subprocess.STDOUT, env=env)


def _wait_answering(client: AgentClient, agent: subprocess.Popen, log: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert agent.poll() is None, log.read_text()
        try:
            client.components()
            return
        except Exception:  # not listening yet
            time.sleep(0.2)
    raise AssertionError(f"the agent did not answer within {timeout_s} s:\n{log.read_text()}")


def _audit(state_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (state_dir / "filebeat" / "audit.jsonl").read_text().splitlines()]


def test_agent_killed_mid_change_comes_back_on_the_version_in_force(installed, tmp_path):
    config = filebeat_agent_config(tmp_path, installed.filebeat)
    config_file = tmp_path / "agent.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    spec = config.components[0]
    runtime = ProcessRuntime("filebeat", spec.runtime.argv, config.state_dir / "filebeat" / "run")
    log = tmp_path / "agent.log"
    agent = _start_agent(config_file, log)
    client = AgentClient(f"http://127.0.0.1:{config.port}", TOKEN, timeout_s=60)
    try:
        _wait_answering(client, agent, log)
        assert client.put_config("filebeat", 1, {"filebeat.queue.mem.events": 8192}).status == "applied"
        in_force = spec.config.read_text()

        # The next start hangs, so the agent is still waiting for Filebeat's health when it is killed.
        (spec.config.parent / "slow-next").touch()
        threading.Thread(target=lambda: _ignore(lambda: client.put_config(
            "filebeat", 2, {"filebeat.queue.mem.events": 16384})), daemon=True).start()
        first_pid = runtime.pid()
        deadline = time.monotonic() + 30
        # Kill only once the slow start is really under way (a new process in the pid file), not while
        # the old Filebeat is still shutting down: that is the moment the test is about.
        while not any(e["event"] == "change_started" and e["version"] == 2 for e in _audit(config.state_dir)) \
                or runtime.pid() in (None, first_pid):
            assert time.monotonic() < deadline, "the change never started"
            time.sleep(0.1)
        slow_start_pid = runtime.pid()
        agent.send_signal(signal.SIGKILL)
        agent.wait(10)
        assert "16384" in spec.config.read_text()  # the change was half done

        agent = _start_agent(config_file, log)
        _wait_answering(client, agent, log)
        state = client.component("filebeat")
        assert state["version"] == 1 and state["change_in_progress"] is False
        assert not _alive(slow_start_pid)  # the half-started process was stopped, not leaked
        assert state["health"]["ok"] and state["params"]["filebeat.queue.mem.events"] == 8192
        assert spec.config.read_text() == in_force
        assert _audit(config.state_dir)[-1] | {"at": 0} == {"at": 0, "event": "recovered", "interrupted": 2,
                                                            "restored": 1}
        # The interrupted version was never decided, so the same request can be made again.
        assert client.put_config("filebeat", 2, {"filebeat.queue.mem.events": 16384}).status == "applied"
    finally:
        _stop(client, agent, runtime)


def _stop(client: AgentClient, agent: subprocess.Popen, runtime: ProcessRuntime) -> None:
    """End a test's real agent and its component: the client closed, the agent terminated, the process stopped."""
    client.close()
    if agent.poll() is None:
        agent.terminate()
        agent.wait(20)
    runtime.stop()


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper that this sandbox may lack does not count)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _ignore(call) -> None:
    try:
        call()
    except Exception:  # the agent is killed under this request: its error is expected
        pass
