"""What each managed component may spend in CPU: the policy's budget, read against what the starting config used.

An operator lets a tuner onto a production node only if it cannot take the application's CPU to shave latency.
The protective default (`CpuBudget()`): each component on the node may use the CPU per event the config it ran
before tuning used (`CpuReference`, its first window that kept up), `over_start` more, plus `extra_cores` of a
core for costs no load explains (a scan of the log directory, an idle poll). The per-event figure follows the
load, so a busier hour is not a breach; the extra cores do not, so a quiet one is not either. `cores` caps a
component outright. `CpuLimits` says the limits at a load; a window over its limit breaks the verdict's BUDGET
rule (`models.verdict`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, field_validator

from models.observation import Observation

# The parts whose CPU a budget limits: the shipper's components on the operator's node (`Observation.cpu_cores`'
# names). Brokers and sinks run elsewhere and are shared; what a node's config costs them is its request rate.
BUDGETED_PARTS = ("filebeat", "logstash")


class CpuBudget(BaseModel):
    """What each component on the node may spend in CPU: the starting config's CPU per event, `over_start` more,
    plus `extra_cores`; `cores` caps a component outright."""

    model_config = ConfigDict(extra="forbid")

    over_start: float = Field(0.25, ge=0.0, description="share of the starting config's CPU per event allowed on top")
    extra_cores: float = Field(0.05, ge=0.0, description="cores allowed on top whatever the load (a scan, a poll)")
    cores: dict[str, PositiveFloat] = Field(default_factory=dict, description="component -> its cap, cores")

    @field_validator("cores")
    @classmethod
    def _known_parts(cls, cores: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(cores) - set(BUDGETED_PARTS))
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: a budget caps only {', '.join(BUDGETED_PARTS)}")
        return cores


@dataclass(frozen=True)
class CpuReference:
    """What the config before tuning used: each budgeted part's CPU (cores) in a window at `offered_eps`."""

    offered_eps: float
    cores: Mapping[str, float]

    @classmethod
    def of(cls, observation: Observation) -> CpuReference | None:
        """The reference a window gives (None: it measured no budgeted part's CPU, or had no load)."""
        cores = budgeted(observation.cpu_cores)
        return cls(observation.offered_eps, cores) if cores and observation.offered_eps > 0 else None


def budgeted(cpu_cores: Mapping[str, float]) -> dict[str, float]:
    """The budgeted parts' CPU of a reading of every part's (`Observation.cpu_cores`)."""
    return {part: cores for part, cores in cpu_cores.items() if part in BUDGETED_PARTS}


def within_limits(cpu_cores: Mapping[str, float], limits_cores: Mapping[str, float]) -> bool:
    """Whether every limited part used no more than its limit (a part not measured used nothing)."""
    return all(cpu_cores.get(part, 0.0) <= limit for part, limit in limits_cores.items())


@dataclass(frozen=True)
class CpuLimits:
    """The policy's CPU budget as the load sets it: the verdict judges a window at its own load, and a learner
    checks a config at the loads the pipeline has shown as well (a config within budget at one load may not be at
    another: a poll costs the same at any load, a smaller batch more per event)."""

    budget: CpuBudget | None = None
    reference: CpuReference | None = None

    def at(self, offered_eps: float) -> dict[str, float]:
        """Each budgeted part's CPU limit (cores) at `offered_eps`: the reference's CPU per event × the load ×
        (1 + `over_start`) + `extra_cores`, and never above the part's cap in `cores`. Empty: no budget."""
        if self.budget is None:
            return {}
        limits = dict(self.budget.cores)
        if self.reference is not None:
            for part, cores in self.reference.cores.items():
                per_event = cores / self.reference.offered_eps
                limit = per_event * offered_eps * (1.0 + self.budget.over_start) + self.budget.extra_cores
                limits[part] = min(limit, limits.get(part, limit))
        return limits
