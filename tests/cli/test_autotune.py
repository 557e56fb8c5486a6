"""`pipetune autotune` as a user runs it: on the default twin, with Ray, to the end and after a kill."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PIPETUNE = str(Path(sys.executable).with_name("pipetune"))


def _run(*args, timeout=600):
    return subprocess.run([PIPETUNE, "autotune", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_autotune_beats_the_defaults_and_hybrid_on_fresh_windows(tmp_path):
    out = tmp_path / "out.json"
    result = _run("--windows", "20", "--speed", "0", "--json", str(out), "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 0, result.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert len(doc["windows"]) == 20
    assert doc["final"]["p95_s"] < doc["defaults"]["p95_s"]
    assert doc["final"]["p95_s"] < doc["hybrid"]["p95_s"]
    assert doc["final"]["throughput_ratio"] >= 0.95
    assert (tmp_path / "state" / "autotune.png").read_bytes()[:4] == b"\x89PNG"
    assert "fresh windows" in result.stderr


@pytest.mark.slow
def test_a_daemon_killed_mid_run_resumes_from_its_state_directory(tmp_path):
    state = tmp_path / "state"
    process = subprocess.Popen([PIPETUNE, "autotune", "--windows", "200", "--speed", "0", "--state-dir", str(state)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    decisions = state / "decisions.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (not decisions.exists() or len(decisions.read_text().splitlines()) < 4):
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    seen = len(decisions.read_text().splitlines())
    assert seen >= 4
    result = _run("--windows", "2", "--speed", "0", "--state-dir", str(state))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "resumed" in result.stderr
    windows = [json.loads(line)["window"] for line in decisions.read_text().splitlines() if line.endswith("}")]
    assert windows[-2:] == [windows[-3] + 1, windows[-3] + 2]  # numbering carries on after the kill
