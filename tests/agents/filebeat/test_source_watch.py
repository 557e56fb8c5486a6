"""What the agent counts of the harvested files: whole lines and events appended after it starts, across
rename and copytruncate rotation; multiline events as Filebeat joins them; lines longer than a read block, and
lines too long for the output; the backlog against Filebeat's registry; and the agent's /metrics that serves it,
behind its token."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from agents.config import AgentConfig
from agents.filebeat.patch import InputSelector, discover
from agents.filebeat.render import FilebeatLayout, input_selector, write_first_config
from agents.filebeat.source_watch import (READ_BLOCK_BYTES, SourceWatch, WatchedSource, filebeat_data_dir,
                                          message_max_bytes, watched_sources)
from agents.service import create_app
from models.space import PIPELINE_SPACE
from tests.agents.conftest import TOKEN


def _line(seq: int) -> str:
    return json.dumps({"request_id": f"r-{seq:08d}", "ts_nginx": 1.0}) + "\n"


def _append(path: Path, text: str) -> None:
    with open(path, "a") as out:
        out.write(text)


class Scraped:
    """A registry holding one `SourceWatch`; each read is a scrape."""

    def __init__(self, watch: SourceWatch) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(watch)

    def value(self, name: str, source: str) -> float:
        return self.registry.get_sample_value(name, {"path": source})

    def events(self, source: str) -> float:
        return self.value("pipetune_source_events_total", source)


def test_only_whole_lines_appended_after_the_start_are_counted(tmp_path):
    log = tmp_path / "access.log"
    log.write_text(_line(0) + _line(1) + '{"half')  # what the file holds at the start is not offered load
    glob = str(log)
    scraped = Scraped(SourceWatch([WatchedSource(glob)]))
    assert scraped.events(glob) == 0
    _append(log, '": 1}\n' + _line(2) + '{"request_id": "r-0000')  # the last line is half written
    assert scraped.events(glob) == 2 and scraped.value("pipetune_source_lines_total", glob) == 2
    _append(log, '0003", "ts_nginx": 1.0}\n')
    assert scraped.events(glob) == 3
    # The line half written at the start is whole after it: appended then, all of it.
    assert scraped.value("pipetune_source_bytes_total", glob) == len('{"half": 1}\n' + _line(2) + _line(3))


def test_a_rename_rotation_loses_nothing_and_counts_nothing_twice(tmp_path):
    log = tmp_path / "access.log"
    log.write_text("")
    glob = str(tmp_path / "access.log*")  # the rotated file still matches: followed by its identity, not its name
    scraped = Scraped(SourceWatch([WatchedSource(glob)]))
    _append(log, _line(0) + _line(1))
    assert scraped.events(glob) == 2
    log.rename(tmp_path / "access.log.1")
    _append(tmp_path / "access.log.1", _line(2))  # the writer has not reopened yet
    _append(log, _line(3))  # then it has: a new file at the old path
    assert scraped.events(glob) == 4
    assert scraped.events(glob) == 4


def test_a_renamed_file_out_of_the_glob_is_read_to_its_end_then_let_go(tmp_path):
    log = tmp_path / "access.log"
    log.write_text("")
    glob = str(log)
    watch = SourceWatch([WatchedSource(glob)])
    scraped = Scraped(watch)
    _append(log, _line(0))
    assert scraped.events(glob) == 1
    log.rename(tmp_path / "old.log")
    _append(tmp_path / "old.log", _line(1))
    log.write_text(_line(2))
    assert scraped.events(glob) == 3
    assert scraped.events(glob) == 3  # the old file stopped growing: no longer followed
    assert [f.path for f in watch._counts[glob].files.values()] == [str(log)]


def test_copytruncate_counts_the_file_again_from_its_start(tmp_path):
    log = tmp_path / "access.log"
    log.write_text("")
    glob = str(log)
    scraped = Scraped(SourceWatch([WatchedSource(glob)]))
    _append(log, _line(0) + _line(1) + _line(2))
    assert scraped.events(glob) == 3
    with open(log, "r+") as out:  # what logrotate's copytruncate does after copying
        out.truncate(0)
    _append(log, _line(3))
    assert scraped.events(glob) == 4


def test_multiline_events_are_counted_as_filebeat_joins_them(tmp_path):
    """The testbed's multiline JSON (an event spans lines, each event starts with `{`), read from the input's
    own parser settings, the way the agent builds its watch from the Filebeat config it tunes."""
    log = tmp_path / "logs" / "access.log"
    log.parent.mkdir()
    log.write_text("")
    for kind in ("filestream", "log"):
        layout = FilebeatLayout((log,), kind, True, ("127.0.0.1:9",), "t", 5066, tmp_path / kind)
        config = write_first_config(layout, PIPELINE_SPACE.defaults())
        selector = input_selector(layout)
        files = discover(config, [InputSelector(id=selector.get("id"), path_glob=selector.get("path"))])
        (source,) = watched_sources(files.inputs)
        scraped = Scraped(SourceWatch([source]))
        _append(log, '{"request_id": "a",\n  "ts_nginx": 1.0}\n{"request_id": "b",\n  "ts_nginx": 2.0}\n')
        assert scraped.events(str(log)) == 2, kind
        assert scraped.value("pipetune_source_lines_total", str(log)) == 4


def test_a_line_longer_than_a_read_block_is_counted_and_the_lines_after_it_too(tmp_path):
    """Issue 41: a line longer than the 1 MiB read block had no newline in its block and stopped the count there:
    every line after it went uncounted, the offered load read 0 for good."""
    log = tmp_path / "access.log"
    log.write_text("")
    glob = str(log)
    scraped = Scraped(SourceWatch([WatchedSource(glob)], message_max_bytes=1_000_000))
    long_line = "x" * (READ_BLOCK_BYTES + 5) + "\n"
    _append(log, _line(0) + long_line[:1000])  # the long line half written: not counted yet
    assert scraped.events(glob) == 1
    carriage = "a line with a \r inside\n"  # \r ends no line, as for Filebeat
    _append(log, long_line[1000:] + _line(1) + carriage)
    assert scraped.events(glob) == 4
    assert scraped.value("pipetune_source_bytes_total", glob) == len(_line(0) + long_line + _line(1) + carriage)
    assert scraped.value("pipetune_source_oversized_lines_total", glob) == 1


def _first_filebeat(tmp_path: Path) -> tuple[Path, FilebeatLayout, Path]:
    """An empty log and the first Filebeat config the testbed writes over it: (log, layout, filebeat.yml)."""
    log = tmp_path / "logs" / "access.log"
    log.parent.mkdir()
    log.write_text("")
    layout = FilebeatLayout((log,), "filestream", False, ("127.0.0.1:9",), "t", 5066, tmp_path / "filebeat")
    return log, layout, write_first_config(layout, PIPELINE_SPACE.defaults())


def test_lines_at_least_as_long_as_the_outputs_largest_message_are_oversized(tmp_path):
    log, layout, config = _first_filebeat(tmp_path)
    files = discover(config, [InputSelector(id=input_selector(layout)["id"])])
    assert message_max_bytes(files) == 1_000_000  # Filebeat's Kafka output's own default
    config.write_text(config.read_text().replace("output.kafka:\n", "output.kafka:\n  max_message_bytes: 100\n"))
    assert message_max_bytes(files) == 100
    scraped = Scraped(SourceWatch([WatchedSource(str(log))], message_max_bytes=100))
    _append(log, "y" * 99 + "\n" + "z" * 100 + "\n")
    assert scraped.value("pipetune_source_oversized_lines_total", str(log)) == 1
    assert scraped.events(str(log)) == 2


def test_the_backlog_is_what_filebeats_registry_has_not_acknowledged(tmp_path):
    log, other = tmp_path / "access.log", tmp_path / "other.log"
    log.write_text(_line(0))  # before the start, and acknowledged
    other.write_text(_line(1))  # before the start, and unknown to Filebeat: not counted against it
    stat = os.stat(log)
    acked = {(stat.st_dev, stat.st_ino): len(_line(0))}
    glob = str(tmp_path / "*.log")
    scraped = Scraped(SourceWatch([WatchedSource(glob)], lambda: acked))
    assert scraped.value("pipetune_source_backlog_bytes", glob) == 0
    _append(log, _line(2) + _line(3))
    _append(other, _line(4))
    assert scraped.value("pipetune_source_backlog_bytes", glob) == len(_line(2) + _line(3) + _line(4))
    acked[(stat.st_dev, stat.st_ino)] += len(_line(2) + _line(3))
    assert scraped.value("pipetune_source_backlog_bytes", glob) == len(_line(4))


def test_filebeats_data_dir_is_found_as_filebeat_finds_it(tmp_path):
    config = tmp_path / "filebeat.yml"
    config.write_text("path.data: /var/lib/fb\n")
    assert filebeat_data_dir(config, ["/usr/bin/filebeat", "--path.data", "/d"]) == Path("/d")
    assert filebeat_data_dir(config, ["/usr/bin/filebeat", "--path.home=/h"]) == Path("/h/data")
    assert filebeat_data_dir(config, ["/usr/bin/filebeat", "-c", str(config)]) == Path("/var/lib/fb")
    config.write_text("path:\n  home: /opt/fb\n")
    assert filebeat_data_dir(config, ["/usr/bin/filebeat"]) == Path("/opt/fb/data")
    config.write_text("output.kafka: {}\n")
    assert filebeat_data_dir(config, [str(tmp_path / "bin" / "filebeat")]) == tmp_path / "bin" / "data"


def test_the_agent_serves_its_sources_at_metrics_behind_its_tokens_and_the_scrapers_changes_nothing(tmp_path):
    log, layout, config = _first_filebeat(tmp_path)
    agent_config = AgentConfig.model_validate({
        "state_dir": str(tmp_path / "state"),
        "components": [{"name": "filebeat", "kind": "filebeat", "binary": "/usr/bin/filebeat", "config": str(config),
                        "inputs": [input_selector(layout)]}]})
    client = TestClient(create_app(agent_config, TOKEN, components={}, metrics_token="scraper's"))
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 403
    _append(log, _line(0) + _line(1))
    answer = client.get("/metrics", headers={"Authorization": "Bearer scraper's"})
    assert answer.status_code == 200
    assert client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    # the scraper's token reads /metrics and changes nothing
    refused = client.put("/components/filebeat/config", json={"version": 1, "params": {}},
                         headers={"Authorization": "Bearer scraper's"})
    assert refused.status_code == 403 and "reads GET /metrics only" in refused.text
    assert client.get("/components", headers={"Authorization": "Bearer scraper's"}).status_code == 403
    assert f'pipetune_source_events_total{{path="{log}"}} 2.0' in answer.text
    assert f'pipetune_source_backlog_bytes{{path="{log}"}} {2 * len(_line(0))}.0' in answer.text
