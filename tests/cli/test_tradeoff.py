"""`pipetune tradeoff` over a run's state directory: the table, the budgets, the PNG, and clear errors."""

import json
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from controller.state import StateStore
from models.observation import Observation
from models.policy import Policy
from models.presets import preset
from models.space import PIPELINE_SPACE
from models.verdict import judge

DEFAULTS = preset("defaults")
FAST = PIPELINE_SPACE.config({"filebeat.queue.mem.flush.timeout": 0.001}, base=DEFAULTS)
runner = CliRunner()


def _run(directory: Path) -> None:
    """A run that measured the defaults, then a faster config that costs more CPU."""
    store = StateStore(directory)
    for config, p95_s, filebeat_cores in ((DEFAULTS, 2.0, 0.02), (FAST, 0.01, 0.08), (FAST, 0.012, 0.08)):
        observation = Observation(30.0, 300.0, 300.0, p95_s / 2, p95_s, p95_s, p95_s / 2, events_in=9000,
                                  events_out=9000, cpu_cores={"filebeat": filebeat_cores, "writer": 0.5})
        store.append_observation(config, 300.0, observation, judge(observation, Policy(), config, None, 0))


def test_the_tradeoff_of_a_run_shows_each_config_its_cpu_the_front_and_the_best_within_each_budget(tmp_path):
    _run(tmp_path)
    result = runner.invoke(app, ["tradeoff", "--state-dir", str(tmp_path), "--json", str(tmp_path / "t.json")])
    assert result.exit_code == 0, result.output
    assert "defaults" in result.output and "config 1" in result.output and "+6.0 %" in result.output
    assert "within defaults + 0 % of a core: defaults, P95 2.0000 s" in result.output
    assert "within defaults + 25 % of a core: config 1, P95 0.0110 s" in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    assert (tmp_path / "tradeoff.png").stat().st_size > 0
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["front"] == ["defaults", "config 1"]
    assert [p["cpu_cores"] for p in doc["points"]] == [0.02, 0.08]  # the writer is not the pipeline's


def test_a_directory_that_is_not_a_runs_is_a_clear_error(tmp_path):
    missing = runner.invoke(app, ["tradeoff", "--state-dir", str(tmp_path / "nope")])
    empty = runner.invoke(app, ["tradeoff", "--state-dir", str(tmp_path)])
    assert missing.exit_code == empty.exit_code == 2
    assert "--state-dir" in missing.output and "is not a directory" in missing.output
    assert "observations.jsonl" in empty.output


def test_presets_are_measured_on_the_twin_at_the_runs_load_when_a_calibration_is_given(tmp_path):
    _run(tmp_path)
    result = runner.invoke(app, ["tradeoff", "--state-dir", str(tmp_path), "--calibration", "local-filebeat-kafka",
                                 "--window", "5", "--json", str(tmp_path / "t.json")])
    assert result.exit_code == 0, result.output
    labels = [p["label"] for p in json.loads((tmp_path / "t.json").read_text())["points"]]
    assert labels == ["config 1", "defaults", "balanced", "throughput", "scale", "latency", "hybrid"]
    bad = runner.invoke(app, ["tradeoff", "--state-dir", str(tmp_path), "--calibration", "no-such"])
    assert bad.exit_code == 2 and "--calibration" in bad.output
