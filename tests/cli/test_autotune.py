"""`pipetune autotune` as a user runs it: on the default twin, with Ray, to the end and after a kill, in a
narrow terminal and piped."""

import fcntl
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

PIPETUNE = str(Path(sys.executable).with_name("pipetune"))
PAPER = Path(__file__).parents[2] / "testbed" / "paper.yaml"  # the paper's pipeline, ending in a Spark job


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


def _in_a_terminal(args: list[str], columns: int, timeout_s: float = 600) -> str:
    """Run `pipetune` with stdout and stderr on a pseudo-terminal `columns` wide; what it drew, one drawn line
    a line (styles dropped, cursor moves as line breaks)."""
    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm-256color"}
    process = subprocess.Popen([PIPETUNE, *args], stdin=subprocess.DEVNULL, stdout=side, stderr=side, env=env)
    os.close(side)
    chunks = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the other end closed: the command is done
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    assert process.wait(timeout=60) == 0
    text = re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode(errors="replace"))  # colours and styles
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "\n", text)  # a redraw's cursor moves: start a new line


@pytest.mark.slow
def test_windows_read_well_in_an_80_column_terminal_and_in_a_pipe(tmp_path):
    """Every window's P95 and action, legible in a narrow terminal (no column squeezed away) and piped, and there
    beside its P95 what it cost: the shippers' CPU as a share of a core, the Produce requests a second."""
    def run(name: str) -> list[str]:
        return ["autotune", "--windows", "4", "--speed", "0", "--json", str(tmp_path / f"{name}.json"),
                "--state-dir", str(tmp_path / name)]

    drawn = _in_a_terminal(run("tty"), 80)
    piped = _run(*run("pipe")[1:])
    assert piped.returncode == 0, piped.stderr[-2000:]
    assert max(len(line) for line in drawn.splitlines() + piped.stderr.splitlines()) <= 80
    unwrapped = re.sub(r"\n {4}", " ", piped.stderr)  # a piped row's continuation lines are indented
    for name, text in (("tty", drawn), ("pipe", unwrapped)):
        windows = json.loads((tmp_path / f"{name}.json").read_text())["windows"]
        for d in windows:
            window, action, p95 = f"{d['window'] + 1}/4", d["action"], f"{d['observed']['p95_s']:.3f}"
            cpu = sum(d["observed"]["cpu_cores"][part] for part in ("filebeat", "logstash"))
            cost = rf"CPU {100 * cpu:.1f}%\s+{d['observed']['produce_requests_per_s']:.0f} req/s"
            pattern = (rf"│\s*{window} │ {action}\s.*│\s*{p95} │\s*{100 * cpu:.1f}% │" if name == "tty"
                       else rf"^window {window}\s+{action}\s.*P95 {p95} s\s+{cost}\s+out/in ")
            assert re.search(pattern, text, re.MULTILINE), (name, pattern, text[-3000:])
        assert re.search(r"final.*\d\.\d{3}", text)  # the summary's P95 of the final config
    assert "│" not in piped.stderr  # piped: plain lines, no table drawn


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")] if path.exists() else []


@pytest.mark.slow
def test_sigterm_finishes_the_window_exits_0_and_a_restart_numbers_on_and_reverts(tmp_path):
    state = tmp_path / "state"
    # a paced twin: a 30 s window takes 3 wall seconds, so the signal lands inside one
    process = subprocess.Popen([PIPETUNE, "autotune", "--windows", "1000", "--window", "30", "--speed", "10",
                                "--state-dir", str(state)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    decisions = state / "decisions.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(_lines(decisions)) < 3:
        time.sleep(0.2)
    before = len(_lines(decisions))
    assert before >= 3
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-2000:]
    assert "SIGTERM: finishing the window in progress" in stderr and "fresh windows" in stderr  # the summary
    logged = _lines(decisions)
    assert before <= len(logged) <= before + 1  # the window in progress, and no other
    assert [d["window"] for d in logged] == list(range(len(logged)))
    observed = _lines(state / "observations.jsonl")
    assert [o["config"] for o in observed] == [d["config"] for d in logged]  # each window measured and recorded
    status = json.loads((state / "status.json").read_text())
    assert status["last_decision"]["window"] == len(logged) - 1
    assert logged[-1]["action"] != "explore"  # stopping applies no new candidate
    # the twin lives in the process: a restarted one starts on the stored incumbent
    restarted_on = json.loads((state / "incumbent.json").read_text())["config"]

    result = _run("--windows", "2", "--speed", "0", "--on-exit", "revert", "--state-dir", str(state))
    assert result.returncode == 0, result.stderr[-2000:]
    again = _lines(decisions)
    assert [d["window"] for d in again] == list(range(len(logged) + 3))  # numbering carries on
    revert = again[-1]
    assert revert["action"] == "revert"
    in_force = again[-2]["config"] | {k: b for k, (_, b) in again[-2]["change"].items()}
    assert revert["config"] == in_force
    assert in_force | {k: b for k, (_, b) in revert["change"].items()} == restarted_on  # the config it started from


@pytest.mark.parametrize("flag", ["lots", "0", "-5"])
def test_a_request_budget_that_is_not_none_default_or_a_positive_rate_is_refused_naming_the_option(flag):
    result = _run("--request-budget", flag, "--windows", "1")
    assert result.returncode == 2 and "--request-budget" in result.stderr and "requests per second" in result.stderr


def test_the_end_summary_says_each_budgeted_cost_in_its_unit():
    from cli.autotune import _budget_line, _request_budget
    from controller.state import BudgetReport
    from models.budget import REQUESTS, RequestBudget
    assert _request_budget("none") is None and _request_budget("default") == RequestBudget()
    assert _request_budget("120") == RequestBudget(per_s=120.0)
    line = _budget_line(BudgetReport(limits={"filebeat": 0.103, REQUESTS: 120.0}, used={"filebeat": 0.045,
                                     REQUESTS: 44.0}, units={"filebeat": "cores", REQUESTS: "req/s"}))
    assert "filebeat 0.045 of 0.103 cores" in line and "kafka_requests 44.000 of 120.000 req/s" in line


def test_the_twin_a_live_run_screens_with_has_the_spark_stage_its_pipeline_ends_in():
    """Whether autotune drives the testbed's replay or not (`--load none`): the deployment says where it ends."""
    from cli.autotune import _default_calibration
    from testbed.endpoints import deployment
    from testbed.pipeline import load_pipeline

    assert _default_calibration(None) == "paper-2vcpu"
    assert _default_calibration(deployment(load_pipeline())) == "local-filebeat-kafka"
    assert _default_calibration(deployment(load_pipeline(PAPER))) == "paper-testbed"
