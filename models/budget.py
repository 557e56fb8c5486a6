"""What a config may cost the operator: each component's CPU on the node, and the Produce requests it sends Kafka.

An operator lets a tuner onto a production node only if it cannot take the application's CPU to shave latency.
The protective default (`CpuBudget()`): each component on the node may use the CPU per event the config it ran
before tuning used (`CostReference`, its first window that kept up), `over_start` more, plus `extra_cores` of a
core for costs no load explains (a scan of the log directory, an idle poll). The per-event figure follows the
load, so a busier hour is not a breach; the extra cores do not, so a quiet one is not either. `cores` caps a
component outright.

A shared Kafka cluster pays for every request a node's shipper sends: a config that flushes every event sends a
Produce request per one or two events where the defaults sent one per twenty. `RequestBudget` limits them the
same way (the start's requests per event, `over_start` more, plus `extra_per_s`; `per_s` caps them); it is off
unless the policy sets it, since what a cluster can take is the operator's to say.

`BudgetLimits` says each limit at a load, by cost name (`COST_UNITS`); a window over a limit by more than the
reading's noise (`CostNoise`) breaks the verdict's BUDGET rule (`models.verdict`). A window's CPU reading varies
with the config held (the twin's by 2-3 % a 30-s window; live, on a busy 2-core machine, by 15-30 %), and the
reference is such readings too: judged reading by reading against one first window, the defaults themselves read
over their own CPU in 21 of 30 windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, field_validator

from models.observation import Observation

# The parts whose CPU a budget limits: the shipper's components on the operator's node (`Observation.cpu_cores`'
# names). Brokers and sinks run elsewhere and are shared; what a node's config costs them is its request rate.
BUDGETED_PARTS = ("filebeat", "logstash")
REQUESTS = "kafka_requests"  # the cost name of the node's Produce requests into Kafka
COST_UNITS = {"filebeat": "cores", "logstash": "cores", REQUESTS: "req/s"}
# A window's spread of cost per event (log sd) assumed before any is measured: twice the twin's, a quarter of the
# live testbed's under load (see the module docstring); weighed as one pair of windows, so that a few measured
# pairs outweigh it. Weighed as two at 10 %, it let a config 12-16 % over its budget through for 12 windows
# of the main command's burst, where the twin's readings vary by 2-3 %.
NOISE_PRIOR_SD = 0.05
NOISE_PRIOR_PAIRS = 1.0
# A reading is over its budget when it is this many of its sds above the limit: a config exactly at the limit is
# then flagged in about one window in 740 (one-sided normal tail), a config 2x over it even at the prior's spread
BREACH_SDS = 3.0
ROUNDING = 1e-9  # a float's relative rounding, many times over


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


class RequestBudget(BaseModel):
    """The Produce requests per second the node may send Kafka: the starting config's requests per event,
    `over_start` more, plus `extra_per_s`; `per_s` caps them outright."""

    model_config = ConfigDict(extra="forbid")

    over_start: float = Field(1.0, ge=0.0, description="share of the starting config's requests per event allowed "
                                                      "on top")
    extra_per_s: float = Field(10.0, ge=0.0, description="requests per second allowed on top whatever the load")
    per_s: PositiveFloat | None = Field(None, description="the cap, requests per second (null: none)")


@dataclass(frozen=True)
class CostReference:
    """What the config before tuning cost at `offered_eps`: each budgeted cost by name (`COST_UNITS`), the mean
    per event of the `windows` windows of it measured, said at their mean load."""

    offered_eps: float
    costs: Mapping[str, float]
    windows: int = 1

    @classmethod
    def of(cls, observation: Observation) -> CostReference | None:
        """The reference a window gives (None: it measured no budgeted cost, or had no load)."""
        costs = budgeted_costs(observation)
        return cls(observation.offered_eps, costs) if costs and observation.offered_eps > 0 else None

    def with_window(self, observation: Observation) -> CostReference:
        """The reference with one more window of the same config (a cost that window did not measure keeps its
        mean per event)."""
        more = per_event(observation)
        if not more:
            return self
        n = self.windows
        offered_eps = (self.offered_eps * n + observation.offered_eps) / (n + 1)
        mean = {name: (cost / self.offered_eps * n + more.get(name, cost / self.offered_eps)) / (n + 1)
                for name, cost in self.costs.items()}
        return CostReference(offered_eps, {name: e * offered_eps for name, e in mean.items()}, n + 1)


def per_event(observation: Observation) -> dict[str, float]:
    """Each budgeted cost a window measured, per event offered (empty: no load)."""
    if observation.offered_eps <= 0:
        return {}
    return {name: cost / observation.offered_eps for name, cost in budgeted_costs(observation).items() if cost > 0}


@dataclass(frozen=True)
class CostNoise:
    """How much a window's reading of each cost varies while one config is held, by cost name.

    Each pair of consecutive windows of one config gives the squared log ratio of their costs per event, whose
    mean is twice a window's variance; pooled over pairs and shrunk toward the prior (`NOISE_PRIOR_SD`, weighed as
    `NOISE_PRIOR_PAIRS` pairs), as a variance is estimated under a conjugate prior. A load that moves between the
    two windows only widens it: the allowance errs toward not flagging."""

    sum_sq_log: Mapping[str, float] = field(default_factory=dict)
    pairs: Mapping[str, int] = field(default_factory=dict)

    def with_pair(self, before: Mapping[str, float], after: Mapping[str, float]) -> CostNoise:
        """Told two consecutive windows' costs per event (`per_event`) of one config."""
        sum_sq, pairs = dict(self.sum_sq_log), dict(self.pairs)
        for name in before.keys() & after.keys():
            sum_sq[name] = sum_sq.get(name, 0.0) + math.log(after[name] / before[name]) ** 2
            pairs[name] = pairs.get(name, 0) + 1
        return CostNoise(sum_sq, pairs)

    def sd(self, name: str) -> float:
        """A window's log sd of the cost `name`."""
        prior = NOISE_PRIOR_PAIRS * NOISE_PRIOR_SD**2
        return math.sqrt((prior + self.sum_sq_log.get(name, 0.0) / 2) / (NOISE_PRIOR_PAIRS + self.pairs.get(name, 0)))

    def allowances(self, limits: Mapping[str, float], reference: CostReference | None) -> dict[str, float]:
        """By how much, as a share of its limit, each limited cost's reading may exceed it before it is a breach:
        `BREACH_SDS` sds of a reading's difference from the limit, which is the mean of the reference's windows
        (an absolute cap, which has no error of its own, is given the same allowance)."""
        windows = reference.windows if reference is not None else 1
        return {name: math.expm1(BREACH_SDS * self.sd(name) * math.sqrt(1.0 + 1.0 / windows)) for name in limits}


def budgeted(cpu_cores: Mapping[str, float]) -> dict[str, float]:
    """The budgeted parts' CPU of a reading of every part's (`Observation.cpu_cores`)."""
    return {part: cores for part, cores in cpu_cores.items() if part in BUDGETED_PARTS}


def budgeted_costs(observation: Observation) -> dict[str, float]:
    """What a window measured of each cost a budget may limit: the budgeted parts' CPU, the Produce requests."""
    return costs_of(observation.cpu_cores, observation.produce_requests_per_s)


def costs_of(cpu_cores: Mapping[str, float], produce_requests_per_s: float | None) -> dict[str, float]:
    """`budgeted_costs` of a window's figures as a decision records them."""
    costs = budgeted(cpu_cores)
    if produce_requests_per_s is not None:
        costs[REQUESTS] = produce_requests_per_s
    return costs


def within_limits(costs: Mapping[str, float], limits: Mapping[str, float]) -> bool:
    """Whether every limited cost was at most its limit (a cost not measured was nothing). A limit is a cost scaled
    per event and back: at the reference's own load it may round a hair below the cost it was made of."""
    return all(costs.get(name, 0.0) <= limit * (1.0 + ROUNDING) for name, limit in limits.items())


@dataclass(frozen=True)
class BudgetLimits:
    """The policy's budgets as the load sets them: the verdict judges a window at its own load, and a learner
    checks a config at the loads the pipeline has shown as well (a config within budget at one load may not be at
    another: a poll costs the same at any load, a smaller batch more per event)."""

    cpu: CpuBudget | None = None
    requests: RequestBudget | None = None
    reference: CostReference | None = None

    def at(self, offered_eps: float) -> dict[str, float]:
        """Each limited cost's limit at `offered_eps`, by name: the reference's cost per event × the load ×
        (1 + `over_start`) + the allowance on top, and never above its cap. Empty: no budget."""
        limits: dict[str, float] = {}
        if self.cpu is not None:
            limits |= self._relative(BUDGETED_PARTS, self.cpu.over_start, self.cpu.extra_cores, offered_eps)
            for part, cap in self.cpu.cores.items():
                limits[part] = min(cap, limits.get(part, cap))
        if self.requests is not None:
            limits |= self._relative((REQUESTS,), self.requests.over_start, self.requests.extra_per_s, offered_eps)
            cap = self.requests.per_s
            if cap is not None:
                limits[REQUESTS] = min(cap, limits.get(REQUESTS, cap))
        return limits

    def _relative(self, names: tuple[str, ...], over_start: float, extra: float,
                  offered_eps: float) -> dict[str, float]:
        if self.reference is None:
            return {}
        return {name: cost / self.reference.offered_eps * offered_eps * (1.0 + over_start) + extra
                for name, cost in self.reference.costs.items() if name in names}
