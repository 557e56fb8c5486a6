"""`pipetune autotune --pipeline FILE`: the daemon on the live testbed, every change through its agent."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from controller.agent_changes import changes_for_agent, changes_not_in_audit, owned_params
from models.space import PIPELINE_SPACE
from testbed import agent
from testbed.endpoints import live_pipeline

PIPETUNE = str(Path(sys.executable).with_name("pipetune"))


def _autotune(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PIPETUNE, "autotune", *args], capture_output=True, text=True, timeout=600)


def test_a_testbed_that_is_not_up_is_a_clear_error(tmp_path, make_pipeline):
    result = _autotune("--pipeline", str(make_pipeline(tmp_path, "down")), "--windows", "1")
    assert result.returncode == 2
    assert "the testbed's agent does not answer" in result.stderr and "pipetune testbed up" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_autotune_tunes_the_live_testbed_through_its_agent(testbed, testbed_file, tmp_path):
    pipeline = live_pipeline(testbed)
    before = pipeline.current()
    # From the component defaults (the session's testbed starts low-latency, where there is little to gain).
    assert pipeline.apply(PIPELINE_SPACE.defaults()).ok
    with agent.client(testbed) as client:
        owned = owned_params(client.components())
        seen = {name: len(client.audit(name)) for name in owned}
    out, state = tmp_path / "out.json", tmp_path / "state"
    # The test is about the daemon's changes going through the agent, not about what a learner makes of three
    # noisy live windows (the pipetune learner may well hold through all of them): OVAT's proposals do not
    # depend on what it observes, so from the first window on it changes filebeat.scan_frequency, a grid
    # level per window (a rollback, were a window to breach a guardrail, is a change through the agent too).
    try:
        result = _autotune("--pipeline", str(testbed_file), "--windows", "3", "--window", "15", "--rate", "300",
                           "--profile", "steady", "--strategy", "ovat",
                           "--json", str(out), "--state-dir", str(state))
        assert result.returncode == 0, result.stderr[-3000:]
        with agent.client(testbed) as client:
            audit = {name: client.audit(name)[seen[name]:] for name in owned}
    finally:
        assert pipeline.apply(before).ok
    windows = json.loads(out.read_text())["windows"]
    assert len(windows) == 3 and len((state / "decisions.jsonl").read_text().splitlines()) == 3
    assert all(w["observed"]["offered_eps"] > 0 for w in windows)  # the background replay drove every window
    assert changes_for_agent(windows, owned), "the daemon changed nothing in 3 windows"
    # Every change the daemon made is a version the agent decided (one per component it touches), or
    # one the agent refused at its checks.
    assert changes_not_in_audit(windows, audit, owned) == []
