"""CPU time of the pipeline's other processes on this node, and of the node as a whole, read from /proc at
each scrape; and when each of those processes started, so that a window in which one restarted is known.

Each process is named by a pid file (a bare pid, or JSON with a "pid" field, as the testbed writes
them); a restarted component writes a new one, so the pid is read again at every scrape.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# /proc/stat's CPU columns: user nice system idle iowait irq softirq steal (guest time is counted in user)
_BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)


def _stat_fields(pid: int) -> list[str] | None:
    """A live process's /proc/<pid>/stat fields after its command name (stat's field 3 on), None if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process, None if it is gone."""
    fields = _stat_fields(pid)
    # utime and stime are fields 14 and 15 of stat, 12 and 13 after the command name.
    return None if fields is None else (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def start_ticks(pid: int) -> int | None:
    """The kernel's start time of a live process (None once it exited): with the pid, it names one process."""
    fields = _stat_fields(pid)
    # A zombie has exited: it only waits to be reaped, so it does not count as running. starttime is stat's field
    # 22, 20 after the command name: clock ticks after boot.
    return None if fields is None or fields[0] == "Z" else int(fields[19])


@functools.cache
def _boot_s() -> int:
    """When the node booted, epoch seconds (/proc/stat's btime, a whole second)."""
    lines = Path("/proc/stat").read_text().splitlines()
    return next(int(line.split()[1]) for line in lines if line.startswith("btime"))


def start_time_s(pid: int) -> float | None:
    """When a live process started, epoch seconds (the boot time's whole second plus clock ticks), None if it is
    gone."""
    ticks = start_ticks(pid)
    return None if ticks is None else _boot_s() + ticks / _TICKS_PER_S


def read_pid(pid_file: Path) -> int | None:
    try:
        text = pid_file.read_text().strip()
        return int(json.loads(text)["pid"]) if text.startswith("{") else int(text)
    except (OSError, ValueError, KeyError, TypeError):
        return None


class ProcessCpuCollector(Collector):
    """`pipetune_component_cpu_seconds_total{component}` and `pipetune_component_start_time_seconds{component}`
    for each named pid file whose process lives: the daemon holds through a window in which a component restarted
    that pipetune did not restart (an operator loading a hand edit, a supervisor after a crash)."""

    def __init__(self, pid_files: dict[str, Path]) -> None:
        self.pid_files = pid_files

    def collect(self) -> Iterator[Metric]:
        cpu = CounterMetricFamily("pipetune_component_cpu_seconds", "CPU time used by a pipeline component",
                                  labels=["component"])
        started = GaugeMetricFamily("pipetune_component_start_time_seconds",
                                    "When a pipeline component's process started, epoch seconds", labels=["component"])
        for component, pid_file in self.pid_files.items():
            pid = read_pid(pid_file)
            if pid is None:
                continue
            seconds, start_s = cpu_seconds(pid), start_time_s(pid)
            if seconds is not None:
                cpu.add_metric([component], seconds)
            if start_s is not None:
                started.add_metric([component], start_s)
        yield cpu
        yield started


@dataclass(frozen=True)
class NodeCpu:
    """The node's busy CPU seconds since boot (every process's, and the kernel's) and the CPUs they count over."""

    busy_s: float
    cpus: int


def node_cpu(stat_text: str) -> NodeCpu:
    """`NodeCpu` from the text of /proc/stat."""
    lines = stat_text.splitlines()
    total = lines[0].split()[1:]
    return NodeCpu(busy_s=sum(int(total[i]) for i in _BUSY_COLUMNS if i < len(total)) / _TICKS_PER_S,
                   cpus=sum(1 for line in lines[1:] if line.startswith("cpu")))


class NodeCpuCollector(Collector):
    """`pipetune_node_cpu_busy_seconds_total` and `pipetune_node_cpus`: how much of its CPU the node used, whoever
    used it. The learner reads the busiest node's share as the capacity a window left spare (`models.headroom`).
    A node is the host or VM whose /proc this is: in a container with a CPU quota, still the host's figures."""

    def __init__(self, stat_file: Path = Path("/proc/stat")) -> None:
        self.stat_file = stat_file

    def collect(self) -> Iterator[Metric]:
        try:
            node = node_cpu(self.stat_file.read_text())
        except (OSError, ValueError, IndexError):
            return
        busy = CounterMetricFamily("pipetune_node_cpu_busy_seconds", "CPU time the node spent not idle")
        busy.add_metric([], node.busy_s)
        yield busy
        yield GaugeMetricFamily("pipetune_node_cpus", "CPUs the node's busy time is counted over", value=node.cpus)
