"""`pipetune testbed up|status|down` as a user runs it: clear errors, and nothing left behind."""

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from testbed import lifecycle
from testbed.endpoints import live_pipeline
from testbed.pipeline import load_pipeline
from tests.conftest import free_ports

runner = CliRunner()


def _our_processes(run_dir: Path) -> list[int]:
    """Live (non-zombie) processes whose command line mentions the run dir."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(run_dir) in cmdline and state != "Z":
            found.append(int(proc.name))
    return found


def test_bad_pipeline_file_is_an_error_not_a_traceback(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("name: x\nkafka: {port: nope}\n")
    result = runner.invoke(app, ["testbed", "status", "--pipeline", str(bad)])
    assert result.exit_code == 2
    assert "kafka.port" in result.output and "Traceback" not in result.output


def test_idle_files_out_of_range_stop_up_before_anything_is_written(tmp_path, make_pipeline):
    pipeline = make_pipeline(tmp_path, "idle")
    result = runner.invoke(app, ["testbed", "up", "--pipeline", str(pipeline), "--idle-files", "100001"])
    assert result.exit_code == 2 and "--idle-files: 100001 is out of range; allowed 0 to 100000" in result.output
    assert not load_pipeline(pipeline).log_path().parent.exists()


def test_busy_port_stops_up_before_anything_starts(tmp_path, make_pipeline):
    path = make_pipeline(tmp_path, "busy")
    spec = load_pipeline(path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", spec.prometheus.port))
        sock.listen()
        result = runner.invoke(app, ["testbed", "up", "--pipeline", str(path)])
    assert result.exit_code == 2
    assert f"port {spec.prometheus.port} (prometheus.port) is already in use" in result.output
    assert _our_processes(spec.resolved_run_dir()) == []


@pytest.mark.slow
def test_up_status_down_leaves_nothing_behind(installed, tmp_path, make_pipeline):
    path = make_pipeline(tmp_path, "cli")
    spec = load_pipeline(path)
    try:
        up = runner.invoke(app, ["testbed", "up", "--pipeline", str(path)])
        assert up.exit_code == 0, up.output
        status = runner.invoke(app, ["testbed", "status", "--pipeline", str(path)])
        for name in ("kafka", "prometheus", "probe", "agent", "filebeat"):
            assert any(line.split()[:2] == [name, "running,"] for line in status.output.splitlines()), status.output
        assert "config in force: the component defaults" in status.output
        token = spec.resolved_run_dir() / "agent" / "token"
        assert f"agent http://127.0.0.1:{spec.agent.port}" in status.output and str(token) in status.output
        assert token.stat().st_mode & 0o777 == 0o600
        assert len(_our_processes(spec.resolved_run_dir())) == 5
        again = runner.invoke(app, ["testbed", "up", "--pipeline", str(path)])
        assert again.exit_code == 2 and "already runs" in again.output
    finally:
        down = runner.invoke(app, ["testbed", "down", "--pipeline", str(path)])
    assert down.exit_code == 0 and "stopped: agent, filebeat, probe, prometheus, kafka" in down.output
    assert _our_processes(spec.resolved_run_dir()) == []
    assert "stopped" in runner.invoke(app, ["testbed", "status", "--pipeline", str(path)]).output


def test_measure_needs_a_running_testbed_and_a_known_config(tmp_path, make_pipeline):
    path = make_pipeline(tmp_path, "idle")
    result = runner.invoke(app, ["measure", "--pipeline", str(path), "--duration", "2"])
    assert result.exit_code == 2 and "is not running; start it with `pipetune testbed up`" in result.output
    bad = tmp_path / "config.yaml"
    bad.write_text("filebeat.backoff: -1\n")
    for choice, message in (("fastest", "neither a preset"), (str(bad), "filebeat.backoff")):
        result = runner.invoke(app, ["measure", "--pipeline", str(path), "--config", choice])
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


@pytest.mark.slow
def test_up_again_puts_the_new_start_config_in_force_through_the_agent(installed, tmp_path, make_pipeline):
    spec = load_pipeline(make_pipeline(tmp_path, "again"))
    lifecycle.up(spec)
    lifecycle.down(spec)
    # Other ports and another start config: the agent must not put back the version it had in force.
    again = load_pipeline(make_pipeline(tmp_path, "again", config={"set": {"filebeat.output.bulk_max_size": 512}}))
    try:
        lifecycle.up(again)
        assert live_pipeline(again).current()["filebeat.output.bulk_max_size"] == 512
    finally:
        lifecycle.down(again)


@pytest.mark.parametrize("section, field", [("nginx", "nginx.port"), ("spark", "spark.metrics_port")])
def test_a_busy_nginx_or_spark_port_stops_the_paper_pipelines_up_before_anything_starts(tmp_path, make_pipeline,
                                                                                      section, field):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    (free,) = free_ports(1)
    given = {"nginx": {"port": free}, "spark": {"metrics_port": free}} | {
        section: {"nginx": {"port": port}, "spark": {"metrics_port": port}}[section]}
    path = make_pipeline(tmp_path, "paper-busy", **given)
    spec = load_pipeline(path)
    with busy:
        result = runner.invoke(app, ["testbed", "up", "--pipeline", str(path)])
    assert result.exit_code == 2
    assert f"port {port} ({field}) is already in use" in result.output
    assert _our_processes(spec.resolved_run_dir()) == []
