"""Guardrails: checks on one window that act before any learning does."""

from __future__ import annotations

import math

from models.observation import Observation
from models.policy import Policy


def output_behind(observation: Observation, min_ratio: float) -> str | None:
    """Why the window's output fell behind its input, or None when it kept up.

    A pipeline that keeps up still holds about rate × median latency in flight, and a window's end can
    cut that much out of its output (Filebeat ships in flush-sized batches): only a deficit beyond that
    and beyond the tolerated share is falling behind.
    """
    offered = observation.offered_eps * observation.duration_s
    deficit = offered - observation.throughput_eps * observation.duration_s
    in_flight = observation.offered_eps * observation.p50_s if math.isfinite(observation.p50_s) else 0.0
    if deficit <= (1.0 - min_ratio) * offered + in_flight:
        return None
    return (f"output {observation.throughput_ratio:.1%} of input < {min_ratio:.0%} "
            f"beyond the {in_flight:.0f} events in flight")


def breaches(observation: Observation, policy: Policy, previous: Observation | None = None) -> list[str]:
    """Why this window must be rolled back (empty when it is fine).

    Output falling behind input, backlog growing faster than the policy's tolerance allows, and P95
    above the policy's ceiling each count on their own.
    """
    found = []
    behind = output_behind(observation, policy.min_throughput_ratio)
    if behind:
        found.append(behind)
    if previous is not None and observation.duration_s > 0:
        growth_eps = (observation.backlog_total - previous.backlog_total) / observation.duration_s
        tolerated_eps = (1.0 - policy.min_throughput_ratio) * max(observation.offered_eps, 1.0)
        if growth_eps > tolerated_eps:
            found.append(f"backlog grew {growth_eps:.0f} ev/s > {tolerated_eps:.0f} ev/s tolerated")
    if policy.p95_ceiling_s is not None and observation.p95_s > policy.p95_ceiling_s:
        found.append(f"P95 {observation.p95_s:.3f}s > ceiling {policy.p95_ceiling_s:g}s")
    return found
