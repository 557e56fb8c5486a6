"""`GET /metrics` for a standalone API: the daemon's figures, derived from its state directory at each scrape.

Inside the daemon's process the API serves the daemon's own `DaemonMetrics.registry` instead.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from controller.state import COST_GAUGES, CPU_GAUGE, StateStore


class StateCollector:
    """Decision and rollback counters from decisions.jsonl; incumbent and last-window gauges (the window's cost
    too); steering."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        decisions = self.store.decisions()
        by_action = CounterMetricFamily("pipetune_decisions", "Decisions taken, by action", labels=["action"])
        for action, count in sorted(Counter(d.get("action", "") for d in decisions).items()):
            by_action.add_metric([action], count)
        yield by_action
        yield CounterMetricFamily("pipetune_rollbacks", "Rollbacks to the incumbent",
                                  value=sum(d.get("action") == "rollback" for d in decisions))
        incumbent = self.store.load_incumbent()
        if incumbent is not None:
            yield GaugeMetricFamily("pipetune_incumbent_p95_seconds", "P95 the incumbent measured",
                                    value=incumbent.p95_s)
        if decisions:
            observed = decisions[-1].get("observed", {})
            for name, key, help_text in (("pipetune_window_p95_seconds", "p95_s", "P95 of the last window"),
                                         ("pipetune_throughput_ratio", "throughput_ratio",
                                          "Output over offered load in the last window"), *COST_GAUGES):
                value = observed.get(key)
                if isinstance(value, (int, float)) and math.isfinite(value):
                    yield GaugeMetricFamily(name, help_text, value=value)
            cpu = GaugeMetricFamily(*CPU_GAUGE, labels=["part"])
            for part, cores in sorted((observed.get("cpu_cores") or {}).items()):
                cpu.add_metric([part], cores)
            yield cpu
        yield GaugeMetricFamily("pipetune_paused", "1 while a person has paused the tuner", value=int(self.store.paused()))
        yield GaugeMetricFamily("pipetune_active_overrides", "Overrides not yet expired",
                                value=len(self.store.overrides()))


def state_registry(store: StateStore) -> CollectorRegistry:
    """A registry whose only collector reads `store`."""
    registry = CollectorRegistry()
    registry.register(StateCollector(store))
    return registry
