"""`pipetune scenarios` end to end on a short run: table, JSON document, plots, errors."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app


def test_scenarios_writes_the_table_json_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = CliRunner().invoke(app, ["scenarios", "--duration", "30", "--reps", "2", "--only",
                                      "baseline,hybrid,zero-wait,burst", "--json", str(out),
                                      "--plots", str(tmp_path / "plots")])
    assert result.exit_code == 0, result.output
    assert "Hybrid" in result.output and "paper" in result.output and "Burst check" in result.output
    doc = json.loads(out.read_text())
    assert doc["calibration"] == "paper-2vcpu" and doc["rate_eps"] == 300 and doc["duration_s"] == 30
    assert set(doc["scenarios"]) == {"baseline", "hybrid", "zero-wait"}
    for row in doc["scenarios"].values():
        assert {"p95_s", "mean_s", "steady_p95_s", "peak_throughput_eps", "sustained_throughput_eps",
                "offered_eps", "packets_per_s", "backlog_end_events", "lost_events"} <= set(row)
    assert set(doc["burst"]["baseline"]) >= {"burst_p95_s", "recovery_p95_s", "max_stage_lag_s"}
    pngs = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert pngs == ["baseline_stages.png", "burst.png", "e2e_over_time.png", "throughput_per_stage.png"]


def test_unknown_names_are_rejected_with_the_known_ones() -> None:
    result = CliRunner().invoke(app, ["scenarios", "--only", "hybird", "--duration", "10", "--reps", "1"])
    assert result.exit_code != 0 and "hybird" in result.output and "baseline" in result.output
    result = CliRunner().invoke(app, ["scenarios", "--calibration", "nowhere", "--duration", "10"])
    assert result.exit_code != 0 and "paper-2vcpu" in result.output


def test_real_runs_name_the_option_at_fault(tmp_path: Path) -> None:
    """--pipeline: a file that is not there, a pipeline without nginx in front, a testbed not running, an option
    out of range: each a clear error naming the option, before any load."""
    cases = [
        (["--pipeline", str(tmp_path / "nowhere.yaml")], "--pipeline"),
        (["--pipeline", "local"], "no nginx in front"),
        (["--pipeline", "paper", "--only", "burst"], "--only"),
        (["--pipeline", "paper", "--duration", "20", "--warmup", "30"], "--warmup"),
        (["--pipeline", "paper", "--collapse-rate", "-5"], "--collapse-rate"),
        (["--rate", "0"], "--rate"),
        (["--reps", "0"], "--reps"),
        (["--fit", str(tmp_path / "fitted.yaml")], "--fit"),
        (["--report", str(tmp_path / "nowhere.json")], "--report"),
    ]
    for argv, named in cases:
        result = CliRunner().invoke(app, ["scenarios", *argv])
        assert result.exit_code == 2, (argv, result.output)
        assert named in result.output, (argv, result.output)


def test_a_paper_testbed_not_running_is_named(tmp_path: Path) -> None:
    import yaml

    from testbed.pipeline import pipeline_file

    raw = yaml.safe_load(pipeline_file("paper").read_text()) | {"run_dir": str(tmp_path / "run")}
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["scenarios", "--pipeline", str(path), "--duration", "20"])
    assert result.exit_code == 2 and "not running" in result.output and "testbed up" in result.output


def _saved_study(path: Path, rate_eps: float, duration_s: float = 6.0,
                 p95s_s: tuple[tuple[str, float], ...] = (("baseline", 3.5), ("zero-wait", 2.7))) -> Path:
    """A `scenarios --pipeline --json` document of the scenarios `p95s_s` at `rate_eps`, each with its P95 real and
    twin alike (by default Baseline and Zero-Wait, Zero-Wait the lower)."""
    def side(p95_s: float) -> dict:
        return {"p95_s": p95_s, "mean_s": p95_s / 2, "offered_eps": rate_eps, "throughput_eps": rate_eps,
                "out_in": 1.0, "keeps_up": True}

    rows = {name: {"real": side(p95_s) | {"behind_end_events": 0, "window_s": duration_s - 2, "reps": 1},
                   "twin": side(p95_s), "paper": {}, "twin_p95_error": 0.0}
            for name, p95_s in p95s_s}
    doc = {"pipeline": "paper", "latency": "to the table", "duration_s": duration_s, "warmup_s": 2.0, "reps": 1,
           "calibration": "paper-testbed", "twin_reps": 1, "median_abs_twin_p95_error": 0.0,
           "scenarios": {"baseline": {"applied": {"spark.trigger.interval": 1.0}, "skipped": {}, "moved": {}},
                         "zero-wait": {"applied": {"spark.trigger.interval": 1.0, "filebeat.output.bulk_max_size": 1,
                                                   "filebeat.queue.mem.flush.timeout": 0.0}, "skipped": {},
                                       "moved": {}}},
           "comparisons": [{"rate_eps": rate_eps, "kind": "chosen", "scenarios": rows}]}
    path.write_text(json.dumps(doc))
    return path


def test_saved_studies_print_again_and_the_twin_fitted_to_them_says_its_error_winner_and_collapse(tmp_path):
    from models.twin import load

    low, high = _saved_study(tmp_path / "low.json", 100.0), _saved_study(tmp_path / "high.json", 200.0)
    fitted = tmp_path / "fitted.yaml"
    result = CliRunner().invoke(app, ["scenarios", "--report", str(low), "--report", str(high), "--fit", str(fitted)])
    assert result.exit_code == 0, result.output
    assert result.output.count("winner (lowest P95 among those keeping up)") == 2  # each document's tables again
    assert "median |error|" in result.output and "same winner in" in result.output and "of 2 comparisons" in result.output
    assert "#   network.rtt_s = " in fitted.read_text() and load(str(fitted)).name == "paper-testbed"  # round trip too
    other = _saved_study(tmp_path / "longer.json", 200.0, duration_s=20.0)
    result = CliRunner().invoke(app, ["scenarios", "--report", str(low), "--report", str(other), "--fit", str(fitted)])
    assert result.exit_code == 2 and "different lengths" in result.output and "--report" in result.output


def test_a_saved_studys_ovat_variants_are_set_against_its_hybrid(tmp_path):
    saved = _saved_study(tmp_path / "ovat.json", 300.0, p95s_s=(("hybrid", 2.0), ("ovat-1", 2.02), ("ovat-2", 2.5)))
    doc = json.loads(saved.read_text())
    doc["comparisons"][0]["kind"] = "paper"
    saved.write_text(json.dumps(doc))
    result = CliRunner().invoke(app, ["scenarios", "--report", str(saved)])
    assert result.exit_code == 0, result.output
    assert "OVAT-1 (scan 1s) against Hybrid: real same (+1%), twin same (+1%), paper lower (-11%)" in result.output
    assert "OVAT-2 (bulk 2048) against Hybrid: real higher (+25%), twin higher (+25%), paper lower (-13%)" in result.output
