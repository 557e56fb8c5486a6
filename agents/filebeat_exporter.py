"""Filebeat's HTTP stats (JSON, which Prometheus cannot scrape) re-exported as Prometheus metrics,
with the replayed log's backlog: bytes written but not yet acknowledged by the output."""

from __future__ import annotations

import json
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


def registry_offsets(data_dir: Path, tail_bytes: int = 1 << 16) -> dict[str, int]:
    """Acknowledged read offset per source file, from Filebeat's registry: its last checkpoint, then the
    newest entries of its op log (only the log's tail is read: it grows until the next checkpoint)."""
    home = data_dir / "registry" / "filebeat"
    entries: list[dict] = []
    try:
        checkpoint = home / (home / "active.dat").read_text().strip().rsplit("/", 1)[-1]
        entries += json.loads(checkpoint.read_text())
    except (OSError, ValueError):
        pass  # no checkpoint yet
    entries += _tail_entries(home / "log.json", tail_bytes)
    offsets: dict[str, int] = {}
    for entry in entries:
        value = entry.get("v", entry) if isinstance(entry, dict) else {}
        source = (value.get("meta") or {}).get("source")
        offset = (value.get("cursor") or {}).get("offset")
        if isinstance(source, str) and isinstance(offset, int):
            offsets[source] = offset
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
    """Collected at each scrape: Filebeat's counters and the unshipped bytes of the replayed log."""

    def __init__(self, stats_url: str, log_path: Path, data_dir: Path) -> None:
        self.stats_url = stats_url
        self.log_path = log_path
        self.data_dir = data_dir

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
        yield GaugeMetricFamily("pipetune_log_unshipped_bytes", "Bytes of the replayed log not yet acknowledged",
                                value=self._unshipped_bytes())

    def _unshipped_bytes(self) -> float:
        try:
            size = self.log_path.stat().st_size
        except OSError:
            return 0.0
        offset = registry_offsets(self.data_dir).get(str(self.log_path), 0)
        return float(max(size - offset, 0))
