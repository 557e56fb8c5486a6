"""The Filebeat renderer: each parameter lands under the name Filebeat reads, and Filebeat accepts the result."""

import subprocess
from pathlib import Path

import pytest
import yaml

from agents.filebeat.render import FilebeatLayout, go_duration, render_filebeat_config, render_filebeat_inputs
from models.presets import preset
from models.space import PIPELINE_SPACE


def _layout(tmp_path: Path, input_type: str = "filestream", multiline: bool = False) -> FilebeatLayout:
    return FilebeatLayout((tmp_path / "access.log",), input_type, multiline, ("127.0.0.1:19092",), "nginx",
                          15066, tmp_path / "fb")


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (0.01, "10ms"), (1, "1s"), (1.5, "1500ms"), (300, "300s"),
                                           (0.0005, "0.5ms")])
def test_go_durations(seconds, text):
    assert go_duration(seconds) == text


def test_filestream_input_uses_filestream_names(tmp_path):
    config = PIPELINE_SPACE.config({"filebeat.scan_frequency": 0.5, "filebeat.backoff": 0.01,
                                    "filebeat.max_backoff": 0.05})
    [entry] = yaml.safe_load(render_filebeat_inputs(_layout(tmp_path), config))
    assert entry["type"] == "filestream"
    assert entry["prospector.scanner.check_interval"] == "500ms"
    assert (entry["backoff.init"], entry["backoff.max"]) == ("10ms", "50ms")
    assert entry["close.on_state_change.inactive"] == "300s"
    assert "scan_frequency" not in entry and "backoff_factor" not in entry


def test_log_input_with_multiline_waits_at_most_the_multiline_timeout(tmp_path):
    config = PIPELINE_SPACE.config({"filebeat.multiline.timeout": 0.2, "filebeat.backoff_factor": 3})
    [entry] = yaml.safe_load(render_filebeat_inputs(_layout(tmp_path, "log", multiline=True), config))
    assert entry["scan_frequency"] == "10s" and entry["backoff_factor"] == 3
    assert entry["multiline.timeout"] == "200ms" and entry["multiline.negate"] is True


def test_queue_and_output_follow_the_preset(tmp_path):
    document = yaml.safe_load(render_filebeat_config(_layout(tmp_path), preset("latency")))
    assert document["queue.mem"] == {"events": 4100, "flush.min_events": 2050, "flush.timeout": "1s"}
    assert document["output.kafka"]["bulk_max_size"] == 50
    assert document["output.kafka"]["hosts"] == ["127.0.0.1:19092"]
    assert document["http"]["host"] == "127.0.0.1"
    assert document["filebeat.config.inputs"]["reload.enabled"] is True


@pytest.mark.slow
@pytest.mark.parametrize("input_type, multiline, name", [("filestream", False, "hybrid"), ("log", True, "latency")])
def test_filebeat_accepts_the_rendered_config(installed, tmp_path, input_type, multiline, name):
    layout = _layout(tmp_path, input_type, multiline)
    (layout.home_dir / "inputs.d").mkdir(parents=True)
    (layout.home_dir / "inputs.d" / "replay.yml").write_text(render_filebeat_inputs(layout, preset(name)))
    main = layout.home_dir / "filebeat.yml"
    main.write_text(render_filebeat_config(layout, preset(name)))
    main.chmod(0o600)
    for check in (["test", "config"], ["export", "config"]):
        proc = subprocess.run([str(installed.filebeat), *check, "-c", str(main), "--path.home", str(layout.home_dir)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
