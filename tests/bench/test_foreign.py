"""bench.foreign's pure parts: the operator's files, the hand edit's check, the truth's latency and loss, each
window's agreement with the truth, and the goals."""

import argparse
import io
import json
import math
import re
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from rich.console import Console

from bench.foreign import (HAND_EDITS, STAMP_STEP_S, TEMPLATES, Agreement, Contender, EditCheck, RunRecord, RunReport,
                           Site, Truth, Window, access_line, analyse, apply_hand_edits, best_within_budget, check_edit,
                           figures_of, fill, histogram_quantile, lost_requests, main, plot, print_report,
                           read_access_log, truth_line, tuning_flags, with_truth, windows_of, write_rotated)


def _site(tmp_path: Path) -> Site:
    return Site(tmp_path, "127.0.0.1:19092", 8080, 8765, 9108, 9090, tmp_path / "filebeat", tmp_path / "k6")


def _filebeat_yml(tmp_path: Path) -> str:
    return fill((TEMPLATES / "filebeat.yml").read_text(), _site(tmp_path).values())


def test_every_template_is_filled_from_the_site_and_filebeat_yml_is_the_operators_pipeline(tmp_path):
    for name in ("nginx.conf", "filebeat.yml", "prometheus.yml", "deployment.yaml"):  # load.js takes k6's -e
        fill((TEMPLATES / name).read_text(), _site(tmp_path).values())  # a placeholder the site lacks raises
    config = yaml.safe_load(_filebeat_yml(tmp_path))
    access, error = config["filebeat.inputs"]
    assert (access["id"], access["type"], error["id"]) == ("nginx-access", "filestream", "nginx-error")
    assert access["parsers"] == [{"ndjson": {"target": "", "add_error_key": True}}]
    assert config["output.kafka"]["compression"] == "gzip" and "partition.round_robin" in config["output.kafka"]
    with pytest.raises(ValueError, match="__NOPE__"):
        fill("a: __NOPE__", {})


def test_the_hand_edit_is_kept_when_only_tuned_keys_change(tmp_path):
    edited = apply_hand_edits(_filebeat_yml(tmp_path))
    assert all(new in edited for _, new in HAND_EDITS)
    tuned = edited.replace("      log_type: access\n", "      log_type: access\n    backoff.init: 10ms\n") + \
        "queue.mem.flush.timeout: 5ms\n"
    assert check_edit(edited, tuned).kept


def test_the_hand_edit_is_not_kept_when_undone_or_when_another_line_changes(tmp_path):
    edited = apply_hand_edits(_filebeat_yml(tmp_path))
    undone = check_edit(edited, _filebeat_yml(tmp_path))
    assert not undone.kept and undone.missing[0].strip().startswith("environment: production")
    other = check_edit(edited, edited.replace("compression: gzip", "compression: none"))
    assert not other.kept and other.changed == ("  compression: gzip", "  compression: none")


def _event(msec: float, request_id: str, environment: str = "staging") -> bytes:
    return json.dumps({"@timestamp": "2026-11-27T10:00:00Z", "msec": msec, "request_id": request_id,
                       "service": {"name": "shop-web", "environment": environment}}).encode()


def test_the_truth_takes_each_request_as_written_mid_millisecond_and_counts_other_records_apart():
    lines = [truth_line(1000.020, _event(1000.010, "a" * 32)),
             truth_line(1000.500, b'{"message": "open() \\"/static/x.png\\" failed", "log_type": "error"}'),
             truth_line(1000.600, b"not json")]
    truth = Truth.parse(lines)
    assert truth.latency_s[0] == pytest.approx(0.010 - STAMP_STEP_S / 2)
    assert truth.seen() == {"a" * 32} and truth.other_records() == 2
    assert truth.environments[0] == "staging"


def test_a_window_counts_requests_that_arrived_in_it_and_leaves_the_rotated_history_out():
    truth = Truth.parse([truth_line(a, _event(m, f"{i:032x}")) for i, (a, m) in
                         enumerate(((10.0, 9.9), (10.5, 10.1), (11.0, 10.8), (10.7, 10.7 - 86400)))])
    assert truth.arrived(10.0, 11.0, since_s=0.0).tolist() == [False, True, True, False]  # (start, end]
    windows = with_truth([Window(1, 3, "hold", 10.0, 11.0, 0.39)], truth, since_s=5.0)
    assert windows[0].truth_events == 2  # the day-old line is the probe's backfill, not in its histograms
    expected = np.percentile([0.4 - STAMP_STEP_S / 2, 0.2 - STAMP_STEP_S / 2], 95)
    assert windows[0].truth_p95_s == pytest.approx(expected)


def test_lost_requests_are_those_nginx_logged_in_the_span_that_the_truth_never_read():
    logged = {"a": 10.0, "b": 11.0, "c": 12.0, "d": 30.0}
    assert lost_requests(logged, {"a", "x"}, 0.0, 20.0) == ["b", "c"]
    assert lost_requests(logged, {"a", "b", "c", "d"}, 0.0, math.inf) == []


def test_the_rotated_history_is_old_and_reads_as_nginx_wrote_it(tmp_path):
    now = time.time()
    write_rotated(tmp_path, 3, now)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["access.log.1", "access.log.2", "access.log.3"]
    assert (tmp_path / "access.log.3").stat().st_mtime < now - 3 * 86400 + 60
    history = read_access_log(tmp_path / "access.log.2")
    assert len(history) == 5 and all(now - 2 * 86400 - 1 < m < now - 2 * 86400 + 6 for m in history.values())
    log_format = (TEMPLATES / "nginx.conf").read_text().split("log_format shop_json")[1].split(";")[0]
    assert list(json.loads(access_line(1.7e9, "r"))) == re.findall(r'"(\w+)":', log_format)  # the live log's fields


def _decision(window: int, wall_time: float, p95_s: float | None, duration_s: float = 20.0) -> dict:
    return {"window": window, "action": "hold", "wall_time": wall_time, "change": {},
            "observed": {"p95_s": p95_s, "duration_s": duration_s, "cpu_cores": {"filebeat": 0.05}}}


def test_a_window_starts_as_the_decision_before_it_was_logged_and_the_first_one_is_left_out():
    decisions = [_decision(0, 100.0, 2.0), _decision(1, 145.0, 1.5, 20.0), _decision(2, 166.0, None, 19.5)]
    windows = windows_of(decisions, run=2)
    assert [(w.window, w.start_s, w.end_s) for w in windows] == [(1, 100.0, 120.0), (2, 145.0, 164.5)]
    assert windows[0].p95_s == 1.5 and math.isnan(windows[1].p95_s) and windows[0].filebeat_cores == 0.05


def test_agreement_counts_the_windows_within_5pct_of_the_truth():
    windows = [Window(1, k, "hold", 0, 1, p, truth_p95_s=t)
               for k, (p, t) in enumerate(((1.04, 1.0), (0.9, 1.0), (math.nan, 1.0), (1.0, math.nan)))]
    assert windows[0].error == pytest.approx(0.04) and math.isnan(windows[2].error)
    agreement = Agreement.of(w.error for w in windows)
    assert (agreement.compared, agreement.within, agreement.worst) == (2, 1, pytest.approx(0.1))


def test_the_truth_is_read_through_the_probes_buckets_as_prometheus_reads_a_histogram():
    bounds = (0.01, 0.02, 0.05)
    # cumulative counts 50, 90, 100: rank 95 is halfway into the (0.02, 0.05] bucket
    spread = np.array([0.005] * 50 + [0.015] * 40 + [0.03] * 10)
    assert histogram_quantile(0.95, spread, bounds) == pytest.approx(0.035)
    assert histogram_quantile(0.95, np.full(100, 0.005), bounds) == pytest.approx(0.0095)  # from 0 in the first
    assert histogram_quantile(0.95, np.full(100, 1.0), bounds) == 0.05  # past the last bound: the last bound
    assert math.isnan(histogram_quantile(0.95, np.zeros(0), bounds))


SWEEP = {"defaults": {"p95_s": 2.8, "filebeat_cores": 0.045}, "flush 10ms": {"p95_s": 1.8, "filebeat_cores": 0.05},
         "flush+backoff 1ms": {"p95_s": 0.008, "filebeat_cores": 0.3}}


def test_the_sweep_is_compared_at_the_finals_cpu_budget():
    assert best_within_budget(SWEEP, 0.05) == "flush 10ms"
    assert best_within_budget(SWEEP, 0.3) == best_within_budget(SWEEP) == "flush+backoff 1ms"
    assert best_within_budget(SWEEP, 0.01) is None


def _report(**changes) -> RunReport:
    good = dict(run=1, exit_code=0, final_p95_s=0.01, defaults_p95_s=2.8, final_cores=0.3, sweep=SWEEP,
                agreement=Agreement(20, 20, 0.02), read_agreement=Agreement(20, 20, 0.01), logged=1000, lost=0,
                edit=EditCheck((), ()), after_lull_s=0.8, lull_wait_s=11.0)
    return RunReport(**(good | changes))


def test_the_goals_are_met_only_with_every_figure_in_reach():
    assert all(ok for ok, _ in _report().goals())
    for changes, words in ((dict(final_p95_s=0.05), "56x below"), (dict(final_p95_s=0.02), "2.50x"),
                           (dict(agreement=Agreement(20, 19, 0.07)), "19 of 20"), (dict(lost=3), "lost: 3 of 1000"),
                           (dict(edit=None), "not made"), (dict(exit_code=1), "exited 1"),
                           (dict(after_lull_s=48.7), "arrived 48.70 s"), (dict(after_lull_s=math.nan), "arrived -")):
        missed = [text for ok, text in _report(**changes).goals() if not ok]
        assert missed and words in missed[0], (changes, missed)


def test_a_final_cheaper_than_every_sweep_config_has_nothing_to_compare_and_says_so():
    missed = [text for ok, text in _report(final_cores=0.01).goals() if not ok]
    assert missed == ["no hand-sweep config ran within the final's Filebeat CPU (0.010 cores): nothing to compare at "
                      "the same budget; at any CPU: flush+backoff 1ms 8.0 ms with 0.300"]


def test_autotune_runs_as_the_docs_say_with_the_benchs_budget_and_a_seed_per_run():
    args = argparse.Namespace(window=20.0, windows=25, cpu_budget="0.25")
    flags = tuning_flags(args, 3)
    assert flags[:2] == ["--load", "none"]
    assert dict(zip(flags[::2], flags[1::2])) == {"--load": "none", "--window": "20", "--windows": "25",
                                                   "--cpu-budget": "0.25", "--seed": "2"}


def test_a_budget_autotune_would_refuse_stops_the_bench_before_the_pipeline_is_built(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--cpu-budget", "-1"])
    assert stopped.value.code == 2
    assert "--cpu-budget must be default, none or a number of cores >= 0" in capsys.readouterr().err


def test_a_whole_bench_is_reported_from_what_it_recorded(tmp_path):
    start = {"filebeat.backoff": 2.0, "filebeat.queue.mem.flush.timeout": 1.0, "filebeat.max_backoff": 10.0}
    final = {"filebeat.backoff": 0.01, "filebeat.queue.mem.flush.timeout": 0.005, "filebeat.max_backoff": 10.0}
    decisions = [_decision(k, 100.0 + 20 * k, 0.0104 if k else 2.0) for k in range(5)]
    edited = apply_hand_edits(_filebeat_yml(tmp_path))
    record = RunRecord(1, 90.0, 200.0, 0, decisions, start, final, in_force=final, edited=edited, edited_at_s=130.0,
                       final_text=edited, lull_s=(150.0, 160.0), audit=[{"event": "applied"}, {"event": "applied"}],
                       scraped={2: (121.5, 139.5)})
    # nginx wrote a request every 10 ms from 95 s to 260 s; the truth read each 10.5 ms after its msec, but one
    logged = {f"{i:032x}": float(m) for i, m in enumerate(np.arange(95.0, 260.0, 0.01))}
    truth = Truth.parse([truth_line(m + 0.0105, _event(m, rid)) for rid, m in logged.items() if rid != f"{500:032x}"])
    rows = [Contender("defaults", 1, 210.0, 230.0, 0.05), Contender("flush 10ms", 1, 230.0, 250.0, 0.1),
            Contender("pipetune run 1", 1, 235.0, 255.0, 0.2)]
    analysis = analyse([record], rows, truth, logged, 90.0, ("defaults", "flush 10ms"))
    assert [w.window for w in analysis.windows] == [1, 2, 3, 4]
    assert all(w.truth_p95_s == pytest.approx(0.010) and w.error == pytest.approx(0.04) for w in analysis.windows)
    assert [w.window for w in analysis.windows if math.isfinite(w.read_error)] == [2]  # only it has a scraped span
    assert analysis.windows[1].as_read_p95_s == pytest.approx(0.010, rel=0.1)  # within the bucket holding 10 ms
    assert analysis.totals == {"lost": 1, "logged": len(logged), "duplicates": 0, "other": 0}
    assert analysis.figures["pipetune run 1"]["p95_s"] == pytest.approx(0.010)
    assert analysis.figures["defaults"]["out_in"] == pytest.approx(1.0, abs=0.001)
    (report,) = analysis.reports
    assert (report.lost, report.logged, report.edit.kept, report.audit_events) == (1, 10500, True, {"applied": 2})
    assert report.changes == {"filebeat.backoff": [2.0, 0.01], "filebeat.queue.mem.flush.timeout": [1.0, 0.005]}
    assert report.after_lull_s == pytest.approx(0.010) and report.lull_wait_s == 11.0  # max_backoff + flush.timeout
    shown = Console(file=io.StringIO(), width=200)
    print_report(analysis.reports, analysis.windows, analysis.figures, analysis.totals, shown)
    assert "met    pipetune's P95 within 5% of the truth's in 4 of 4 windows (worst 4.0%)" in shown.file.getvalue()
    assert "1 of 16,500 requests nginx logged never reached the truth" in shown.file.getvalue()
    tables = figures_of(analysis.reports, analysis.windows, analysis.figures)
    assert tables["each run from the operator's defaults"][0]["lost"] == 1
    plot([record], analysis.windows, analysis.figures, tmp_path / "foreign.png")
    assert (tmp_path / "foreign.png").stat().st_size > 0
