"""What is exported about the node besides the sources: Filebeat's acknowledged offsets, components' CPU, the
node's CPU."""

import json
import os
import subprocess
import time

import pytest
from prometheus_client import CollectorRegistry

from agents.filebeat.registry import registry_offsets
from agents.process_stats import NodeCpuCollector, ProcessCpuCollector


def test_registry_offsets_take_the_newest_entry_per_file_identity(tmp_path):
    home = tmp_path / "registry" / "filebeat"
    home.mkdir(parents=True)
    (home / "active.dat").write_text(str(home / "7.json"))
    (home / "7.json").write_text(json.dumps([
        {"_key": "filestream::in::native::11-2049", "cursor": {"offset": 10}, "meta": {"source": "/a.log"}}]))
    ops = [{"op": "set", "id": 8},
           {"k": "filestream::in::native::12-2049", "v": {"cursor": None, "meta": {"source": "/b.log"}}},
           {"op": "set", "id": 9},
           {"k": "filestream::in::native::11-2049", "v": {"cursor": {"offset": 25}, "meta": {"source": "/a.log.1"}}},
           {"op": "set", "id": 10},  # a log input keeps its offset at the top of its state
           {"k": "filebeat::logs::native::13-2050", "v": {"offset": 7, "source": "/c.log"}}]
    (home / "log.json").write_text("".join(json.dumps(op) + "\n" for op in ops) + '{"k": "a", "v": {"cur')
    assert registry_offsets(tmp_path) == {(2049, 11): 25, (2050, 13): 7}


def test_component_cpu_follows_the_pid_file(tmp_path):
    alive, gone, garbage = tmp_path / "alive.json", tmp_path / "gone.json", tmp_path / "garbage.json"
    alive.write_text(json.dumps({"pid": os.getpid()}))
    gone.write_text("999999999")
    garbage.write_text("not a pid")
    sum(i * i for i in range(200_000))  # some CPU time of our own
    registry = CollectorRegistry()
    registry.register(ProcessCpuCollector({"self": alive, "gone": gone, "garbage": garbage,
                                           "missing": tmp_path / "none.json"}))
    samples = {s.labels["component"]: s.value for m in registry.collect() for s in m.samples
               if s.name == "pipetune_component_cpu_seconds_total"}
    assert set(samples) == {"self"} and samples["self"] > 0


def test_a_components_start_time_changes_when_it_restarts(tmp_path):
    # the daemon holds through a window in which a component restarted that it did not restart
    pid_file = tmp_path / "filebeat.json"
    registry = CollectorRegistry()
    registry.register(ProcessCpuCollector({"filebeat": pid_file}))

    def started_s() -> float | None:
        return registry.get_sample_value("pipetune_component_start_time_seconds", {"component": "filebeat"})
    assert started_s() is None  # no process: no series
    first = subprocess.Popen(["sleep", "30"])
    second = None
    try:
        pid_file.write_text(json.dumps({"pid": first.pid}))
        first_s = started_s()
        assert abs(first_s - time.time()) < 2.0  # the boot time is a whole second
        time.sleep(1.0)
        second = subprocess.Popen(["sleep", "30"])
        pid_file.write_text(json.dumps({"pid": second.pid}))  # as a restarted component writes it
        assert started_s() - first_s == pytest.approx(1.0, abs=0.5)
    finally:
        for process in (first, second):
            if process is not None:
                process.kill()
                process.wait()


def _node_samples(collector: NodeCpuCollector) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(collector)
    return {s.name: s.value for m in registry.collect() for s in m.samples}


def test_the_nodes_busy_time_counts_every_column_but_idle_and_iowait_over_its_cpus(tmp_path):
    stat = tmp_path / "stat"
    #                user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 20 30 5000 700 4 6 40 9 0\n"
                    "cpu0 50 10 15 2500 350 2 3 20 9 0\ncpu1 50 10 15 2500 350 2 3 20 0 0\nintr 1 2 3\n")
    samples = _node_samples(NodeCpuCollector(stat))
    assert samples == {"pipetune_node_cpu_busy_seconds_total": 200 / os.sysconf("SC_CLK_TCK"), "pipetune_node_cpus": 2}


def test_the_nodes_cpu_is_read_from_proc_and_grows_as_the_node_works():
    before = _node_samples(NodeCpuCollector())
    sum(i * i for i in range(2_000_000))
    after = _node_samples(NodeCpuCollector())
    assert after["pipetune_node_cpus"] == os.cpu_count()
    assert after["pipetune_node_cpu_busy_seconds_total"] > before["pipetune_node_cpu_busy_seconds_total"]


def test_an_unreadable_stat_file_exports_nothing_rather_than_a_wrong_figure(tmp_path):
    assert _node_samples(NodeCpuCollector(tmp_path / "missing")) == {}
