"""bench.faults: its table, its bounds, and one real run on the smallest setting whose figures come from the clock
steps it injected."""

from __future__ import annotations

import json

import pytest

from bench import faults
from bench.faults import FaultRow, table


def test_the_table_has_a_line_per_fault_and_says_not_recovered():
    rows = [FaultRow("clock step ±2 s (5)", 3, 6, 0, 0, 0, 27.8), FaultRow("other", 1, 0, 1, 2, 1, None)]
    lines = table(rows).splitlines()
    assert lines[0].split("  ")[0] == "fault" and "wrong decisions" in lines[0] and "nodes off version" in lines[0]
    assert lines[1].split() == ["clock", "step", "±2", "s", "(5)", "3", "6", "0", "0", "0", "27.8"]
    assert lines[2].endswith("not recovered")


@pytest.mark.parametrize("argv, said", [(["--injections", "0"], "--injections: 0, allowed 1-20"),
                                        (["--window", "2"], "--window: 2, allowed 5-60"),
                                        (["--rate", "5000"], "--rate: 5000, allowed 10-500"),
                                        (["--faults", "clock,disk"], "--faults: clock,disk, allowed any of clock, "
                                                                     "broker")])
def test_settings_out_of_range_are_refused_naming_them(argv, said, capsys):
    with pytest.raises(SystemExit) as exit_:
        faults.main(argv)
    assert exit_.value.code == 2 and said in capsys.readouterr().err


@pytest.mark.slow
def test_one_clock_step_on_the_real_testbed_is_counted_from_what_happened(installed, tmp_path, capsys):
    faults.main(["--faults", "clock", "--injections", "1", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "result.json").read_text())
    [row] = result["figures"]
    record = result["details"]["clock"]
    [injection] = record["injections"]
    # the step happened and the daemon saw it: the windows it held name it, and were counted
    assert injection["reasons"][0].startswith("disturbed: clock step: node node-2's clock moved -2000 ms")
    assert row["windows_held"] == injection["held"] == sum(r.startswith("disturbed") for r in injection["reasons"])
    assert injection["held"] == 2  # the window it stepped in and the next, read on the old offset for a second
    # every figure is what the run counted, and each meets its goal
    assert record["requests_sent"] > 1000 and row["events_lost"] == record["requests_sent"] - record["lines_arrived"]
    assert row == {"fault": "clock step ±2 s (5)", "injections": 1, "windows_held": 2, "wrong_decisions": 0,
                   "events_lost": 0, "nodes_off_version": 0, "recover_s_max": round(injection["recover_s"], 1)}
    assert injection["judged_off"] <= faults.WITHIN
    printed = capsys.readouterr().out
    assert "clock step ±2 s (5)" in printed and "not injected here" in printed and "disk full (3)" in printed


@pytest.mark.slow
def test_one_broker_lost_on_a_real_cluster_is_counted_from_what_happened(installed, tmp_path):
    faults.main(["--faults", "broker", "--injections", "1", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "result.json").read_text())
    [row] = result["figures"]
    [injection] = result["details"]["broker"]["injections"]
    ledger = result["details"]["broker"]["ledger"]
    # the leader was killed and the daemon saw it: the window it died in names it silent, and every held one counted
    assert injection["reasons"][0].startswith("disturbed: broker silent: broker ")
    assert row["windows_held"] == injection["held"] == sum(r.startswith("disturbed") for r in injection["reasons"])
    assert injection["held"] >= faults.HELD_WHILE_DOWN
    assert ledger["expected"] > 1000 and row["events_lost"] == ledger["lost"]
    assert row == {"fault": "Kafka broker loss (2)", "injections": 1, "windows_held": injection["held"],
                   "wrong_decisions": 0, "events_lost": 0, "nodes_off_version": 0,
                   "recover_s_max": round(injection["recover_s"], 1)}
