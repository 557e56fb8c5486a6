"""Bad input everywhere it enters (issue 41, fault 7): requests to the agent's HTTP API, malformed deployment and
agent files, and harvested lines Filebeat ships to the probe. Each is a clear refusal naming what is wrong, or a
counted, skipped event; never a crash, a traceback or a stuck window."""

from __future__ import annotations

import json
import re
import tempfile
import time
import traceback
from pathlib import Path

import httpx
import pytest
import schemathesis
from confluent_kafka import Consumer
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from agents.probe.consumer import Probe, consumer_settings
from agents.probe.ledger import Ledger
from agents.probe.metrics import ProbeMetrics
from cli.main import app
from replay.events import msec
from testbed.faults import BAD_CONFIG_BODIES, BAD_LINES
from tests.agents.conftest import TOKEN, filebeat_agent_config
from tests.agents.filebeat.test_adapter import Agent
from tests.conftest import write_deployment
from tests.faults.conftest import AGENT_AUTH, StandInAgent, agent_init, filebeat_log

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


@pytest.mark.parametrize("body, field", BAD_CONFIG_BODIES)
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


def _said(result) -> str:
    """What the command printed, without rich's box and without spaces (rich wraps long paths anywhere); fails on a
    traceback or a crash."""
    assert isinstance(result.exception, SystemExit), "".join(traceback.format_exception(result.exception))
    return _compact(result.output)


def _compact(text: str) -> str:
    return re.sub(r"[\s│╭╮╰╯─]", "", text)


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, Path]:
    return agent_init(tmp_path, tmp_path / "out")


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


# Bad lines in the harvested file, through real Filebeat into the session's Kafka and on to the probe.


def _event(request_id: str) -> bytes:
    """A good line as nginx writes it: its own write time in `ts_nginx` ($msec)."""
    return b'{"request_id": "%s", "status": 200, "ts_nginx": %s}\n' % (request_id.encode(), msec(time.time()).encode())


class Measured:
    """The probe reading a topic in this process, and beside it a consumer of the test's own that notes when each
    good event arrived: the truth the probe's latency is checked against."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.metrics = ProbeMetrics()
        self.probe = Probe(consumer_settings(bootstrap, f"{topic}-probe"), topic, self.metrics, Ledger(late_after_s=60))
        self.truth = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-truth",
                               "auto.offset.reset": "earliest"})
        self.truth.subscribe([topic])
        self.latency_s: dict[str, float] = {}  # request_id -> arrival minus its write time
        self.messages: list[bytes] = []

    def value(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0

    def e2e(self) -> tuple[float, float]:
        """The sum and count of the probe's end-to-end latencies of events (every node)."""
        [family] = [f for f in self.metrics.registry.collect() if f.name == "pipetune_e2e_latency_seconds"]
        samples = [s for s in family.samples if s.labels.get("stage") == "e2e" and s.labels["source"] == "event_time"]
        return (sum(s.value for s in samples if s.name.endswith("_sum")),
                sum(s.value for s in samples if s.name.endswith("_count")))

    def until(self, condition, what: str, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < deadline, f"{what}: not within {timeout_s:g} s"
            self.probe.poll()
            for record in self.truth.consume(500, 0.05):
                if record.error() is None:
                    arrived = time.time()
                    message = json.loads(record.value())["message"]
                    self.messages.append(message.encode(errors="surrogatepass"))
                    try:
                        line = json.loads(message)
                        self.latency_s[line["request_id"]] = arrived - float(line["ts_nginx"])
                    except (ValueError, KeyError, TypeError):
                        continue

    def close(self) -> None:
        self.probe.close()
        self.truth.close()


@pytest.mark.slow
def test_bad_lines_through_real_filebeat_are_counted_and_skipped_and_good_events_keep_their_latency(
        installed, testbed, kafka_topic, tmp_path):
    """A JSON record without the event time, a line that is not UTF-8, binary garbage: each reaches the probe and is
    counted untimed, out of the histograms. Invalid bytes inside a good event are replaced by Filebeat and the event
    is measured. A 1 MiB line is more than Filebeat's Kafka output sends: it drops it (counting it acknowledged), and
    the agent counts it oversized. The good events after them arrive and are measured as the truth has them."""
    agent = Agent(filebeat_agent_config(tmp_path, installed.filebeat, bootstrap=testbed.bootstrap, topic=kafka_topic))
    log = tmp_path / "logs" / "access.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    measured = Measured(testbed.bootstrap, kafka_topic)
    try:
        with open(log, "ab", buffering=0) as out:
            for i in range(5):
                out.write(_event(f"before-{i}"))
            measured.until(lambda: measured.value("pipetune_events_total") == 5, "the first good events measured")
            before = measured.e2e()
            for line in BAD_LINES:
                out.write(line)
            out.write(_event("utf8-inside").replace(b'"status"', b'"note": "\xff\xfe", "status"'))
            for i in range(5):
                out.write(_event(f"after-{i}"))
            measured.until(lambda: measured.value("pipetune_events_total") == 11 and len(measured.latency_s) == 11,
                           "the good events after the bad lines measured")
        after = measured.e2e()
        assert measured.value("pipetune_untimed_events_total") == 3  # no time field, not UTF-8, binary
        assert (measured.value("pipetune_records_total"), measured.value("pipetune_unparsed_events_total")) == (14, 0)
        assert '"note": "\ufffd\ufffd"'.encode() in b"".join(measured.messages)  # replaced, and measured
        # The probe's latency of the events after the bad lines is the truth's (both stamp arrival on this machine).
        new = [seq for seq in measured.latency_s if not seq.startswith("before-")]
        truth_s = sum(measured.latency_s[seq] for seq in new) / len(new)
        probe_s = (after[0] - before[0]) / (after[1] - before[1])
        assert after[1] - before[1] == len(new) and abs(probe_s - truth_s) < 0.5, (probe_s, truth_s)
        assert truth_s < 10, "the bad lines held the good ones up"
        source = _agent_metrics(agent)
        assert source[("pipetune_source_lines_total", str(log))] == 5 + len(BAD_LINES) + 6
        assert source[("pipetune_source_oversized_lines_total", str(log))] == 1
        assert "dropping too large message of size" in filebeat_log(agent.config_dir)
    finally:
        measured.close()
        agent.close()


def _agent_metrics(agent: Agent) -> dict[tuple[str, str], float]:
    """The agent's /metrics: (sample name, path label) -> value."""
    text = httpx.get(f"{agent.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
    return {(sample.name, sample.labels.get("path", "")): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}
