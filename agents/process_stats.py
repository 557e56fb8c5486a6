"""CPU time of the pipeline's other processes on this node, read from /proc at each scrape.

Each process is named by a pid file (a bare pid, or JSON with a "pid" field, as the testbed writes
them); a restarted component writes a new one, so the pid is read again at every scrape.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process, None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # utime and stime are fields 14 and 15 of stat, 12 and 13 after the command name.
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def read_pid(pid_file: Path) -> int | None:
    try:
        text = pid_file.read_text().strip()
        return int(json.loads(text)["pid"]) if text.startswith("{") else int(text)
    except (OSError, ValueError, KeyError, TypeError):
        return None


class ProcessCpuCollector(Collector):
    """`pipetune_component_cpu_seconds_total{component}` for each named pid file whose process lives."""

    def __init__(self, pid_files: dict[str, Path]) -> None:
        self.pid_files = pid_files

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("pipetune_component_cpu_seconds", "CPU time used by a pipeline component",
                                     labels=["component"])
        for component, pid_file in self.pid_files.items():
            pid = read_pid(pid_file)
            seconds = cpu_seconds(pid) if pid is not None else None
            if seconds is not None:
                family.add_metric([component], seconds)
        yield family
