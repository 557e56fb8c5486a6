"""`pipetune autotune --pipeline` with an operator's deployment file: a node that does not answer is exit 2
naming it, before Ray starts; a bad file is exit 2 naming the file and field."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from tests.conftest import free_ports, write_deployment

runner = CliRunner()


def _deployment(tmp_path: Path, **changes: object) -> Path:
    (closed,) = free_ports(1)
    return write_deployment(tmp_path, f"http://127.0.0.1:{closed}", **changes)


def test_a_node_that_does_not_answer_is_exit_2_naming_it(tmp_path):
    result = runner.invoke(app, ["autotune", "--pipeline", str(_deployment(tmp_path)), "--windows", "1"])
    assert result.exit_code == 2
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())  # the message as one line, without rich's box
    assert "an agent does not answer (node edge-1: agent at http://127.0.0.1:" in said


def test_a_bad_deployment_file_is_exit_2_naming_the_field(tmp_path):
    path = _deployment(tmp_path, latency={"source": "logs"})
    result = runner.invoke(app, ["autotune", "--pipeline", str(path), "--windows", "1"])
    assert result.exit_code == 2 and "latency.source" in result.output


def test_load_replay_on_an_operators_pipeline_is_exit_2_naming_the_flag(tmp_path):
    result = runner.invoke(app, ["autotune", "--pipeline", str(_deployment(tmp_path)), "--load", "replay"])
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())
    assert result.exit_code == 2 and "--load" in said and "an operator's pipeline carries its own traffic" in said


def test_an_unknown_load_is_exit_2_listing_the_allowed_ones(tmp_path):
    result = runner.invoke(app, ["autotune", "--pipeline", str(_deployment(tmp_path)), "--load", "k6"])
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())
    assert result.exit_code == 2 and "must be none or replay, got 'k6'" in said


def test_load_is_refused_on_the_twin():
    result = runner.invoke(app, ["autotune", "--load", "none", "--windows", "1"])
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())
    assert result.exit_code == 2 and "--load is for a --pipeline FILE" in said
