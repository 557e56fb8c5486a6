"""`pipetune agent init` on the golden operator configs: the agent.yaml it writes, what it says it will
manage (inputs, output, live or restart), starting values read from the files, and files or flags it
cannot use refused with exit 2, the file and line named, nothing written. No Filebeat runs here: the
binary is a stand-in (init only checks that it can be executed)."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agents.config import load_agent_config
from agents.filebeat.patch import InputSelector
from agents.filebeat.render import go_seconds
from agents.init import METRICS_TOKEN, InitError, init
from models.space import ChangeCost

GOLDEN = Path(__file__).parent / "golden" / "operator"


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A copy of the golden operator configs and a stand-in filebeat binary."""
    shutil.copytree(GOLDEN, tmp_path / "etc")
    binary = tmp_path / "etc" / "filebeat-bin"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    return tmp_path / "etc"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", "agent", "init", *args], capture_output=True, text=True,
                          timeout=120)


def test_go_durations_read_as_seconds():
    assert [go_seconds(t) for t in ("10s", "250ms", "1m30s", "1.5h", "5", "10 s")] == [10, 0.25, 90, 5400, None, None]


def test_init_writes_an_agent_yaml_the_agent_loads_with_the_files_values(node, tmp_path):
    out = tmp_path / "out"
    agent_yaml, token, summary = init(out, node / "filebeat.yml", node / "filebeat-bin",
                                      [InputSelector(id="nginx-access")], logstash_settings=node / "logstash",
                                      pipeline_id="web", output_id="kafka-main")
    config = load_agent_config(agent_yaml)
    filebeat, logstash = config.components
    assert filebeat.config == node / "filebeat.yml" and [s.id for s in filebeat.inputs] == ["nginx-access"]
    assert filebeat.params == {"filebeat.scan_frequency": 10.0, "filebeat.backoff": 1.0, "filebeat.max_backoff": 10.0,
                               "filebeat.queue.mem.events": 4096, "filebeat.queue.mem.flush.min_events": 2048,
                               "filebeat.queue.mem.flush.timeout": 1.0}
    assert filebeat.http_port is None  # the operator's filebeat.yml enables no HTTP endpoint
    assert logstash.params == {"logstash.pipeline.workers": 4, "logstash.pipeline.batch.size": 250,
                               "logstash.output.kafka.linger_ms": 50.0, "logstash.output.kafka.batch_size": 65536,
                               "logstash.output.kafka.compression_type": "lz4"}
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(token.read_text().strip()) >= 32
    metrics_token = out / METRICS_TOKEN  # Prometheus's, which reads /metrics only
    assert stat.S_IMODE(metrics_token.stat().st_mode) == 0o600
    assert len(metrics_token.read_text().strip()) >= 32 and metrics_token.read_text() != token.read_text()
    text = "\n".join(summary)
    assert f"filebeat: {node / 'filebeat.yml'}, output.kafka" in text
    assert f"input nginx-access (filestream, {node / 'filebeat.yml'}:6)" in text
    assert "  restart: filebeat.scan_frequency, " in text and "  live:" not in text.split("logstash")[0]
    assert "logstash: pipeline 'web'" in text and "  reload: logstash.pipeline.workers" in text


def test_an_input_in_a_reloaded_file_changes_by_a_restart_too(node, tmp_path):
    """Filebeat's live input reload can lose a line (issue #14): every Filebeat key costs a restart."""
    _, _, summary = init(tmp_path / "out", node / "reloading" / "filebeat.yml", node / "filebeat-bin",
                         [InputSelector(path_glob="/var/log/nginx/access.log")])
    text = "\n".join(summary)
    assert "output.logstash" in text and "(log, " in text and "web.yml:2)" in text
    restart = next(line for line in summary if line.startswith(f"  {ChangeCost.RESTART.value}: "))
    assert "filebeat.scan_frequency" in restart and "filebeat.queue.mem.events" in restart
    assert not any(line.startswith(f"  {ChangeCost.LIVE.value}: ") for line in summary)


@pytest.mark.parametrize("change, message", [
    ({"input": "nope"}, "filebeat.yml: no input has id 'nope'; inputs found: filebeat.yml:6 filestream"),
    ({"config": "broken.yml"}, "broken.yml:4: expected ',' or ']'"),
    ({"config": "missing.yml"}, "missing.yml: no such file"),
    ({"binary": "filebeat.yml"}, "--filebeat-binary"),
    ({"pipeline": "api"}, "pipelines.yml: no pipeline.id 'api'; found 'web' (line 2), 'heartbeat' (line 8)"),
])
def test_what_init_cannot_use_is_named_and_nothing_is_written(node, tmp_path, change, message):
    (node / "broken.yml").write_text("filebeat.inputs:\n  - type: log\n    paths: [/a\n")
    out = tmp_path / "out"
    with pytest.raises(InitError) as err:
        init(out, node / change.get("config", "filebeat.yml"), node / change.get("binary", "filebeat-bin"),
             [InputSelector(id=change.get("input", "nginx-access"))], logstash_settings=node / "logstash",
             pipeline_id=change.get("pipeline", "web"), output_id="kafka-main")
    assert message in str(err.value)
    assert not out.exists()


def test_init_prints_what_it_manages_and_refuses_to_replace_an_agent_yaml(node, tmp_path):
    args = ("--filebeat-config", str(node / "filebeat.yml"), "--filebeat-binary", str(node / "filebeat-bin"),
            "--input-id", "app-errors", "--out", str(tmp_path / "out"))
    first = _cli(*args)
    assert first.returncode == 0, first.stderr
    assert "input app-errors (filestream," in first.stdout and "wrote " in first.stdout
    again = _cli(*args)
    assert again.returncode == 2 and "agent.yaml exists" in again.stderr
    unknown = _cli(*args[:5], "nope", "--out", str(tmp_path / "other"))
    assert unknown.returncode == 2 and "no input has id 'nope'" in unknown.stderr
    assert not (tmp_path / "other").exists()


def test_init_writes_the_port_it_is_given(node, tmp_path):
    args = ("--filebeat-config", str(node / "filebeat.yml"), "--filebeat-binary", str(node / "filebeat-bin"),
            "--input-id", "nginx-access")
    given = _cli(*args, "--port", "18765", "--out", str(tmp_path / "given"))
    assert given.returncode == 0, given.stderr
    assert load_agent_config(tmp_path / "given" / "agent.yaml").port == 18765
    assert load_agent_config(init(tmp_path / "default", node / "filebeat.yml", node / "filebeat-bin",
                                  [InputSelector(id="nginx-access")])[0]).port == 8765
    refused = _cli(*args, "--port", "70000", "--out", str(tmp_path / "refused"))
    assert refused.returncode == 2 and "--port" in refused.stderr and not (tmp_path / "refused").exists()


def test_init_needs_an_input_to_tune(node, tmp_path):
    with pytest.raises(InitError, match="--input-id ID"):
        init(tmp_path / "out", node / "filebeat.yml", node / "filebeat-bin", [])
