"""`pipetune autotune --pipeline FILE`: the daemon on the live testbed, every change through its agent."""

import itertools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from bench.live import operator_ledger, start_operator_traffic, write_trace
from controller.agent_changes import changes_for_agent, changes_not_in_audit, owned_params
from models.space import PIPELINE_SPACE
from testbed import agent
from testbed.endpoints import live_pipeline, write_deployment

PIPETUNE = str(Path(sys.executable).with_name("pipetune"))
OPERATOR_PIECE_S = 30  # of the operator's trace, one replay


def _autotune(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PIPETUNE, "autotune", *args], capture_output=True, text=True, timeout=600)


def test_a_testbed_that_is_not_up_is_a_clear_error(tmp_path, make_pipeline):
    result = _autotune("--pipeline", str(make_pipeline(tmp_path, "down")), "--windows", "1")
    assert result.returncode == 2
    assert "the testbed's agent does not answer" in result.stderr and "pipetune testbed up" in result.stderr
    assert "Traceback" not in result.stderr


class AgentAudit:
    """What the testbed's agent audits from now on, of the parameters its components own."""

    def __init__(self, spec) -> None:
        self.spec = spec
        with agent.client(spec) as client:
            self.owned = owned_params(client.components())
            self.seen = {name: len(client.audit(name)) for name in self.owned}

    def since(self) -> dict[str, list[dict]]:
        with agent.client(self.spec) as client:
            return {name: client.audit(name)[self.seen[name]:] for name in self.owned}


@pytest.fixture
def from_defaults(testbed) -> Iterator[AgentAudit]:
    """The testbed on the component defaults (the session's starts low-latency, where there is little to
    gain), put back as it was after the test; and the agent's audit from then on."""
    pipeline = live_pipeline(testbed)
    before = pipeline.current()
    assert pipeline.apply(PIPELINE_SPACE.defaults()).ok
    try:
        yield AgentAudit(testbed)
    finally:
        assert pipeline.apply(before).ok


@pytest.mark.slow
def test_autotune_tunes_the_live_testbed_through_its_agent(from_defaults, testbed_file, tmp_path):
    out, state = tmp_path / "out.json", tmp_path / "state"
    # The test is about the daemon's changes going through the agent, not about what a learner makes of three
    # noisy live windows (the pipetune learner may well hold through all of them): OVAT's proposals do not
    # depend on what it observes, so from the first window on it changes filebeat.scan_frequency, a grid
    # level per window (a rollback, were a window to breach a guardrail, is a change through the agent too).
    result = _autotune("--pipeline", str(testbed_file), "--windows", "2", "--window", "10", "--rate", "300",
                       "--profile", "steady", "--strategy", "ovat", "--json", str(out), "--state-dir", str(state))
    assert result.returncode == 0, result.stderr[-3000:]
    audit, owned = from_defaults.since(), from_defaults.owned
    windows = json.loads(out.read_text())["windows"]
    assert len(windows) == 2 and len((state / "decisions.jsonl").read_text().splitlines()) == 2
    assert all(w["observed"]["offered_eps"] > 0 for w in windows)  # the background replay drove every window
    assert changes_for_agent(windows, owned), "the daemon changed nothing in 2 windows"
    # Every change the daemon made is a version the agent decided (one per component it touches), or
    # one the agent refused at its checks.
    assert changes_not_in_audit(windows, audit, owned) == []


def _trace_pieces(trace: Path, piece_s: int) -> list[Path]:
    """`trace` cut into consecutive pieces of `piece_s` seconds each (its lines are in time order, each second's
    together, and every second has some), so that one replay after another sends the trace's traffic in order."""
    lines = trace.read_text().splitlines(keepends=True)
    seconds = [list(group) for _, group in itertools.groupby(lines, key=lambda line: line.split("[", 1)[1][:26])]
    pieces = []
    for i in range(0, len(seconds), piece_s):
        piece = trace.with_name(f"{trace.stem}-{len(pieces)}{trace.suffix}")
        piece.write_text("".join(line for second in seconds[i:i + piece_s] for line in second))
        pieces.append(piece)
    return pieces


@pytest.mark.slow
def test_autotune_with_load_none_tunes_on_traffic_it_does_not_drive(testbed, testbed_file, from_defaults, tmp_path):
    """An independent replay writes an access log's arrivals into the harvested log, as an operator's traffic
    would; autotune on the deployment file with `--load none` drives nothing, reads the offered load from
    the agent's sources, and its changes go through the agent; the replay's own ledger loses nothing."""
    deployment = write_deployment(testbed, testbed_file)  # as `pipetune testbed up` writes it
    manifests = testbed.resolved_run_dir() / "manifests"
    known = set(manifests.glob("*.json"))
    out, state = tmp_path / "out.json", tmp_path / "state"
    # The operator's traffic for as long as the run takes (Ray's start, 2 windows, the settling after a restart),
    # so every window has traffic, and not much longer: the trace's pieces replayed one after another, each an
    # independent replay with its manifest, until autotune ends.
    pieces = _trace_pieces(write_trace(tmp_path / "access.log", 150, 240, seed=3), OPERATOR_PIECE_S)
    replays: list[tuple[subprocess.Popen, str]] = []
    with open(tmp_path / "autotune.err", "w+") as stderr:
        tuning = subprocess.Popen([PIPETUNE, "autotune", "--pipeline", str(deployment), "--load", "none",
                                   "--windows", "2", "--window", "10", "--strategy", "ovat", "--json", str(out),
                                   "--state-dir", str(state)], stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        try:
            deadline = time.monotonic() + 600
            while tuning.poll() is None:
                assert time.monotonic() < deadline, "autotune did not end within 600 s"
                replay, run_id = start_operator_traffic(testbed, pieces[len(replays) % len(pieces)], OPERATOR_PIECE_S)
                replays.append((replay, run_id))
                replay.wait()
            stderr.seek(0)
            assert tuning.returncode == 0, stderr.read()[-3000:]
            audit, owned = from_defaults.since(), from_defaults.owned
            ledgers = [operator_ledger(testbed, replay, run_id) for replay, run_id in replays]
        finally:
            if tuning.poll() is None:
                tuning.kill()
            for replay, _ in replays:
                if replay.poll() is None:
                    replay.terminate()
    # autotune replayed nothing
    assert set(manifests.glob("*.json")) - known == {manifests / f"{run_id}.json" for _, run_id in replays}
    windows = json.loads(out.read_text())["windows"]
    assert len(windows) == 2
    assert all(w["observed"]["offered_eps"] > 0 and w["observed"]["throughput_eps"] > 0 for w in windows)
    assert changes_for_agent(windows, owned), "the daemon changed nothing in 2 windows"
    assert changes_not_in_audit(windows, audit, owned) == []
    assert len((state / "decisions.jsonl").read_text().splitlines()) == 2
    assert all(ledger["lost"] == 0 for ledger in ledgers) and sum(ledger["expected"] for ledger in ledgers) > 0, ledgers
