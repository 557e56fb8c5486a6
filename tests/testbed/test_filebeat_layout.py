"""The Filebeat layout of a testbed node: idle rotated files beside the log, and the input's globs over them."""

import json
import os

import pytest
import yaml

from agents.filebeat.render import render_filebeat_config, render_filebeat_inputs
from testbed.filebeat_layout import IDLE_LINES, filebeat_layout, idle_glob, write_idle_files
from testbed.pipeline import MAX_IDLE_FILES, PipelineError, load_pipeline
from testbed.probe import event_time_spec

NOW_S = 1_800_000_000.0


def _spec(tmp_path, idle_files=0):
    return load_pipeline().model_copy(update={"run_dir": tmp_path}).with_idle_files(idle_files)


@pytest.mark.parametrize("log_format", ["json", "multiline-json", "combined", "nginx-json"])
def test_idle_files_are_rotated_names_with_a_few_old_lines_the_probe_reads_as_backfill(tmp_path, log_format):
    log = tmp_path / "logs" / "access.log"
    written = write_idle_files(log, 5, log_format, NOW_S)
    assert [p.name for p in written] == [f"access.log.{k}" for k in range(1, 6)]
    ages_s = [NOW_S - os.stat(p).st_mtime for p in written]
    assert ages_s == sorted(ages_s) and ages_s[0] > 3600  # the higher the number, the older; all past an hour
    lines = _events(written[0].read_text())
    assert len(lines) == IDLE_LINES
    assert all(NOW_S - event_time_spec(log_format).read(line).ts_s > 3600 for line in lines)


def _events(text: str) -> list[dict | str]:
    """The file's events: JSON objects (one a line, or spread over lines) or plain lines."""
    if not text.startswith("{"):
        return text.splitlines()
    decoder, events, at = json.JSONDecoder(), [], 0
    while at < len(text):
        event, at = decoder.raw_decode(text, at)
        events.append(event)
        at += 1  # the newline after it
    return events


def test_a_new_layout_leaves_exactly_its_count_and_nothing_but_rotated_files_is_touched(tmp_path):
    log = tmp_path / "access.log"
    log.write_text("live\n")
    (tmp_path / "canary.log").write_text("canary\n")
    (tmp_path / "access.log.old").write_text("kept\n")
    write_idle_files(log, 200, "json", NOW_S)
    write_idle_files(log, 3, "json", NOW_S)
    assert sorted(p.name for p in tmp_path.glob(idle_glob(log).name)) == [
        "access.log.1", "access.log.2", "access.log.3", "access.log.old"]
    assert log.read_text() == "live\n" and (tmp_path / "canary.log").exists()
    write_idle_files(log, 0, "json", NOW_S)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["access.log", "access.log.old", "canary.log"]


def test_with_idle_files_the_input_globs_the_rotated_files_beside_the_live_log(tmp_path):
    plain, idle = _spec(tmp_path), _spec(tmp_path, 200)
    node = idle.node_layouts()[0]
    paths = {name: yaml.safe_load(render_filebeat_inputs(filebeat_layout(spec), spec.start_config()))[0]["paths"]
             for name, spec in (("plain", plain), ("idle", idle))}
    assert paths["plain"] == [str(node.log_path)]
    assert paths["idle"] == [str(node.log_path), str(node.log_path) + ".*"]


@pytest.mark.parametrize("brokers, acks", [(1, 1), (3, -1)])
def test_filebeat_waits_for_every_in_sync_replica_where_the_topic_is_replicated(tmp_path, brokers, acks):
    """With the leader's ack alone, a leader that moves truncates acknowledged events (277 in a bench.fleet run)."""
    spec = _spec(tmp_path).sized(1, brokers)
    rendered = yaml.safe_load(render_filebeat_config(filebeat_layout(spec), spec.start_config()))
    assert rendered["output.kafka"]["required_acks"] == acks


@pytest.mark.parametrize("count", [-1, MAX_IDLE_FILES + 1])
def test_idle_files_out_of_range_name_the_option(tmp_path, count):
    with pytest.raises(PipelineError, match=rf"--idle-files: {count} is out of range; allowed 0 to {MAX_IDLE_FILES}"):
        _spec(tmp_path, count)
