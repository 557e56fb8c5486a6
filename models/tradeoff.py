"""P95 against CPU: the configs a run measured, the front of the best of them, and the budget each needs.

A low-latency config buys its latency with CPU (Filebeat globbing its paths and polling its files more often,
smaller batches, more requests into Kafka). Each config measured is one `Point`: its median P95 and the
median CPU the pipeline's own parts used over its windows, per event and shown at one load (a run's load
moves, and CPU moves with it: two configs are compared at the same rate). The front holds the configs no
other one beats on both: nothing measured is at least as fast for no more CPU. The budget a point needs is
its own CPU.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Mapping

from models.observation import Observation
from models.space import Config
from models.verdict import Verdict


# The static configs an operator would pick instead of tuning: the defaults, Elastic's Filebeat output presets,
# the paper's Hybrid (models/presets.py)
STATIC_CHOICES = ("defaults", "balanced", "throughput", "scale", "latency", "hybrid")


@dataclass(frozen=True)
class Window:
    """One measured window of a config: its P95, the pipeline's CPU (`Observation.pipeline_cpu_cores`) at the
    load it was offered, and whether it kept up (its verdict without a breach)."""

    config: Config
    p95_s: float
    cpu_cores: float
    offered_eps: float
    kept_up: bool


@dataclass(frozen=True)
class Point:
    """One config as the trade-off shows it: median P95 and CPU over its windows."""

    label: str  # a preset's name, or "config N" in the order the run first measured it
    config: Config
    p95_s: float
    cpu_cores: float  # the pipeline's CPU at the trade-off's load, cores: the budget this config needs there
    windows: int
    kept_up: bool  # most windows of it kept up: only such a config can be on the front

    def cpu_over(self, other: Point) -> float:
        """The CPU this point needs beyond `other`'s, cores (negative: less)."""
        return self.cpu_cores - other.cpu_cores


def points(windows: Iterable[Window], presets: Mapping[str, Config], rate_eps: float) -> list[Point]:
    """One point per config measured, its CPU per event as cores at `rate_eps`, labelled with its preset's name
    where it is one (the first such name), in the order the configs were first measured; windows without load,
    a P95 or a CPU figure are left out."""
    by_config: dict[Config, list[Window]] = {}
    for window in windows:
        if window.offered_eps > 0 and math.isfinite(window.p95_s) and math.isfinite(window.cpu_cores):
            by_config.setdefault(window.config, []).append(window)
    named = {config: name for name, config in reversed(list(presets.items()))}
    shown, unnamed = [], 0
    for config, measured in by_config.items():
        if config not in named:
            unnamed += 1
        shown.append(Point(named.get(config, f"config {unnamed}"), config,
                           statistics.median(w.p95_s for w in measured),
                           statistics.median(w.cpu_cores / w.offered_eps for w in measured) * rate_eps,
                           len(measured), 2 * sum(w.kept_up for w in measured) > len(measured)))
    return shown


def front(measured: Iterable[Point]) -> list[Point]:
    """The points that kept up and that no other such point beats on both P95 and CPU (at least as good on
    both, better on one), cheapest first."""
    able = [p for p in measured if p.kept_up]
    beaten = {id(p) for p in able for q in able
              if q.p95_s <= p.p95_s and q.cpu_cores <= p.cpu_cores and (q.p95_s, q.cpu_cores) != (p.p95_s, p.cpu_cores)}
    return sorted((p for p in able if id(p) not in beaten), key=lambda p: (p.cpu_cores, p.p95_s))


def best_within(measured: Iterable[Point], budget_cores: float) -> Point | None:
    """The fastest point that kept up within `budget_cores` of CPU; None when none did."""
    able = [p for p in measured if p.kept_up and p.cpu_cores <= budget_cores]
    return min(able, key=lambda p: p.p95_s, default=None)


@dataclass(frozen=True)
class Tradeoff:
    """A run's trade-off: the load it is shown at, every config's point, and the front."""

    rate_eps: float
    points: list[Point]
    front: list[Point]


def of_run(measured: Iterable[tuple[Config, float, Observation, Verdict | None]], presets: Mapping[str, Config],
           rate_eps: float | None = None) -> Tradeoff | None:
    """The trade-off of a run's measured windows (config, offered load, observation, verdict: as a state
    directory keeps them), at `rate_eps` or else the run's median offered load; None when no window had load."""
    loaded = [(config, offered, obs, verdict) for config, offered, obs, verdict in measured if obs.events_in > 0]
    if not loaded:
        return None
    rate = rate_eps if rate_eps is not None else statistics.median(offered for _, offered, _, _ in loaded)
    shown = points((Window(config, obs.p95_s, obs.pipeline_cpu_cores, offered, verdict is None or verdict.ok)
                    for config, offered, obs, verdict in loaded), presets, rate)
    return Tradeoff(rate, shown, front(shown))
