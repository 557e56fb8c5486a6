"""bench.faults: how it counts injections into a row, its one table with a row per fault and '-' where a column does
not apply, its bounds, all on recorded injection results; and one real run of its two cheapest faults (the network
partition and the daemon killed between promotion steps, side by side) whose figures come from what happened. The
faults themselves are tests/faults/'s."""

from __future__ import annotations

import json
import os
import re
from contextlib import nullcontext
from pathlib import Path

import pytest

from bench import faults
from bench.faults import NA, FaultRow, Injection, row_of, table
from testbed.daemon_kill import Recovery
from testbed.net_pool import TIMEOUT


def _injection(held: int = 2, wrong: int = 0, recover_s: float | None = 20.04, off_version: int = 0) -> Injection:
    return Injection(held, wrong, recover_s, 0.01, ("disturbed: recorded",) * held, off_version)


def test_a_row_sums_what_its_injections_counted_and_keeps_the_worst_recovery():
    row = row_of("disk full (3)", [_injection(2, 0, 12.34), _injection(3, 1, 30.06, off_version=1)], 0, 1)
    assert row == FaultRow("disk full (3)", 2, 5, 1, 0, 2, NA, 30.1)


def test_one_injection_not_recovered_from_makes_the_row_not_recovered():
    row = row_of("SIGKILL of the agent mid-apply (4)", [_injection(recover_s=9.0), _injection(recover_s=None)], 0, 0)
    assert row.recover_s_max is None and row.injections == 2
    assert table([row]).splitlines()[1].endswith("not recovered")


def test_the_table_has_every_column_the_issue_asks_for_and_prints_dashes_as_they_are():
    rows = [row_of("clock step ±2 s (5)", [_injection(2, 0, 27.8)] * 3, 0, 0),
            FaultRow("listening off loopback (6)", 40, NA, NA, NA, NA, 0, NA)]
    header, clock, listening = table(rows).splitlines()
    assert re.split(r"\s{2,}", header) == ["fault", "injections", "frozen/disturbed", "wrong decisions",
                                                      "events lost", "nodes off version", "off loopback",
                                                      "recovered in (s, worst)"]
    assert clock.split()[-8:] == ["(5)", "3", "6", "0", "0", "0", "-", "27.8"]
    assert listening.split()[-7:] == ["40", "-", "-", "-", "-", "0", "-"]
    # columns line up: each cell starts where its header does
    starts = [header.index(h) for h in ("injections", "wrong decisions", "recovered in")]
    assert [clock[s - 1] for s in starts] == [" "] * 3 and [clock[s] for s in starts] == ["3", "0", "2"]


def test_a_fault_not_run_is_a_row_of_dashes_saying_why():
    row = faults.not_run("network (1)", "network namespaces need root")
    assert row.injections == 0 and {row.windows_held, row.wrong_decisions, row.recover_s_max} == {NA}
    assert "not run (network namespaces need root)" in table([row])


def test_the_listening_row_counts_listings_and_sockets_off_loopback_only():
    watch = faults.ListeningWatch()
    watch.samples = 12
    watch.seen = {("127.0.0.1", 8765): "python", ("127.0.2.1", 9092): "java", ("0.0.0.0", 6379): "gcs_server",
                  ("::1", 9090): "prometheus"}  # a simulated host's 127/8 address is this machine's loopback still
    assert watch.row() == FaultRow("listening off loopback (6)", 12, NA, NA, NA, NA, 1, NA)
    assert watch.record()["off_loopback"] == ["gcs_server on 0.0.0.0:6379"]


SAID = "the daemon restarted in the middle of a rollout: found ...; every node on version 1"
PROMOTED = {"node-1": (1, "promoted"), "node-2": (1, "promoted")}
ON_IT = {"node-1": 0.1, "node-2": 0.1}  # each node's flush timeout, version 1's


def _recovery(phase: str = "steady", version: int = 1, timeout_s: float = 0.1, nodes: dict | None = None,
              actions: tuple[str, ...] = ("override", "recover", "hold"), said: tuple[str, ...] = (SAID,)
              ) -> Recovery:
    return Recovery(phase, version, {TIMEOUT: timeout_s}, PROMOTED if nodes is None else nodes, actions, said)


def test_a_daemon_kill_after_which_the_promotion_ended_on_every_node_counts_nothing_wrong():
    injection, logged = faults.daemon_kill_counts(_recovery(), SAID, ON_IT, ON_IT, 12.34)
    assert (injection.wrong, injection.off_version, injection.held, injection.recover_s, logged) == (0, 0, 0, 12.34,
                                                                                                      True)
    assert injection.reasons == (SAID,)


@pytest.mark.parametrize("left", [
    _recovery(phase="promoting", version=0, timeout_s=1.0, nodes={"node-1": (1, "promoted"), "node-2": (0, "pending")}),
    _recovery(version=0, timeout_s=1.0, nodes={"node-1": (0, "rolled_back"), "node-2": (0, "promoted")}),  # taken back
    _recovery(actions=("override", "recover", "rollback")),  # promoted, then rolled back on the first window judged
    _recovery(nodes={"node-1": (1, "promoted"), "node-2": (1, "failed")})],
    ids=["not-finished", "taken-back", "rolled-back-after", "a-node-failed"])
def test_a_daemon_kill_after_which_the_promotion_did_not_end_on_every_node_is_a_wrong_decision_not_recovered(left):
    injection, _ = faults.daemon_kill_counts(left, SAID, ON_IT, ON_IT, 12.34)
    assert (injection.wrong, injection.recover_s) == (1, None)
    row = row_of("SIGKILL of the daemon between promotion steps (4)", [injection], NA, 0)
    assert (row.wrong_decisions, row.recover_s_max, row.events_lost) == (1, None, NA)


def test_a_node_whose_agent_or_files_disagree_with_its_placement_is_off_version():
    reported_off = {"node-1": 0.1, "node-2": 1.0}  # node-2's agent reports what its files no longer hold
    files_off = {"node-1": 0.1, "node-2": 1.0}  # node-2's files and agent agree, on a version the pool does not place
    assert faults.daemon_kill_counts(_recovery(), SAID, reported_off, ON_IT, 1.0)[0].off_version == 1
    assert faults.daemon_kill_counts(_recovery(), SAID, files_off, files_off, 1.0)[0].off_version == 1
    assert faults.daemon_kill_counts(_recovery(), SAID, {"node-1": 1.0, "node-2": 1.0}, ON_IT, 1.0)[0].off_version == 2


@pytest.mark.parametrize("said", [(), ("the daemon restarted ...; every node on version 0",), (SAID, SAID)],
                         ids=["nothing", "other-words", "twice"])
def test_a_decision_log_that_does_not_say_once_what_was_found_and_done_is_not_counted_as_logged(said):
    injection, logged = faults.daemon_kill_counts(_recovery(said=said), SAID, ON_IT, ON_IT, 1.0)
    assert not logged and injection.wrong == 0  # the nodes are right; what the log says is counted apart


def test_frozen_windows_after_the_restart_are_counted_held():
    injection, _ = faults.daemon_kill_counts(_recovery(actions=("override", "recover", "frozen", "frozen", "hold")),
                                             SAID, ON_IT, ON_IT, 1.0)
    assert injection.held == 2 and injection.wrong == 0


def test_the_daemon_note_says_in_how_many_kills_the_log_said_what_happened():
    assert faults.daemon_note({"injections": [{}] * 4, "logged": 3}) == (
        "SIGKILL of the daemon (4): the decision log said what it found and did after 3 of 4 kills")


RECORDED = {  # a row per fault as a run printed it, and its record
    "network": FaultRow("network partition, 300 ms, 5 % loss (1)", 3, 2, 0, NA, 0, NA, 4.2),
    "broker": FaultRow("Kafka broker loss (2)", 2, 4, 0, 0, 0, NA, 53.9),
    "disk": FaultRow("disk full (3)", 2, 0, 0, 0, 0, NA, 11.0),
    "sigkill": FaultRow("SIGKILL of the agent mid-apply (4)", 2, 2, 0, 0, 0, NA, 31.5),
    "daemon": FaultRow("SIGKILL of the daemon between promotion steps (4)", 4, 0, 0, NA, 0, NA, 14.2),
    "clock": FaultRow("clock step ±2 s (5)", 2, 4, 0, 0, 0, NA, 28.0),
    "bad": FaultRow("bad input (7)", 2, NA, 0, 0, 0, NA, 9.9)}


@pytest.fixture
def recorded(monkeypatch) -> list[str]:
    """bench.faults with each fault's run replaced by its recorded row, nothing installed, and no listing taken;
    the faults run, in the order they ran."""
    ran: list[str] = []

    def replay(fault: str):
        def run(reps: int, window_s: float, rate_eps: float, directory: Path) -> tuple[FaultRow, dict]:
            ran.append(fault)
            return RECORDED[fault], {"reps": reps} | ({"injections": [{}] * 4, "logged": 4} if fault == "daemon"
                                                      else {})
        return run

    monkeypatch.setattr(faults, "RUNS", {fault: replay(fault) for fault in faults.RUNS})
    monkeypatch.setattr(faults, "ASIDE", ())  # every fault in this process, where `ran` sees it
    monkeypatch.setattr(faults, "install_all", lambda: None)
    monkeypatch.setattr(faults.ListeningWatch, "__enter__", lambda self: self)
    monkeypatch.setattr(faults.ListeningWatch, "__exit__", lambda self, *exc: None)
    return ran


def test_a_run_prints_one_table_with_a_row_per_fault_in_the_issues_order(recorded, tmp_path, capsys):
    faults.main(["--reps", "2", "--out", str(tmp_path)])
    assert recorded == ["network", "broker", "disk", "sigkill", "daemon", "clock", "bad"]
    *lines, note = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[0] for line in lines] == [
        "fault", "network partition, 300 ms, 5 % loss (1)", "Kafka broker loss (2)", "disk full (3)",
        "SIGKILL of the agent mid-apply (4)", "SIGKILL of the daemon between promotion steps (4)",
        "clock step ±2 s (5)", "listening off loopback (6)", "bad input (7)"]
    assert note == "SIGKILL of the daemon (4): the decision log said what it found and did after 4 of 4 kills"
    result = json.loads((tmp_path / "result.json").read_text())
    assert [r["fault"] for r in result["figures"]] == [line.split("  ")[0] for line in lines[1:]]
    assert result["figures"][6] == {"fault": "listening off loopback (6)", "injections": 0, "windows_held": NA,
                                    "wrong_decisions": NA, "events_lost": NA, "nodes_off_version": NA,
                                    "off_loopback": 0, "recover_s_max": NA}
    assert result["details"]["disk"] == {"reps": 2} and result["details"]["listening"]["off_loopback"] == []


def test_only_the_faults_asked_for_run(recorded, tmp_path, capsys):
    faults.main(["--faults", "bad,clock", "--out", str(tmp_path)])
    assert recorded == ["clock", "bad"]  # in the issue's order, whatever the order asked
    assert [line.split("  ")[0] for line in capsys.readouterr().out.splitlines()[1:]] == [
        "clock step ±2 s (5)", "bad input (7)"]


def test_a_fault_whose_run_fails_is_a_row_saying_so_and_the_others_still_run(recorded, tmp_path, capsys):
    def broken(reps: int, window_s: float, rate_eps: float, directory: Path) -> tuple[FaultRow, dict]:
        raise TimeoutError("node-2's agent made no change to kill within 90 s")

    faults.RUNS["sigkill"] = broken
    faults.main(["--faults", "sigkill,clock", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "result.json").read_text())
    assert [r["fault"] for r in result["figures"]] == ["SIGKILL of the agent mid-apply (4): not run (failed: "
                                                       "TimeoutError)", "clock step ±2 s (5)"]
    assert "node-2's agent made no change to kill" in result["details"]["sigkill"]["error"]
    assert recorded == ["clock"]


@pytest.mark.parametrize("argv, said", [
    (["--reps", "0"], "--reps: 0, allowed 1-20"),
    (["--injections", "21"], "--reps: 21, allowed 1-20"),
    (["--window", "2"], "--window: 2, allowed 5-60"),
    (["--rate", "5000"], "--rate: 5000, allowed 10-500"),
    (["--faults", "clock,dns"], "--faults: clock,dns, allowed any of network, broker, disk, sigkill, daemon, clock, "
                                "bad, listening"),
    (["--faults", "listening"], "--faults: listening is watched while the other faults run")])
def test_settings_out_of_range_are_refused_naming_them(argv, said, capsys):
    with pytest.raises(SystemExit) as exit_:
        faults.main(argv)
    assert exit_.value.code == 2 and said in capsys.readouterr().err


@pytest.mark.slow
def test_a_network_partition_and_a_daemon_kill_on_real_processes_are_counted_from_what_happened(
        tmp_path, capsys, monkeypatch, testbed):
    """One run of both rows, the network's beside the daemon's as the bench runs it (the two took 97 s and about
    70 s one after the other). The partition only: the delay and the loss take minutes here and
    tests/faults/test_network.py has them. One daemon kill, node-2's step applied after the daemon died
    (tests/faults/test_sigkill.py's real daemon test has it failing), on the session's broker rather than one of the
    row's own."""
    root = os.geteuid() == 0  # network namespaces and TUN devices need root; the daemon's row does not
    monkeypatch.setattr(faults, "NET_SHAPES", {"partition": None})
    monkeypatch.setattr(faults, "DAEMON_STEPS", {"changed": faults.DAEMON_STEPS["changed"]})
    monkeypatch.setattr(faults, "brokers_only", lambda spec: nullcontext(testbed.bootstrap))
    faults.main(["--faults", f"{'network,' if root else ''}daemon,listening", "--reps", "1", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "result.json").read_text())
    *network, daemon, listening = result["figures"]

    [killed] = result["details"]["daemon"]["injections"]
    assert killed["node_2_step"] == "changed" and killed["node_2_timeout_after_the_kill"] == 0.1
    assert killed["logged"] and killed["reasons"][0].endswith("(node-2: already in place); every node on version 1")
    assert killed["reported"] == killed["on_disk"] == {"node-1": 0.1, "node-2": 0.1}
    assert daemon == {"fault": "SIGKILL of the daemon between promotion steps (4)", "injections": 1,
                      "windows_held": killed["held"], "wrong_decisions": 0, "events_lost": NA,
                      "nodes_off_version": 0, "off_loopback": NA, "recover_s_max": round(killed["recover_s"], 1)}
    assert capsys.readouterr().out.splitlines()[-1].endswith("after 1 of 1 kills")
    # the daemon's local Ray is in the process tree the watch lists; the agents in their namespaces are off this
    # namespace's listing; nothing listed is off loopback
    assert {"gcs_server", "raylet"} <= set(result["details"]["listening"]["processes_seen"])
    assert listening["injections"] > 0 and listening["off_loopback"] == 0

    if not root:
        return
    record = result["details"]["network"]
    assert list(record) == list(faults.NET_SHAPES) and all(len(done) == 1 for done in record.values())
    [partition] = record["partition"]
    # node-2 cut off while the canary ran the candidate: the windows it was cut off in froze, naming it
    frozen = [r for r in partition["reasons"] if "node-2" in r]
    assert len(frozen) >= faults.PARTITION_WINDOWS and partition["held"] >= faults.PARTITION_WINDOWS
    assert network == [{"fault": "network partition, 300 ms, 5 % loss (1)", "injections": 1,
                        "windows_held": partition["held"], "wrong_decisions": 0, "events_lost": NA,
                        "nodes_off_version": 0, "off_loopback": NA, "recover_s_max": round(partition["recover_s"], 1)}]
