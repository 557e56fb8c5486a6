"""Guardrails: checks on one window that act before any learning does."""

from __future__ import annotations

from models.observation import Observation
from models.policy import Policy


def output_behind(observation: Observation, min_ratio: float) -> str | None:
    """Why the window's output fell behind its input, or None when it kept up."""
    if observation.keeps_up(min_ratio):
        return None
    return (f"output {observation.throughput_ratio:.1%} of input < {min_ratio:.0%}, "
            f"beyond the {observation.in_flight_events:.0f} events in flight")


def breaches(observation: Observation, policy: Policy, previous: Observation | None = None) -> list[str]:
    """Why this window must be rolled back (empty when it is fine).

    Output falling behind input, backlog growing faster than the policy's tolerance allows, and P95
    above the policy's ceiling each count on their own. Both throughput checks allow for what a
    pipeline that keeps up holds in flight (`Observation.shortfall_allowed`).
    """
    found = []
    behind = output_behind(observation, policy.min_throughput_ratio)
    if behind:
        found.append(behind)
    if previous is not None and observation.duration_s > 0:
        growth_eps = (observation.backlog_total - previous.backlog_total) / observation.duration_s
        tolerated_eps = max(observation.shortfall_allowed(policy.min_throughput_ratio) / observation.duration_s,
                            1.0 - policy.min_throughput_ratio)
        if growth_eps > tolerated_eps:
            found.append(f"backlog grew {growth_eps:.0f} ev/s > {tolerated_eps:.0f} ev/s tolerated")
    if policy.p95_ceiling_s is not None and observation.p95_s > policy.p95_ceiling_s:
        found.append(f"P95 {observation.p95_s:.3f}s > ceiling {policy.p95_ceiling_s:g}s")
    return found
