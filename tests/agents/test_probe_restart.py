"""A probe killed mid-run on the real testbed: the agent starts it again, it resumes from its group's
committed offsets, and the canaries written while it was down are measured, not counted as lost."""

from __future__ import annotations

import os
import signal
import time
import urllib.request

import pytest

from agents.heartbeat import HeartbeatWriter
from testbed import agent

pytestmark = pytest.mark.slow
NODE = "restart-test-node"


def _sample(spec, name: str) -> float | None:
    """The running probe's value of `name{node=NODE}`, or None while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{spec.probe.metrics_port}/metrics", timeout=2) as response:
            lines = response.read().decode().splitlines()
    except OSError:
        return None
    prefix = f'{name}{{node="{NODE}"}} '
    return next((float(line[len(prefix):]) for line in lines if line.startswith(prefix)), 0.0)


def _wait_until(condition, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:.0f} s: {what}")
        time.sleep(0.5)


def test_killed_probe_resumes_and_loses_no_canary(testbed, tmp_path):
    writer = HeartbeatWriter(testbed.log_path(), NODE, 20, tmp_path / "canary")
    writer.start()
    try:
        _wait_until(lambda: (_sample(testbed, "pipetune_canary_received_total") or 0) >= 20, "canaries measured")
        with agent.client(testbed) as client:
            old_pid = client.component("probe")["runtime"]["pid"]
            os.kill(old_pid, signal.SIGKILL)
            written_at_kill = writer.next_seq
            # The agent's supervisor starts it again on the version in force.
            _wait_until(lambda: client.component("probe")["runtime"]["pid"] not in (None, old_pid), "probe restarted")
        # The new process counts from zero. It resumes from its group's committed offsets, so it measures
        # the canaries written while no probe ran (seconds of them: the supervisor looks every 5 s) as
        # well as the new ones; one second of canaries (20) may still be on their way.
        _wait_until(lambda: (_sample(testbed, "pipetune_canary_received_total") or 0)
                    >= writer.next_seq - written_at_kill - 20 > 40, "canaries after the restart")
        # A gap becomes a loss only after the grace (30 s); wait past it, then there must be none.
        grace_over = time.monotonic() + 35
        _wait_until(lambda: time.monotonic() > grace_over, "the grace to pass", 60)
        assert _sample(testbed, "pipetune_canary_lost_total") == 0
        assert _sample(testbed, "pipetune_canary_duplicate_total") == 0
    finally:
        writer.stop()
