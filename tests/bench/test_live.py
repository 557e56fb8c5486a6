"""bench.live's pure parts: where a pipeline with nginx in front takes its load, the Spark table's ledger against
nginx's log by span, the warehouse's committed count, the Spark job's changes, the Hybrid an agent takes, pipetune's
CPU against its budget, and the checks the run prints."""

from __future__ import annotations

import json
import math

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from agents.probe.metrics import LatencyHistograms
from bench import live
from controller.state import StateStore
from models.budget import CpuBudget
from models.learning import TUNED_BY_TOPOLOGY
from models.presets import preset
from models.space import check_rules
from models.twin import load as load_calibration
from testbed.pipeline import load_pipeline, pipeline_file
from testbed.spark_sink import Ledger


def _spec(name: str, tmp_path):
    return load_pipeline(pipeline_file(name)).model_copy(update={"run_dir": tmp_path})


@pytest.fixture
def started(monkeypatch):
    """The argv of each process the bench would start, none started."""
    argvs = []

    class Popen:
        def __init__(self, argv, **_):
            argvs.append(argv)

    monkeypatch.setattr(live.subprocess, "Popen", Popen)
    return argvs


def test_a_pipeline_with_nginx_takes_the_trace_as_requests_to_nginx(tmp_path, started):
    live.start_operator_traffic(_spec("paper", tmp_path), tmp_path / "trace.log", 60.0)
    [argv] = started
    assert argv[argv.index("--http") + 1] == "http://127.0.0.1:18180"
    # nginx logs its own request_id: no manifest for the probe, nothing written past nginx
    assert "--out" not in argv and "--manifest" not in argv


def test_the_default_pipeline_takes_the_trace_into_its_log_with_a_manifest(tmp_path, started):
    spec = _spec("local", tmp_path)
    _, run_id = live.start_operator_traffic(spec, tmp_path / "trace.log", 60.0)
    [argv] = started
    assert argv[argv.index("--out") + 1] == str(spec.log_path())
    assert argv[argv.index("--manifest") + 1] == str(tmp_path / "manifests" / f"{run_id}.json")
    assert "--http" not in argv


def test_autotunes_own_replay_is_refused_on_a_pipeline_with_nginx(capsys):
    with pytest.raises(SystemExit) as exit_:
        live.main(["--pipeline", "paper", "--load", "replay"])
    assert exit_.value.code == 2 and "--load replay" in capsys.readouterr().err


def _log(tmp_path, ids):
    log = tmp_path / "logs" / "access.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        for rid in ids:
            out.write(json.dumps({"ts_nginx": 1.0, "request_id": rid, "uri": "/"}) + "\n")
    return log.stat().st_size


def test_the_table_ledger_counts_each_span_of_nginxs_log_lost_and_duplicated(tmp_path, monkeypatch):
    spec = _spec("paper", tmp_path)
    start = _log(tmp_path, ["before"])
    middle = _log(tmp_path, ["a", "b", "c"])
    end = _log(tmp_path, ["d", "e"])
    _log(tmp_path, ["after"])
    table = Ledger(rows=8, counts={"before": 1, "a": 1, "b": 3, "d": 1, "e": 3, "after": 2}, kafka_records={"e": 3})
    monkeypatch.setattr(live, "ledger", lambda settings, timeout_s: table)
    counted = live.table_ledger(spec, {"tuning": (start, middle), "window": (middle, end)}, timeout_s=0.0)
    # c never reached the table; b is there three times of one Kafka record: two rows too many; e came from three
    # Kafka records (Filebeat sent it three times): not the job's
    assert counted == {"tuning": {"expected": 3, "lost": 1, "duplicates": 2, "resent": 0},
                       "window": {"expected": 2, "lost": 0, "duplicates": 0, "resent": 2}}


def test_the_table_ledger_waits_for_the_table_to_hold_every_request(tmp_path, monkeypatch):
    spec = _spec("paper", tmp_path)
    end = _log(tmp_path, ["a", "b"])
    reads = iter([Ledger(1, {"a": 1}), TimeoutError("timed out"), Ledger(2, {"a": 1, "b": 1})])

    def read(settings, timeout_s):  # the second read times out: a big table on a loaded machine
        answer = next(reads)
        if isinstance(answer, Exception):
            raise answer
        return answer
    monkeypatch.setattr(live, "ledger", read)
    monkeypatch.setattr(live.time, "sleep", lambda s: None)
    assert live.table_ledger(spec, {"run": (0, end)}, timeout_s=60.0)["run"] == {"expected": 2, "lost": 0,
                                                                                  "duplicates": 0, "resent": 0}


def test_the_operators_policy_is_where_autotune_resumes_it_and_a_bad_one_names_the_field(tmp_path):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"tuned": ["spark.trigger.interval"], "pins": {"filebeat.backoff": 0.1},
                                "bounds": {"spark.trigger.interval": [0.0, 5.0]}}))
    policy = live.load_policy(path)
    state = tmp_path / "state"
    state.mkdir()
    (state / "decisions.jsonl").write_text("{}\n")  # a last run's: not resumed
    live.start_state(state, policy)
    assert StateStore(state).load_policy() == policy and not (state / "decisions.jsonl").exists()
    path.write_text(json.dumps({"bounds": {"spark.trigger.interval": [0.0, 120.0]}}))
    with pytest.raises(SystemExit, match=r"bounds.spark.trigger.interval.*\[0, 60\] s"):
        live.load_policy(path)


def test_the_warehouse_count_is_every_nodes_committed_events_of_that_stage_only():
    histograms = LatencyHistograms()
    histograms.observe({"warehouse": 2.0, "warehouse_commit": 1.0}, "event_time", "node-1")
    histograms.observe({"warehouse": 3.0}, "event_time", "node-1")
    histograms.observe({"warehouse": 1.0}, "event_time", "node-2")
    registry = CollectorRegistry()
    registry.register(histograms)
    assert live.warehouse_count(generate_latest(registry).decode()) == 3


def test_spark_changes_count_the_daemons_changes_touching_the_job_and_the_agents_versions_of_it():
    owned = {"filebeat": frozenset({"filebeat.scan_frequency"}), "spark": frozenset({"spark.trigger.interval"})}
    decisions = [{"change": {"spark.trigger.interval": [1.0, 0.5]}},
                 {"change": {"filebeat.scan_frequency": [10.0, 1.0], "spark.trigger.interval": [0.5, 0.0]}},
                 {"change": {"filebeat.scan_frequency": [1.0, 2.0]}}, {"change": {}}]
    audit = {"spark": [{"event": "change_started"}, {"event": "rolled_back"}, {"event": "change_started"}],
             "filebeat": [{"event": "change_started"}] * 2}
    assert live.spark_changes(decisions, audit, owned) == {"logged": 2, "versions": 2}


def test_the_papers_hybrid_is_measured_with_the_backoffs_it_left_lowered_to_its_scan():
    hybrid, reordered = live.in_components_order("hybrid")
    check_rules(hybrid)  # an agent takes it
    assert reordered == {"filebeat.backoff": [1.0, 0.01], "filebeat.max_backoff": [10.0, 0.01]}
    assert hybrid["filebeat.scan_frequency"] == 0.01  # what the paper set stays
    assert live.in_components_order("latency") == (preset("latency"), {})


def _result(**over):
    row = {"p95_s": 1.0, "throughput_eps": 300.0}
    result = {"summary": {"defaults": row, "hybrid": {"p95_s": 6.0, "throughput_eps": 297.0},
                          "pipetune": {"p95_s": 1.0, "throughput_eps": 300.0}},
              "tuned": "pipetune", "reference": "hybrid", "goal_reference_over_pipetune": 5.0,
              "p95_reference_over_pipetune": 6.0,
              "ledger_tuning": {"expected": 9000, "lost": 0, "duplicates": 0}, "longest_behind_streak_windows": 1,
              "behind_windows": 1, "windows": 30, "unobserved_windows": 0, "lost_events_side_by_side": 0,
              "duplicated_events_side_by_side": 0, "spark_changes": {"logged": 12, "versions": 11},
              "spark_versions_whole_bench": 14,
              "changes_logged": 20, "changes_in_agent_audit": 20, "agent_versions": 25, "agent_rollbacks": 0,
              "agent_held": 0, "daemon_rollbacks": 1}
    return result | over


def test_the_paper_pipelines_checks_are_against_hybrid_and_the_tables_ledger():
    checks = live.run_checks(_result())
    assert all(ok for ok, _ in checks)
    assert checks[0][1] == "P95 6.0x lower than hybrid (goal >= 5x) at equal throughput"
    assert "0 lost and 0 duplicated by the job of 9000, across 11 versions of the Spark job" in checks[2][1]
    assert "0 more in Kafka twice (Filebeat resent them" in checks[2][1]
    resent = _result()
    resent["ledger_tuning"] = resent["ledger_tuning"] | {"resent": 40}  # the shipper's, not the job's: still met
    ok, line = live.run_checks(resent)[2]
    assert ok and "40 more in Kafka twice" in line


@pytest.mark.parametrize("over, failing", [
    ({"ledger_tuning": {"expected": 9000, "lost": 0, "duplicates": 1}}, 2),
    ({"spark_changes": {"logged": 9, "versions": 9}}, 2),
    ({"p95_reference_over_pipetune": 4.0}, 0),
    ({"summary": {"hybrid": {"p95_s": 6.0, "throughput_eps": 250.0},
                  "pipetune": {"p95_s": 1.0, "throughput_eps": 300.0}}}, 0),
    ({"duplicated_events_side_by_side": 3}, 3),
])
def test_each_paper_check_is_missed_on_its_own_failure(over, failing):
    checks = live.run_checks(_result(**over))
    assert [i for i, (ok, _) in enumerate(checks) if not ok] == [failing]


def test_a_tuning_run_of_another_strategy_is_judged_on_its_own_row_and_a_static_one_is_refused(capsys):
    """`--strategy random` changes the config every window (the table's ledger across many changes of the job); its
    final config is measured under its name, and the checks read that row."""
    summary = {"hybrid": {"p95_s": 6.0, "throughput_eps": 297.0}, "random": {"p95_s": 2.0, "throughput_eps": 250.0}}
    ok, text = live.run_checks(_result(summary=summary, tuned="random", p95_reference_over_pipetune=3.0))[0]
    assert not ok and "at equal throughput" not in text  # random's 250 ev/s against Hybrid's 297: not equal
    with pytest.raises(SystemExit):
        live.main(["--strategy", "hybrid"])  # a preset measured beside it already
    assert "--strategy: invalid choice: 'hybrid'" in capsys.readouterr().err


def test_a_reference_the_agent_refused_is_a_missed_check_saying_so():
    result = _result(p95_reference_over_pipetune=math.nan)
    del result["summary"]["hybrid"]
    ok, text = live.run_checks(result)[0]
    assert not ok and text == "P95 against hybrid: not measured (the agent refused it)"


def test_a_pipeline_ending_in_spark_is_tuned_with_a_twin_whose_learner_changes_the_trigger(tmp_path):
    twin = load_calibration(live.calibration(_spec("paper", tmp_path)))
    assert "spark.trigger.interval" in TUNED_BY_TOPOLOGY[twin.topology]
    assert live.calibration(_spec("local", tmp_path)) == live.CALIBRATION


def test_the_side_by_side_table_compares_with_the_reference_and_shows_duplicates():
    from rich.console import Console

    row = {"p95_rounds_s": [1.0, 1.5, 1.6], "p50_s": 0.5, "offered_eps": 300.0, "out_in": 1.0, "lost": 0,
           "cpu_cores": {"filebeat": 0.0512}}
    summary = {"defaults": row | {"p95_s": 2.0, "duplicated": 0}, "hybrid": row | {"p95_s": 6.0, "duplicated": 0},
               "pipetune": row | {"p95_s": 1.5, "duplicated": 2}}
    console = Console(width=80, record=True)  # an 80-column terminal: nothing cut, nothing wrapped
    console.print(live.table(summary, "hybrid", "warehouse"))
    text = console.export_text()
    assert "stage warehouse" in text and "hybrid" in text and "/ config" in text and "…" not in text
    [pipetune] = [line for line in text.splitlines() if "pipetune" in line]
    assert "0 (+2)" in pipetune and "×4.0" in pipetune and "1-1.6" in pipetune and "0.051" in pipetune
    assert max(len(line) for line in text.splitlines()) <= 80


def _measured(name, round_, filebeat_cores, offered_eps=300.0):
    return live.Measured(name, round_, 1.0, 0.5, offered_eps, offered_eps, 0, cpu_cores={"filebeat": filebeat_cores})


def test_pipetunes_cpu_is_judged_on_each_fresh_window_by_the_budget_the_defaults_side_by_side_set():
    rows = [_measured("defaults", 1, 0.04), _measured("defaults", 2, 0.06), _measured("pipetune", 1, 0.07),
            _measured("pipetune", 2, 0.20, offered_eps=600.0)]
    budget = live.budget_figures(rows, live.summarise(rows), CpuBudget())
    assert budget["reference_cores"] == {"filebeat": pytest.approx(0.05)} and budget["reference_eps"] == 300.0
    first, busier = budget["windows"]
    assert first["limits_cores"]["filebeat"] == pytest.approx(0.05 * 1.25 + 0.05)  # 0.1125: 0.07 within
    assert busier["limits_cores"]["filebeat"] == pytest.approx(0.10 * 1.25 + 0.05)  # twice the load: 0.175 < 0.20
    assert budget["within"] == 1
    with_budget = live.run_checks(_result(cpu_budget=budget))
    [(ok, text)] = [check for check in with_budget if "CPU" in check[1]]
    assert not ok and text.startswith("pipetune's CPU within the budget it tuned under in 1 of 2 fresh windows")
    assert "filebeat 0.200 of 0.175" in text
    # `--cpu-budget none`: nothing to judge against
    assert live.budget_figures(rows, live.summarise(rows), None) is None
    assert len(live.run_checks(_result())) == len(with_budget) - 1  # and no line for it


def test_the_side_by_side_shows_each_contenders_filebeat_cpu():
    summary = live.summarise([_measured("defaults", 1, 0.04), _measured("defaults", 2, 0.06)])
    assert summary["defaults"]["cpu_cores"] == {"filebeat": pytest.approx(0.05)}


def test_where_the_papers_zero_wait_falls_behind_the_tuned_config_must_keep_up():
    """At a rate where Zero-Wait (measured side by side on a pipeline ending in Spark) falls behind in a round (the
    tuning run's verdict: its output, or a backlog growing before Kafka), a check says whether the tuned config kept up
    in every round; where Zero-Wait keeps up, there is no such check."""
    row = {"offered_eps": 1750.0, "throughput_eps": 1750.0, "p95_s": 2.0, "p95_rounds_s": [2.0, 2.1], "behind_rounds": 0}
    collapsed = {"offered_eps": 1750.0, "p95_s": 31.9, "p95_rounds_s": [31.9, 30.0], "behind_rounds": 2}
    kept = _result()["summary"] | {"zero-wait": collapsed, "pipetune": row}
    ok, text = live.run_checks(_result(summary=kept))[-2]
    assert ok and text.startswith("at 1750 ev/s the paper's Zero-Wait falls behind in 2 of 2 rounds (P95 31.9 s); "
                                  "pipetune keeps up (behind in 0 of 2")
    behind = kept | {"pipetune": row | {"behind_rounds": 1}}
    ok, text = live.run_checks(_result(summary=behind))[-2]
    assert not ok and "pipetune falls behind too (behind in 1 of 2" in text
    fine = kept | {"zero-wait": collapsed | {"behind_rounds": 0}}
    assert not any("Zero-Wait" in text for _, text in live.run_checks(_result(summary=fine)))

