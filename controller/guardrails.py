"""Guardrails: checks on one window that act before any learning does."""

from __future__ import annotations

from models.observation import Observation
from models.policy import Policy


def breaches(observation: Observation, policy: Policy, previous: Observation | None = None) -> list[str]:
    """Why this window must be rolled back (empty when it is fine).

    Output falling behind input, backlog growing faster than the policy's tolerance allows, and P95
    above the policy's ceiling each count on their own.
    """
    found = []
    ratio = observation.throughput_ratio
    if ratio < policy.min_throughput_ratio:
        found.append(f"output {ratio:.1%} of input < {policy.min_throughput_ratio:.0%}")
    if previous is not None and observation.duration_s > 0:
        growth_eps = (observation.backlog_total - previous.backlog_total) / observation.duration_s
        tolerated_eps = (1.0 - policy.min_throughput_ratio) * max(observation.offered_eps, 1.0)
        if growth_eps > tolerated_eps:
            found.append(f"backlog grew {growth_eps:.0f} ev/s > {tolerated_eps:.0f} ev/s tolerated")
    if policy.p95_ceiling_s is not None and observation.p95_s > policy.p95_ceiling_s:
        found.append(f"P95 {observation.p95_s:.3f}s > ceiling {policy.p95_ceiling_s:g}s")
    return found
