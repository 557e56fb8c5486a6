"""Tuning an operator's Logstash pipeline in place (`agents.logstash.patch`).

No Logstash process can run on this machine: golden files written the way operators write them.
"""

import difflib
import shutil
from pathlib import Path

import pytest
import yaml

from agents.logstash.conf import LogstashConfigError, read_plugins
from agents.logstash.patch import discover, patch

GOLDEN = Path(__file__).parents[1] / "golden" / "operator" / "logstash"
TUNED = {"logstash.pipeline.workers": 2, "logstash.pipeline.batch.size": 125, "logstash.pipeline.batch.delay": 4.6,
         "logstash.output.kafka.linger_ms": 0, "logstash.output.kafka.batch_size": 16384}


@pytest.fixture
def node(tmp_path: Path) -> Path:
    shutil.copytree(GOLDEN, tmp_path / "logstash")
    return tmp_path / "logstash"


def test_the_selected_pipeline_and_kafka_output_are_found_across_the_config_glob(node):
    files = discover(node / "pipelines.yml", "web", "kafka-main")
    assert files.conf.name == "20-web.conf" and files.entry_index == 0


def test_only_the_selected_entry_and_output_change(node):
    before = {p: p.read_text() for p in node.rglob("*") if p.is_file()}
    changed = patch(discover(node / "pipelines.yml", "web", "kafka-main"), TUNED)
    assert set(changed) == {node / "pipelines.yml", node / "conf.d" / "20-web.conf"}
    diff = [line for line in difflib.ndiff(before[node / "pipelines.yml"].splitlines(),
                                           changed[node / "pipelines.yml"].splitlines()) if line[:2] in ("- ", "+ ")]
    assert sorted(diff) == sorted(["-   pipeline.workers: 4", "+   pipeline.workers: 2", "-   pipeline.batch.size: 250",
                                   "+   pipeline.batch.size: 125", "+   pipeline.batch.delay: 5"])
    assert yaml.safe_load(changed[node / "pipelines.yml"])[1] == yaml.safe_load(before[node / "pipelines.yml"])[1]
    outputs = {p.id: p for p in read_plugins(changed[node / "conf.d" / "20-web.conf"])}
    assert outputs["kafka-main"].settings["linger_ms"].text == "0"
    assert outputs["kafka-errors"].settings["linger_ms"].text == "5"


def test_an_unknown_pipeline_or_output_is_refused_naming_what_there_is(node):
    with pytest.raises(LogstashConfigError, match=r"no pipeline.id 'api'; found 'web' \(line 2\), 'heartbeat'"):
        discover(node / "pipelines.yml", "api", "kafka-main")
    with pytest.raises(LogstashConfigError, match=r"expected one kafka output with id 'kafka' in pipeline 'web', "
                                                  r"found none"):
        discover(node / "pipelines.yml", "web", "kafka")
    with pytest.raises(LogstashConfigError, match="has no path.config"):
        discover(node / "pipelines.yml", "heartbeat", "kafka-main")


def test_a_config_file_the_reader_cannot_parse_is_refused_with_its_line(node):
    (node / "conf.d" / "30-broken.conf").write_text("output {\n  kafka { id => \"x\"\n}\n")
    with pytest.raises(LogstashConfigError, match=r"30-broken.conf:4:1: expected '}' to close the output section of line 1"):
        discover(node / "pipelines.yml", "web", "kafka-main")
