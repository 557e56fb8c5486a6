"""The Filebeat renderer: each parameter lands under the name Filebeat reads, and Filebeat accepts the result."""

import subprocess
from pathlib import Path

import pytest
import yaml

from agents.filebeat.render import (FilebeatLayout, duration_value, go_duration, go_seconds, render_filebeat_config,
                                   render_filebeat_inputs)
from models.presets import preset
from models.space import PIPELINE_SPACE


def _layout(tmp_path: Path, input_type: str = "filestream", multiline: bool = False) -> FilebeatLayout:
    return FilebeatLayout((tmp_path / "access.log",), input_type, multiline, ("127.0.0.1:19092",), "nginx",
                          15066, tmp_path / "fb")


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (0.01, "10ms"), (1, "1s"), (1.5, "1.5s"), (300, "5m"),
                                           (0.0005, "500us"), (55.82824, "55.8s"), (0.25, "250ms"), (31e-6, "31us"),
                                           (90, "90s"), (1234, "1230s"), (3599.6, "1h"), (0.9996, "1s"),
                                           (0.06836, "68.4ms")])
def test_durations_are_written_as_people_write_them(seconds, text):
    """The largest unit that keeps at most 3 significant digits; whole minutes and hours in m and h."""
    assert go_duration(seconds) == text
    assert go_seconds(text) == pytest.approx(seconds, rel=5e-3)


@pytest.mark.parametrize("name", [p.name for p in PIPELINE_SPACE if p.unit == "s"])
def test_a_rounded_duration_never_leaves_its_parameters_range(name):
    param = PIPELINE_SPACE[name]
    for value in (param.low, param.high, param.low * 1.0004, param.high * 0.9996, param.high - 1e-6):
        written = go_seconds(duration_value(name, value))
        assert param.low <= written <= param.high, (value, duration_value(name, value))
    assert go_duration(9.9996, 0.001, 9.9996) == "9.9996s"  # 3 digits would be 10s, above the range


def test_filestream_input_uses_filestream_names(tmp_path):
    config = PIPELINE_SPACE.config({"filebeat.scan_frequency": 0.5, "filebeat.backoff": 0.01,
                                    "filebeat.max_backoff": 0.05})
    [entry] = yaml.safe_load(render_filebeat_inputs(_layout(tmp_path), config))
    assert entry["type"] == "filestream"
    assert entry["prospector.scanner.check_interval"] == "500ms"
    assert (entry["backoff.init"], entry["backoff.max"]) == ("10ms", "50ms")
    assert entry["close.on_state_change.inactive"] == "5m"
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
