"""The verdict on one window: the one definition of feasibility every strategy and the daemon use.

A window is feasible when its output kept up with its input, its backlog did not grow beyond what the
policy tolerates, and its P95 stayed under the policy's ceiling. Both throughput rules allow for what
a pipeline that keeps up holds in flight (`Observation.shortfall_allowed`). The daemon judges each
window (it has the previous one, for the backlog trend) and tells the learner the verdict with it.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from models.observation import Observation
from models.policy import Policy


class BreachKind(StrEnum):
    """Which rule a window broke."""

    BEHIND = "behind"  # output fell behind input
    BACKLOG = "backlog"  # backlog grew faster than tolerated
    CEILING = "ceiling"  # P95 above the policy's ceiling


class Breach(BaseModel):
    """One broken rule: the window's figure, the limit it crossed (same unit) and a readable message."""

    model_config = ConfigDict(frozen=True)

    kind: BreachKind
    figure: float
    limit: float
    unit: str
    message: str

    @property
    def excess(self) -> float:
        """How far past its limit the figure went, relative to the limit (> 0)."""
        return (self.figure - self.limit) / max(abs(self.limit), 1e-9)


class Verdict(BaseModel):
    """Whether a window is feasible, and if not, every rule it broke."""

    model_config = ConfigDict(frozen=True)

    breaches: tuple[Breach, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.breaches

    @property
    def messages(self) -> list[str]:
        return [b.message for b in self.breaches]

    @property
    def excess(self) -> float:
        """Total relative excess over the limits: 0 for a feasible window (a graded constraint value)."""
        return sum(b.excess for b in self.breaches)


def judge(observation: Observation, policy: Policy, previous: Observation | None = None) -> Verdict:
    """The verdict on `observation` under `policy`; `previous` (the window before) enables the backlog rule."""
    found: list[Breach] = []
    min_ratio = policy.min_throughput_ratio
    duration_s = observation.duration_s
    allowed = observation.shortfall_allowed(min_ratio)
    shortfall = (observation.offered_eps - observation.throughput_eps) * duration_s
    if shortfall > allowed:
        found.append(Breach(kind=BreachKind.BEHIND, figure=shortfall, limit=allowed, unit="events", message=(
            f"output {observation.throughput_ratio:.1%} of input < {min_ratio:.0%}, "
            f"beyond the {observation.in_flight_events:.0f} events in flight")))
    if previous is not None and duration_s > 0:
        growth_eps = (observation.backlog_total - previous.backlog_total) / duration_s
        tolerated_eps = max(allowed / duration_s, 1.0 - min_ratio)
        if growth_eps > tolerated_eps:
            found.append(Breach(kind=BreachKind.BACKLOG, figure=growth_eps, limit=tolerated_eps, unit="ev/s",
                                message=f"backlog grew {growth_eps:.0f} ev/s > {tolerated_eps:.0f} ev/s tolerated"))
    ceiling = policy.p95_ceiling_s
    if ceiling is not None and observation.p95_s > ceiling:
        found.append(Breach(kind=BreachKind.CEILING, figure=observation.p95_s, limit=ceiling, unit="s",
                            message=f"P95 {observation.p95_s:.3f}s > ceiling {ceiling:g}s"))
    return Verdict(breaches=tuple(found))
