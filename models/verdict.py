"""The verdict on one window: the one definition of feasibility every strategy and the daemon use.

A window is feasible when its output kept up with its input, its backlog did not grow beyond what the
policy tolerates, its P95 stayed under the policy's ceiling, and each budgeted cost (a component's CPU, the Produce
requests) within its budget, or above it by no more than the reading's noise (`models.budget`: the daemon gives
the limits at the window's load and the allowances). Both throughput rules allow for what the window's config holds
in its buffers (`buffered_events`): a pipeline that keeps up still holds a
flush batch and the output's batches in flight when a window ends. The allowance comes from the config,
not from the window's latency, which grows exactly when a config falls behind. The daemon judges each
window (it has the previous one, for the backlog trend) and tells the learner the verdict with it. The
verdict also says whether the window shipped a queue left from before its config (`drain`): then its
figures are that queue's, and where the queue lasted, the daemon holds.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Mapping

import numpy as np

from pydantic import BaseModel, ConfigDict

from models.budget import COST_UNITS, budgeted_costs
from models.components import COMPONENTS
from models.observation import Observation
from models.policy import Policy
from models.space import Config


class BreachKind(StrEnum):
    """Which rule a window broke."""

    BEHIND = "behind"  # output fell behind input
    BACKLOG = "backlog"  # backlog grew faster than tolerated
    CEILING = "ceiling"  # P95 above the policy's ceiling
    BUDGET = "budget"  # a running cost above its budget: a component's CPU, or Kafka's Produce requests

    @property
    def throughput(self) -> bool:
        """Whether the rule is about keeping up with the load (the others price what keeping up cost)."""
        return self in (BreachKind.BEHIND, BreachKind.BACKLOG)


class Drain(StrEnum):
    """Whether a window shipped a queue left from before its config (a rolled-back config's, a restart's pause)."""

    NONE = "none"  # its figures are its config's
    SHORT = "short"  # it shipped such a queue quickly: its P95 and ratio are the queue's; the next window is clean
    LONG = "long"  # the queue lasted: it set the P95 and may still be there when the next window starts


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
    drain: Drain = Drain.NONE  # whether it kept up while shipping a queue left from before its config

    @property
    def ok(self) -> bool:
        return not self.breaches

    @property
    def messages(self) -> list[str]:
        return [b.message for b in self.breaches]

    @property
    def behind(self) -> bool:
        """Whether it broke a throughput rule (output behind input, a growing backlog), not only the P95 ceiling or
        a CPU budget."""
        return any(b.kind.throughput for b in self.breaches)

    @property
    def own_load(self) -> bool:
        """Whether it shipped its own load: kept up, and shipped no queue left from before. Only such a window says
        what its config costs; one behind or draining runs its parts flat out on a queue, whatever the config."""
        return not self.behind and self.drain is Drain.NONE

    @property
    def over_budget(self) -> bool:
        """Whether a component's CPU went over its budget."""
        return any(b.kind is BreachKind.BUDGET for b in self.breaches)

    @property
    def excess(self) -> float:
        """Total relative excess over the limits: 0 for a feasible window (a graded constraint value)."""
        return sum(b.excess for b in self.breaches)


# A window's P95 beyond this many times its median is a tail apart from its body (a config's own waits, uniform or
# exponential, stay within 4.3×): the queue it started with delayed a few % of its events, its config the rest.
QUEUE_TAIL_RATIO = 5.0


def buffered_events(config: Config, rate_eps: float) -> float:
    """Events `config` holds back at `rate_eps` while keeping up: what each component buffers (`Component.buffered`:
    Filebeat's flush batch being gathered and its output's batches in flight)."""
    return sum(component.buffered(config, rate_eps) for component in COMPONENTS if component.buffered is not None)


def _shortfall_events(observation: Observation) -> float:
    """Events the window's output fell short of its input (negative: it shipped more than came in)."""
    return (observation.offered_eps - observation.throughput_eps) * observation.duration_s


def _held_events(observation: Observation, config: Config | None) -> float:
    """What the window's end may cut out of the output of a pipeline that keeps up: what `config` holds in its
    buffers (None: unknown, nothing excused) and what a micro-batch sink holds (`Observation.sink_held_events`)."""
    held = buffered_events(config, observation.offered_eps) if config is not None else 0.0
    return held + observation.sink_held_events


def _allowed_shortfall_events(observation: Observation, policy: Policy, config: Config) -> float:
    """The shortfall a window that keeps up may show (`Observation.shortfall_allowed`), with what it holds
    excused (`_held_events`)."""
    return observation.shortfall_allowed(policy.min_throughput_ratio, _held_events(observation, config))


def drain(observation: Observation, policy: Policy, config: Config, settled_events: float | None = None) -> Drain:
    """Whether, and how long, the window shipped a queue left from before it rather than `config`'s own load.

    Long: it shipped more than its buffers explain while holding more than what the pipeline settles at (what it
    held after its last window of its own load, `settled_events`, or what `config` buffers), by more than the
    policy's share of the window's input (the median's worth of input where the window's tail stands apart from its
    median), for more than that share of the window: near capacity a config with a few % to spare drains a
    rollback's queue for minutes, or a restart's for most of a window, and the events queued behind it, not the
    config, set the P95. Short: it shipped more than came in by more than a pipeline that keeps up can (the mirror
    of the BEHIND rule, with the same allowance).
    """
    surplus = -_shortfall_events(observation)
    share = 1.0 - policy.min_throughput_ratio
    tolerated = share * observation.offered_eps * observation.duration_s
    buffered = _held_events(observation, config)
    if surplus <= min(buffered, tolerated):
        return Drain.NONE
    if observation.p95_s > QUEUE_TAIL_RATIO * observation.p50_s:
        # the tail stands apart from the median: a queue's, which delays events by more than the median's worth
        tolerated = min(tolerated, observation.offered_eps * observation.p50_s)
    if _share_beyond(observation, max(buffered, settled_events or 0.0) + tolerated) > share:
        return Drain.LONG
    if surplus > _allowed_shortfall_events(observation, policy, config):
        return Drain.SHORT
    return Drain.NONE


def _share_beyond(observation: Observation, limit_events: float) -> float:
    """The share of the window before the backlog it began with fell to `limit_events`: its per-second input and
    output (`series`) carried forward from the backlog at its start, or without them a steady drain from there to
    the backlog at its end."""
    flows = np.asarray(observation.series.get("input_eps", []), float) - \
        np.asarray(observation.series.get("output_eps", []), float)
    if flows.size == 0 or not np.all(np.isfinite(flows)):
        seconds = max(round(observation.duration_s), 1)
        flows = np.full(seconds, _shortfall_events(observation) / seconds)
    above = observation.backlog_total - _shortfall_events(observation) + np.cumsum(flows) > limit_events
    return float(above.size if above.all() else np.argmin(above)) / above.size


def output_margin(observation: Observation, policy: Policy, config: Config) -> float:
    """The window's output over its input, less 1, with what `config` holds in its buffers counted as shipped (as
    far as the BEHIND rule excuses it), and never above 0: 0 is keeping up, below the policy's floor is behind.

    What the throughput model learns. The raw ratio dips by a config's buffered batch when a window ends and rises
    when the next one ships it: told those, the model took long flush timeouts for a step toward falling behind
    and vouched for nothing far from what it had seen. A surplus is a backlog from before draining, not headroom.
    """
    offered = observation.offered_eps * observation.duration_s
    if offered <= 0:
        return 0.0
    allowed = _allowed_shortfall_events(observation, policy, config)
    shortfall = _shortfall_events(observation)
    # on the floor exactly where the BEHIND rule breaks, 0 where the shortfall is what the buffers hold
    return min(policy.min_throughput_ratio - 1.0 + (allowed - shortfall) / offered, 0.0)


def judge(observation: Observation, policy: Policy, config: Config | None, previous: Observation | None = None,
          settled_events: float | None = None, budget_limits: Mapping[str, float] | None = None,
          budget_allowances: Mapping[str, float] | None = None) -> Verdict:
    """The verdict on `observation`, made by `config` (None: unknown, so nothing is excused as buffered), under
    `policy`; `previous` (the window before) enables the backlog rule; `settled_events` is the backlog after the
    last window that shipped only its own load (`drain`); `budget_limits` the policy's budgets at the window's
    load by cost name (`models.budget.BudgetLimits`: each part's CPU in cores, the Produce requests per second), and
    `budget_allowances` by how much, as a share of its limit, a cost's reading may exceed it for its noise
    (`models.budget.CostNoise`; none: not at all)."""
    found: list[Breach] = []
    min_ratio = policy.min_throughput_ratio
    duration_s = observation.duration_s
    buffered = _held_events(observation, config)
    allowed = observation.shortfall_allowed(min_ratio, buffered)
    shortfall = _shortfall_events(observation)
    if shortfall > allowed:
        found.append(Breach(kind=BreachKind.BEHIND, figure=shortfall, limit=allowed, unit="events", message=(
            f"output {observation.throughput_ratio:.1%} of input < {min_ratio:.0%}, "
            f"beyond the {buffered:.0f} events its buffers hold")))
    if previous is not None and duration_s > 0:
        growth_eps = (observation.backlog_total - previous.backlog_total) / duration_s
        tolerated_eps = allowed / duration_s  # the shortfall the BEHIND rule allows, per second
        if growth_eps > tolerated_eps:
            found.append(Breach(kind=BreachKind.BACKLOG, figure=growth_eps, limit=tolerated_eps, unit="ev/s",
                                message=f"backlog grew {growth_eps:.0f} ev/s > {tolerated_eps:.0f} ev/s tolerated"))
    ceiling = policy.p95_ceiling_s
    if ceiling is not None and observation.p95_s > ceiling:
        found.append(Breach(kind=BreachKind.CEILING, figure=observation.p95_s, limit=ceiling, unit="s",
                            message=f"P95 {observation.p95_s:.3f}s > ceiling {ceiling:g}s"))
    kept_up = not any(b.kind.throughput for b in found)
    shipped = drain(observation, policy, config, settled_events) if config is not None and kept_up else Drain.NONE
    verdict = Verdict(breaches=tuple(found), drain=shipped)
    if not verdict.own_load:
        return verdict
    return Verdict(breaches=(*found, *_over_budget(observation, budget_limits or {}, budget_allowances or {})),
                   drain=shipped)


def _over_budget(observation: Observation, limits: Mapping[str, float],
                 allowances: Mapping[str, float]) -> list[Breach]:
    """The budgets a window that shipped its own load (`Verdict.own_load`) went over, each by more than its noise
    (`allowances`). Judged on a window behind or draining (a paper Logstash used 2.2 cores so, 0.7 keeping up),
    every step toward capacity out of an overload was rolled back for the backlog's CPU (zoo, a capped MMPP)."""
    found = []
    costs = budgeted_costs(observation)
    for name, limit in limits.items():
        used, unit = costs.get(name), COST_UNITS[name]
        noise = allowances.get(name, 0.0)
        if used is not None and used > limit * (1.0 + noise):
            found.append(Breach(kind=BreachKind.BUDGET, figure=used, limit=limit, unit=unit,
                                message=f"{name} used {used:.3f} {unit} > its budget {limit:.3f}"
                                        + (f" by more than its noise ({noise:.0%})" if noise else "")))
    return found
