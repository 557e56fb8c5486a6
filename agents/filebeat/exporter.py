"""Filebeat's HTTP stats (JSON, which Prometheus cannot scrape) re-exported as Prometheus metrics by the agent."""

from __future__ import annotations

import json
import urllib.request
from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


def _get(tree: dict, path: str) -> float:
    node: object = tree
    for key in path.split("."):
        node = node.get(key, {}) if isinstance(node, dict) else {}
    return float(node) if isinstance(node, (int, float)) else 0.0


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
