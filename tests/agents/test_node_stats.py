"""What the probe re-exports about the node: the log's offered load and Filebeat's acknowledged offset."""

import json
import os

from prometheus_client import CollectorRegistry

from agents.filebeat_exporter import registry_offsets
from agents.log_stats import LogCollector
from agents.process_stats import ProcessCpuCollector


def _written(registry: CollectorRegistry) -> float:
    return registry.get_sample_value("pipetune_log_events_written_total")


def _line(seq: int) -> str:
    return json.dumps({"request_id": f"r-{seq:08d}", "ts_nginx": 1.0}) + "\n"


def test_log_collector_counts_only_what_is_appended_after_it_starts(tmp_path):
    log = tmp_path / "access.log"
    log.write_text(_line(0) + _line(1))
    registry = CollectorRegistry()
    registry.register(LogCollector(log))
    assert _written(registry) == 0
    with open(log, "a") as out:
        out.write(_line(2) + _line(3) + '{"request_id": "r-0000')  # the last event is half written
    assert _written(registry) == 2
    with open(log, "a") as out:
        out.write('0004", "ts_nginx": 1.0}\n')
    assert _written(registry) == 3
    log.unlink()
    log.write_text(_line(5))  # rotated: a new file is read from its start
    assert _written(registry) == 4


def test_registry_offsets_take_the_newest_entry_per_file(tmp_path):
    home = tmp_path / "registry" / "filebeat"
    home.mkdir(parents=True)
    (home / "active.dat").write_text(str(home / "7.json"))
    (home / "7.json").write_text(json.dumps([{"_key": "a", "cursor": {"offset": 10}, "meta": {"source": "/a.log"}}]))
    ops = [{"op": "set", "id": 8},
           {"k": "b", "v": {"cursor": None, "meta": {"source": "/b.log"}}},
           {"op": "set", "id": 9},
           {"k": "a", "v": {"cursor": {"offset": 25}, "meta": {"source": "/a.log"}}}]
    (home / "log.json").write_text("".join(json.dumps(op) + "\n" for op in ops) + '{"k": "a", "v": {"cur')
    assert registry_offsets(tmp_path) == {"/a.log": 25}


def test_component_cpu_follows_the_pid_file(tmp_path):
    alive, gone, garbage = tmp_path / "alive.json", tmp_path / "gone.json", tmp_path / "garbage.json"
    alive.write_text(json.dumps({"pid": os.getpid()}))
    gone.write_text("999999999")
    garbage.write_text("not a pid")
    sum(i * i for i in range(200_000))  # some CPU time of our own
    registry = CollectorRegistry()
    registry.register(ProcessCpuCollector({"self": alive, "gone": gone, "garbage": garbage,
                                           "missing": tmp_path / "none.json"}))
    samples = {s.labels["component"]: s.value for m in registry.collect() for s in m.samples}
    assert set(samples) == {"self"} and samples["self"] > 0
