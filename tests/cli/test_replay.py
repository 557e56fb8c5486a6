"""`pipetune replay` as a user runs it: outputs, and clear errors for bad input."""

import json

import pytest
from typer.testing import CliRunner

import replay.engine
import replay.sinks
from cli.main import app
from tests.clock import VirtualClock

runner = CliRunner()


@pytest.fixture
def clock(monkeypatch) -> VirtualClock:
    """The replay scheduler's clock, under the test's control: every event goes out at its scheduled time,
    so achieved rates and durations follow from the schedule, not from how busy the machine is."""
    return VirtualClock().install(monkeypatch, replay.engine, replay.sinks)  # the sinks wait for the scheduler


def _replay(*args):
    return runner.invoke(app, ["replay", *args])


def test_json_summary_manifest_and_plot(tmp_path, clock):
    log, manifest, plot = tmp_path / "a.log", tmp_path / "m.json", tmp_path / "p.png"
    result = _replay("--profile", "burst", "--rate", "400", "--duration", "3", "--burst-at", "1:2",
                     "--out", str(log), "--manifest", str(manifest), "--plot", str(plot), "--json", "--run-id", "cli")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"events", "duration_s", "achieved_eps", "send_lag_p50_ms", "send_lag_p99_ms", "phases"} <= set(summary)
    assert summary["events"] == 1600
    assert [round(p["target_eps"]) for p in summary["phases"]] == [400, 800, 400]
    assert [round(p["achieved_eps"]) for p in summary["phases"]] == [400, 800, 400]
    m = json.loads(manifest.read_text())
    assert m["events"] == 1600 and m["run_id"] == "cli" and m["profile"] == "burst"
    assert len(log.read_text().splitlines()) == 1600
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_combined_lines_from_a_traces_arrivals_carry_no_pipetune_field(tmp_path, clock):
    """What Apache and nginx write by default, replayed with a real log's arrival pattern; the manifest
    tells the probe there are no request_ids to account for."""
    trace = tmp_path / "access.log"
    trace.write_text("".join(f'10.0.0.{k} - - [17/May/2015:10:05:{k:02d} +0000] "GET /p/{k} HTTP/1.1" 200 99 "-" "ua"\n'
                             for k in range(10)))
    log, manifest = tmp_path / "out.log", tmp_path / "m.json"
    result = _replay("--profile", "trace", "--trace", str(trace), "--time-scale", "5", "--format", "combined",
                     "--out", str(log), "--manifest", str(manifest), "--json")
    assert result.exit_code == 0, result.output
    lines = log.read_text().splitlines()
    assert len(lines) == 10 and all(" HTTP/1.1\" 200 99 " in line and "?req=" in line for line in lines)
    assert not any("ts_nginx" in line or "request_id" in line for line in lines)
    assert json.loads(manifest.read_text())["request_ids_in_lines"] is False


def test_dry_run_only_describes_the_schedule(tmp_path):
    result = _replay("--profile", "flash", "--rate", "100", "--duration", "60", "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["peak_1s_eps"] > 500 and summary["events"] > 6000
    assert not list(tmp_path.iterdir())


def test_stages_file_and_trace_profiles(tmp_path, clock):
    stages = tmp_path / "stages.yaml"
    stages.write_text("- {duration: 1s, target: 200}\n- {duration: 1s, target: 200}\n")
    result = _replay("--profile", "stages", "--stages", str(stages), "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["events"] == 300  # 100 on the ramp from 0, 200 at the plateau
    trace = tmp_path / "access.log"
    trace.write_text("".join(f'203.0.113.1 - - [21/Nov/2026:07:00:{s:02d} +0000] "GET /x/{s} HTTP/1.1" 200 10 "-" "ua"\n'
                             for s in range(20) for _ in range(5)) + "junk line\n")
    out = tmp_path / "out.log"
    result = _replay("--profile", "trace", "--trace", str(trace), "--time-scale", "10", "--amplify", "2",
                     "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    assert "1 malformed skipped" in result.stderr
    events = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(events) == 200 and all(e["uri"].startswith("/x/") for e in events)
    assert json.loads(result.stdout.strip().splitlines()[-1])["duration_s"] == pytest.approx(2.0, abs=0.2)


@pytest.mark.parametrize("args, flag", [
    (["--profile", "nope", "--stdout"], "--profile"),
    (["--rate", "0", "--stdout"], "--rate"),
    (["--rate", "-5", "--stdout"], "--rate"),
    (["--duration", "0", "--stdout"], "--duration"),
    (["--profile", "burst", "--duration", "60", "--burst-at", "50:70", "--stdout"], "--burst-at"),
    (["--profile", "burst", "--burst-at", "abc", "--stdout"], "--burst-at"),
    (["--profile", "trace", "--trace", "/nonexistent/trace.log", "--stdout"], "--trace"),
    (["--profile", "trace", "--stdout"], "--trace"),
    (["--profile", "stages", "--stdout"], "--stages"),
    (["--out", "/nonexistent-dir/a.log"], "--out"),
    (["--kafka", "localhost-no-port", ], "--kafka"),
    (["--http", "ftp://x"], "--http"),
    ([], "--out"),
    (["--out", "a.log", "--stdout"], "--out"),
])
def test_bad_input_exits_non_zero_naming_the_flag(args, flag):
    result = _replay("--duration", "1", *args) if "--duration" not in args else _replay(*args)
    assert result.exit_code != 0
    assert flag in result.output


def test_a_k6_options_file_replays_as_is_with_stages_alone(tmp_path, clock):
    """An operator's k6 plan, as `k6 inspect` prints it, needs no --profile: --stages says it."""
    options, log = tmp_path / "options.json", tmp_path / "out.log"
    options.write_text('{"vus": null, "stages": [{"duration": "2s", "target": 100}, {"duration": "1s", "target": 100}],'
                       ' "thresholds": {"http_req_duration": ["p(95)\\u003c500"]}}')
    result = _replay("--stages", str(options), "--out", str(log), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["events"] == 200 and len(log.read_text().splitlines()) == 200
    assert [round(p["target_eps"]) for p in summary["phases"]] == [50, 100]
    assert [round(p["achieved_eps"]) for p in summary["phases"]] == [50, 100]


def test_a_bad_k6_stage_is_named_on_the_stages_flag(tmp_path):
    options = tmp_path / "options.json"
    options.write_text('{"stages": [{"duration": "1s", "target": 1}, {"duration": "1s", "target": 2},'
                       ' {"duration": "ten", "target": 3}]}')
    result = _replay("--stages", str(options), "--stdout")
    assert result.exit_code != 0
    assert "--stages" in result.output and "stages.2.duration" in result.output
