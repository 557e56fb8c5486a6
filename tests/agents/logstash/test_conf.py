"""Reading and patching operators' Logstash pipeline configs (`agents.logstash.conf`).

No Logstash process can run on this machine: the configs are golden files written the way people write
them, and the expected results were checked by hand against Logstash's grammar.
"""

import difflib
from pathlib import Path

import pytest

from agents.logstash.conf import LogstashConfigError, patch_plugin, read_plugins

GOLDEN = Path(__file__).parents[1] / "golden" / "operator"
TWO_OUTPUTS = (GOLDEN / "two-kafka-outputs.conf").read_text()
TUNED = {"linger_ms": 0, "batch_size": 16384, "acks": "1", "compression_type": "zstd"}


def _changed_lines(before: str, after: str) -> list[str]:
    return [line for line in difflib.ndiff(before.splitlines(), after.splitlines()) if line[:2] in ("+ ", "- ")]


def test_every_plugin_of_a_real_shaped_config_is_found_through_conditionals_hashes_and_codecs():
    plugins = [(p.section, p.name, p.id) for p in read_plugins(TWO_OUTPUTS)]
    assert plugins == [("input", "beats", "beats-in"), ("filter", "grok", None), ("filter", "date", None),
                       ("filter", "json", None), ("filter", "mutate", None),
                       ("output", "kafka", "kafka-errors"), ("output", "kafka", "kafka-main")]
    main = read_plugins(TWO_OUTPUTS)[-1]
    assert main.settings["linger_ms"].text == "50" and main.settings["codec"].text == "json"


def test_only_the_selected_kafka_output_changes_and_every_other_byte_stays():
    patched = patch_plugin(TWO_OUTPUTS, "kafka-main", TUNED)
    assert patched == (GOLDEN / "two-kafka-outputs.kafka-main-patched.conf").read_text()
    changed = _changed_lines(TWO_OUTPUTS, patched)
    assert sorted(changed) == sorted([
        '-     compression_type => "lz4"', "-     linger_ms => 50     # batch for throughput",
        "-     batch_size => 65536", '+     compression_type => "zstd"', "+     linger_ms => 0     # batch for throughput",
        "+     batch_size => 16384", '+     acks => "1"'])
    errors_block = TWO_OUTPUTS[TWO_OUTPUTS.index('id => "kafka-errors"'):TWO_OUTPUTS.index('id => "kafka-main"')]
    assert errors_block in patched


def test_a_value_keeps_the_quotes_the_operator_wrote():
    text = "output { kafka { id => 'k' acks => 'all' compression_type => none } }"
    patched = patch_plugin(text, "k", {"acks": "1", "compression_type": "lz4"})
    assert patched == "output { kafka { id => 'k' acks => '1' compression_type => lz4 } }"


def test_settings_the_plugin_lacks_are_added_indented_as_their_siblings_or_on_its_one_line():
    one_line = (GOLDEN / "filter-only-branches.conf").read_text()
    patched = patch_plugin(one_line, "out", {"linger_ms": 0})
    assert 'bootstrap_servers => "k1:9092" linger_ms => 0 } }' in patched
    assert read_plugins(patched)[-1].settings["linger_ms"].text == "0"


def test_patching_to_the_values_in_force_changes_nothing():
    patched = patch_plugin(TWO_OUTPUTS, "kafka-main", {"linger_ms": 50, "batch_size": 65536})
    assert patched == TWO_OUTPUTS


def test_an_unknown_id_is_refused_naming_the_ids_there_are():
    with pytest.raises(LogstashConfigError, match=r"no output kafka plugin with id 'kafka'; found 'kafka-errors' "
                                                  r"\(line 34\), 'kafka-main' \(line 46\)"):
        patch_plugin(TWO_OUTPUTS, "kafka", TUNED, source="web.conf")


@pytest.mark.parametrize("text, where", [
    ("input { beats { port => 5044 }\n", "web.conf:2:1: expected '}' to close the input section of line 1"),
    ("filter {\n  else { drop {} }\n}", "web.conf:2:3: 'else' without an 'if'"),
    ('output {\n  kafka { topic_id => "x }\n}', "web.conf:2:23: unterminated string"),
    ("inputs { }", "web.conf:1:1: expected input, filter or output"),
    ("filter { if { drop {} } }", "web.conf:1:13: an 'if' without a condition"),
    ("filter {\n  mutate { add_field => { \"a\" \"b\" } }\n}", "web.conf:2:31: expected '=>' in the hash"),
    ('output { kafka { id => "a" id => "b" } }', "web.conf:1:28: setting 'id' given twice"),
])
def test_a_config_the_reader_cannot_parse_is_refused_with_file_line_and_column(text, where):
    with pytest.raises(LogstashConfigError, match="^" + where):
        read_plugins(text, "web.conf")
