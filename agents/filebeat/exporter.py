"""Filebeat's HTTP stats (JSON, which Prometheus cannot scrape) re-exported as Prometheus metrics by the
agent, and the acknowledged read offset of each harvested file, from Filebeat's registry."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


def _get(tree: dict, path: str) -> float:
    node: object = tree
    for key in path.split("."):
        node = node.get(key, {}) if isinstance(node, dict) else {}
    return float(node) if isinstance(node, (int, float)) else 0.0


# A registry key ends with the file's identity: `filestream::<id>::native::<inode>-<device>` (filestream),
# `filebeat::logs::native::<inode>-<device>` (log input).
_NATIVE_KEY = re.compile(r"native::(\d+)-(\d+)$")


def registry_offsets(data_dir: Path, tail_bytes: int = 1 << 16) -> dict[tuple[int, int], int]:
    """Acknowledged read offset per file identity (device, inode), from Filebeat's registry: its last
    checkpoint, then the newest entries of its op log (only the log's tail is read: it grows until the
    next checkpoint). Filebeat keys a file by its identity, so a renamed file keeps its offset."""
    home = data_dir / "registry" / "filebeat"
    entries: list[tuple[object, object]] = []
    try:
        checkpoint = home / (home / "active.dat").read_text().strip().rsplit("/", 1)[-1]
        entries += [(entry.get("_key"), entry) for entry in json.loads(checkpoint.read_text())
                    if isinstance(entry, dict)]
    except (OSError, ValueError):
        pass  # no checkpoint yet
    entries += [(entry.get("k"), entry.get("v")) for entry in _tail_entries(home / "log.json", tail_bytes)
                if isinstance(entry, dict)]
    offsets: dict[tuple[int, int], int] = {}
    for key, value in entries:
        found = _NATIVE_KEY.search(key) if isinstance(key, str) else None
        if found is None or not isinstance(value, dict):
            continue
        # filestream keeps it in its cursor, the log input at the top of its state.
        offset = (value.get("cursor") or {}).get("offset", value.get("offset"))
        if isinstance(offset, int):
            offsets[(int(found.group(2)), int(found.group(1)))] = offset
    return offsets


def _tail_entries(path: Path, tail_bytes: int) -> list[dict]:
    try:
        with open(path, "rb") as log:
            start = max(path.stat().st_size - tail_bytes, 0)
            log.seek(start)
            lines = log.read().splitlines()[1 if start else 0:]  # a line cut by the seek is skipped
    except OSError:
        return []
    entries = []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue  # a line being written
    return entries


class FilebeatCollector(Collector):
    """Collected at each scrape: Filebeat's output counters and its queue."""

    def __init__(self, stats_url: str) -> None:
        self.stats_url = stats_url

    def collect(self) -> Iterator[Metric]:
        try:
            with urllib.request.urlopen(self.stats_url, timeout=1.0) as response:
                stats = json.load(response)
        except (OSError, ValueError):
            yield GaugeMetricFamily("pipetune_filebeat_up", "Filebeat's stats endpoint answered", value=0)
            return
        yield GaugeMetricFamily("pipetune_filebeat_up", "Filebeat's stats endpoint answered", value=1)
        for name, path, doc in (
            ("events_acked", "libbeat.output.events.acked", "Events the output acknowledged"),
            ("output_batches", "libbeat.output.events.batches", "Batches (requests) the output sent"),
        ):
            yield CounterMetricFamily(f"pipetune_filebeat_{name}", doc, value=_get(stats, path))
        yield GaugeMetricFamily("pipetune_filebeat_queue_events", "Events in Filebeat's pipeline not yet acknowledged",
                                value=_get(stats, "libbeat.pipeline.events.active"))
