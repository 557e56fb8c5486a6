"""`pipetune calibrate`: flag errors, and one tiny design against the session testbed."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cli.main import app
from models.twin import load


@pytest.mark.parametrize("flag, value", [("--rates", "fast"), ("--rates", "0"), ("--configs", "nope"),
                                         ("--warmup", "99"), ("--base", "nope")])
def test_bad_flags_are_named(flag, value, tmp_path):
    result = CliRunner().invoke(app, ["calibrate", "--pipeline", str(tmp_path / "missing.yaml"), flag, value])
    assert result.exit_code == 2
    assert flag in result.output


@pytest.mark.slow
def test_calibrate_writes_a_loadable_calibration(testbed, testbed_file, tmp_path):
    out = tmp_path / "fitted.yaml"
    result = CliRunner().invoke(app, ["calibrate", "--pipeline", str(testbed_file), "--out", str(out),
                                      "--configs", "low-latency", "--rates", "300", "--duration", "4",
                                      "--warmup", "1", "--max-evals", "4"])
    assert result.exit_code == 0, result.output
    fitted = load(str(out))
    assert fitted.topology == "filebeat-kafka" and fitted.name == "fitted"
    assert 1e-6 <= fitted.filebeat.cpu_per_event_s <= 3e-4
