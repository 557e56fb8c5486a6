"""Changing keys of operators' YAML files in place (`agents.yaml_patch`)."""

from pathlib import Path

import pytest
import yaml
from ruamel.yaml.nodes import MappingNode

from agents.yaml_patch import YamlPatchError, apply, compose, edits_for, lookup

FILEBEAT = (Path(__file__).parent / "golden" / "operator" / "filebeat.yml").read_text()


def _root() -> MappingNode:
    return compose(FILEBEAT, "filebeat.yml")


def _changed(before: str, after: str) -> list[tuple[str, str]]:
    return [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]


def test_keys_are_found_nested_dotted_or_mixed():
    root = _root()
    assert lookup(root, "queue.mem.flush.timeout").value == "1s"
    assert lookup(root, "output.kafka.compression").value == "gzip"
    assert lookup(root, "filebeat.config.modules.reload.enabled").value == "false"
    assert lookup(root, "queue.mem.flush.missing") is None


def test_a_change_rewrites_only_the_value_keeping_comments_and_quotes():
    root = _root()
    edits = edits_for(FILEBEAT, root, {"queue.mem.flush.timeout": "10ms", "queue.mem.flush.min_events": 1,
                                       "output.kafka.compression": "none", "output.kafka.topic": "web-all"},
                      "filebeat.yml")
    patched = apply(FILEBEAT, edits)
    assert _changed(FILEBEAT, patched) == [("  flush.min_events: 2048", "  flush.min_events: 1"),
                                           ("  flush.timeout: 1s", "  flush.timeout: 10ms"),
                                           ("  topic: 'web-%{[fields.log_type]}'", "  topic: 'web-all'"),
                                           ("  compression: gzip", "  compression: none")]
    assert yaml.safe_load(patched)["queue.mem"]["flush.timeout"] == "10ms"


def test_a_key_the_file_lacks_is_added_beside_its_siblings_and_reads_back():
    root = _root()
    inputs = lookup(root, "filebeat.inputs")
    nginx = inputs.value[0]
    patched = apply(FILEBEAT, edits_for(FILEBEAT, nginx, {"backoff.max": "100ms", "close.on_state_change.inactive": "5m"},
                                          "filebeat.yml")
                    + edits_for(FILEBEAT, root, {"output.kafka.bulk_max_size": 50}, "filebeat.yml"))
    loaded = yaml.safe_load(patched)
    assert loaded["filebeat.inputs"][0]["backoff"] == {"init": "1s", "max": "100ms"}
    assert loaded["filebeat.inputs"][0]["close.on_state_change.inactive"] == "5m"
    assert loaded["output.kafka"]["bulk_max_size"] == 50
    second = FILEBEAT[FILEBEAT.index("  # application errors"):FILEBEAT.index("filebeat.config.modules")]
    assert second in patched  # the other input, byte for byte


def test_values_already_in_force_produce_no_edit():
    assert edits_for(FILEBEAT, _root(), {"queue.mem.events": 4096, "output.kafka.required_acks": 1.0,
                                         "queue.mem.flush.timeout": "1s"}, "filebeat.yml") == []


def test_a_string_that_would_read_as_another_type_is_quoted():
    patched = apply(FILEBEAT, edits_for(FILEBEAT, _root(), {"logging.level": "on"}, "filebeat.yml"))
    assert yaml.safe_load(patched)["logging.level"] == "on"


def test_broken_yaml_is_refused_with_file_and_line():
    with pytest.raises(YamlPatchError, match=r"^filebeat.yml:4: "):
        compose("a: 1\nb:\n  - x\n  y: 2\n", "filebeat.yml")


def test_a_key_holding_a_mapping_is_not_overwritten_by_a_value():
    with pytest.raises(YamlPatchError, match=r"filebeat.yml:\d+: queue.mem is not a single value"):
        edits_for(FILEBEAT, _root(), {"queue.mem": 1}, "filebeat.yml")


def test_a_key_added_after_a_block_scalar_lands_after_it():
    text = "input:\n  script: |\n    echo hi\n  id: a\nother: 1\n"
    root = compose(text, "x.yml")
    patched = apply(text, edits_for(text, lookup(root, "input"), {"backoff": "1s"}, "x.yml"))
    assert patched == "input:\n  script: |\n    echo hi\n  id: a\n  backoff: 1s\nother: 1\n"
    text = "input:\n  id: a\n  script: |\n    echo hi\nother: 1\n"
    patched = apply(text, edits_for(text, lookup(compose(text, "x.yml"), "input"), {"backoff": "1s"}, "x.yml"))
    assert yaml.safe_load(patched) == {"input": {"id": "a", "script": "echo hi\n", "backoff": "1s"}, "other": 1}
