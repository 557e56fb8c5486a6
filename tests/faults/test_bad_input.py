"""Bad input everywhere it enters (issue 41, fault 7): requests to the agent's HTTP API, malformed deployment and
agent files, and harvested lines Filebeat ships to the probe. Each is a clear refusal naming what is wrong, or a
counted, skipped event; never a crash, a traceback or a stuck window."""

from __future__ import annotations

import re
import shutil
import tempfile
import traceback
from pathlib import Path

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from typer.testing import CliRunner

from cli.main import app
from tests.conftest import write_deployment
from tests.faults.conftest import AGENT_AUTH, StandInAgent

# The agent's API, fuzzed from its own OpenAPI schema (as the REST API is, tests/api/test_schemathesis.py), over a
# stand-in Filebeat: a change that passes is applied for real to the operator's file. Made at collection, as the
# schema must be.
_HOME = Path(tempfile.mkdtemp(prefix="pipetune-agent-fuzz-"))
_AGENT = StandInAgent(*(_HOME / name for name in ("conf", "state", "data")), _HOME)
agent_schema = schemathesis.openapi.from_asgi("/openapi.json", _AGENT.app)


def names_what_it_refuses(ctx, response, case) -> None:
    """A change refused for its version or a value names the field (`field`, or FastAPI's `detail[].loc`), or the
    key held (`held`)."""
    if case.method != "PUT" or response.status_code not in (409, 422):
        return
    body = response.json()
    if "field" in body or "held" in body or body.get("status") == "rejected":
        return
    assert isinstance(body.get("detail"), list) and all(e.get("loc") for e in body["detail"]), body


@agent_schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_agents_api_answers_bad_requests_with_a_4xx_naming_the_field(case) -> None:
    """No 5xx, every status and body as the schema says, every refusal naming the field."""
    case.call_and_validate(headers=AGENT_AUTH, additional_checks=[names_what_it_refuses])


@pytest.mark.parametrize("body, field", [
    ('{"version": 1%s, "params": {}}' % ("0" * 300), ["body", "version"]),  # no file name that long: was a 500
    ('{"version": 9, "params": {"filebeat.backoff": 1%s}}' % ("0" * 400), ["body", "params", "filebeat.backoff"]),
    ('{"version": 9, "params": {"filebeat.backoff": 1e400}}', ["body", "params", "filebeat.backoff"]),
    ('{"version": 9, "params": {"filebeat.backoff": NaN}}', ["body", "params", "filebeat.backoff"]),
])
def test_numbers_no_version_or_parameter_can_hold_are_a_422_naming_the_field(body: str, field: list) -> None:
    """Found by the fuzzing above: each was a 500 (a version file name too long for the filesystem, an integer no
    float holds, a NaN the refusal could not encode)."""
    http = TestClient(_AGENT.app, headers=AGENT_AUTH | {"Content-Type": "application/json"},
                      raise_server_exceptions=False)
    answer = http.put("/components/filebeat/config", content=body)
    assert answer.status_code == 422, answer.text
    assert all(e["loc"][:len(field)] == field for e in answer.json()["detail"])


# Malformed agent.yaml (as `pipetune agent init` writes it, then broken) and deployment files, through the command
# line: exit 2, the file and the line or field named, never a traceback.

runner = CliRunner()
GOLDEN = Path(__file__).parents[1] / "agents" / "golden" / "operator"


def _said(result) -> str:
    """What the command printed, without rich's box and without spaces (rich wraps long paths anywhere); fails on a
    traceback or a crash."""
    assert isinstance(result.exception, SystemExit), "".join(traceback.format_exception(result.exception))
    return _compact(result.output)


def _compact(text: str) -> str:
    return re.sub(r"[\s│╭╮╰╯─]", "", text)


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, Path]:
    """agent.yaml and its token as `pipetune agent init` writes them for the golden operator files."""
    shutil.copytree(GOLDEN, tmp_path / "etc")
    binary = tmp_path / "etc" / "filebeat-bin"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    result = runner.invoke(app, ["agent", "init", "--filebeat-config", str(tmp_path / "etc" / "filebeat.yml"),
                                 "--filebeat-binary", str(binary), "--input-id", "nginx-access",
                                 "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    return tmp_path / "out" / "agent.yaml", tmp_path / "out" / "token"


def _nested(depth: int) -> str:
    return "components: " + "[" * depth + "]" * depth + "\n"


BROKEN_AGENT_FILES = {  # name: (how the file is broken, what the error says besides the file)
    "truncated": (lambda text: text[:text.index("inputs:") + 9], ["components.0.inputs: Input should be a valid list"]),
    "cut inside a quote": (lambda text: text + 'extra: "unterminated\n', ["is not valid YAML", "line "]),
    "a wrong type": (lambda text: text.replace("port: 8765", "port: http"), ["port: Input should be a valid integer"]),
    "an unknown key": (lambda text: text + "colour: blue\n", ["colour: Extra inputs are not permitted"]),
    "not UTF-8": (lambda text: text.replace("port", "p\udcffort"), ["is not UTF-8 text: byte"]),
    "nested too deeply": (lambda text: _nested(5000), ["is not valid YAML: nested too deeply to read"]),
    "a number no float holds": (lambda text: text.replace("filebeat.backoff: 1.0", "filebeat.backoff: 1" + "0" * 400),
                                ["components.0.params.filebeat.backoff: 1000", "is not a finite number"]),
}


@pytest.mark.parametrize("broken", BROKEN_AGENT_FILES)
def test_a_broken_agent_yaml_is_exit_2_naming_the_file_and_what_is_wrong(written, broken: str):
    agent_yaml, token = written
    breaks, said = BROKEN_AGENT_FILES[broken]
    agent_yaml.write_bytes(breaks(agent_yaml.read_text()).encode(errors="surrogateescape"))
    result = runner.invoke(app, ["agent", "run", "--config", str(agent_yaml), "--token-file", str(token)])
    assert result.exit_code == 2
    assert all(_compact(part) in _said(result) for part in [f"--config: {agent_yaml}", *said]), _said(result)


@pytest.mark.parametrize("filebeat_yml, said", [
    ("filebeat.inputs:\n  - type: [\n", "filebeat.yml:3: expected the node content"),
    ("output.kafka: {}\n\x00\x01 garbage", "filebeat.yml:2: unacceptable character #x0000"),
])
def test_an_agent_yaml_naming_a_broken_filebeat_yml_is_exit_2_naming_its_line(written, filebeat_yml: str, said: str):
    agent_yaml, token = written
    (agent_yaml.parents[1] / "etc" / "filebeat.yml").write_text(filebeat_yml)
    result = runner.invoke(app, ["agent", "run", "--config", str(agent_yaml), "--token-file", str(token)])
    assert result.exit_code == 2
    assert all(_compact(part) in _said(result) for part in ["--config: components.0 (filebeat):", said]), \
        _said(result)


def test_init_on_a_filebeat_yml_that_is_not_text_is_exit_2_naming_it(written):
    config = written[0].parents[1] / "etc" / "filebeat.yml"
    config.write_bytes(b"\xff\xfe\x00 binary")
    result = runner.invoke(app, ["agent", "init", "--filebeat-config", str(config), "--input-id", "nginx-access",
                                 "--filebeat-binary", str(config.parent / "filebeat-bin"),
                                 "--out", str(config.parents[1] / "again")])
    assert result.exit_code == 2
    assert _compact(f"{config} is not UTF-8 text: byte 0") in _said(result)


BROKEN_DEPLOYMENTS = {
    "truncated": (lambda text: text[:text.index("prometheus:")], ["prometheus: Field required"]),
    "cut inside a quote": (lambda text: text + 'extra: "unterminated\n', ["is not valid YAML", "line "]),
    "a wrong type": (lambda text: text.replace("consumer_group: shop-indexer", "consumer_group: [a, b]"),
                     ["kafka.consumer_group: Input should be a valid string"]),
    "an unknown key": (lambda text: text + "colour: blue\n", ["colour: Extra inputs are not permitted"]),
    "not UTF-8": (lambda text: text.replace("nodes", "no\udcffdes"), ["is not UTF-8 text: byte"]),
    "nested too deeply": (lambda text: "nodes: " + "[" * 5000 + "]" * 5000 + "\n",
                          ["is not valid YAML: nested too deeply to read"]),
    "a number no float holds": (lambda text: text + "config: {set: {filebeat.backoff: 1" + "0" * 400 + "}}\n",
                                ["config.set.filebeat.backoff: 1000", "is not a finite number"]),
}


@pytest.mark.parametrize("broken", BROKEN_DEPLOYMENTS)
def test_a_broken_deployment_file_is_exit_2_naming_the_file_and_what_is_wrong(tmp_path, broken: str):
    path = write_deployment(tmp_path, "http://127.0.0.1:9")
    breaks, said = BROKEN_DEPLOYMENTS[broken]
    path.write_bytes(breaks(path.read_text()).encode(errors="surrogateescape"))
    result = runner.invoke(app, ["autotune", "--pipeline", str(path), "--windows", "1"])
    assert result.exit_code == 2
    assert all(_compact(part) in _said(result) for part in [f"--pipeline: {path}", *said]), _said(result)
