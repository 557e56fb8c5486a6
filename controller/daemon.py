"""The autotune loop: collect a window → judge it → decide → realize → record.

Level-triggered, as a Kubernetes controller is: each step compares the config the pipeline runs with
the one it should run, acts only when they differ, and writes down why. The window's `Verdict` comes
first: a window whose output falls behind its input, whose backlog grows, or whose P95 crosses the
ceiling sends the pipeline back to the incumbent at once, and the learner is told the verdict, so it
marks that region unsafe. The daemon's incumbent is the one incumbent: the learner searches around
it (`Context.incumbent`). When the offered load changes clearly (`models.learning.LOAD_SHIFT`), the
incumbent is measured again before its old figure is trusted. While the pipeline still ships a backlog
from before the config in force (`Verdict.drain`: a rollback's, a restart's pause), neither the learner nor
the incumbent takes that window's figures as the config's, and where that queue lasted, the daemon holds
the config: any other measured now would be measured on what is left of it. Once the learner has converged it holds
the incumbent, and the daemon changes nothing, until a load move, a breach, a drift of the incumbent's
P95 or a policy change re-opens the search (the learner's reason says which). Modes: `auto` applies,
`advise` only recommends, `frozen` holds.
While the pipeline cannot be observed or reached (`PipelineUnavailable`), the daemon holds as in
`frozen` on its own, and picks up again with the first window it can read. A window the Kafka cluster disturbed
(`Observation.disturbance`: a broker lost, leaders moved, replicas out of sync) it holds through too, naming the
cause: its figures are the failover's, neither blamed on the config nor credited to it. Any other error a window
ends in is recorded as that window's decision (action `error`) and the next window goes on, as the Flink autoscaler
records a scaling error; the same error `ERROR_WINDOWS` windows in a row stops the loop (`PersistentError`).
The daemon decides; a realizer (`controller.realizer`) puts the decision in force and says what came of it: a
single pipeline's applies it at once, a pool's rolls it out canary first and judges it on the next window.

It runs for a number of windows or until `stop` is set (the CLI's signal handler sets it): the window
in progress is finished and recorded, no new candidate is applied, and the config in force stays
unless the caller then calls `revert`. Nothing it holds grows with the number of windows.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from controller.clocks import offset_reports, offset_warnings
from controller.pipelines import Measured, PipelineUnavailable
from controller.realizer import Direct, Outcome, OutcomeKind, Realizer
from controller.state import (COST_GAUGES, CPU_GAUGE, Action, Cost, BudgetReport, Decision, GuardrailReport,
                              Incumbent, LearnerReport, Override, StateStore, Status)
from controller.tuned_space import TunedSpace
from models.budget import COST_UNITS, BudgetLimits, CostNoise, CostReference, costs_of, per_event
from models.clock_offset import ClockOffset
from models.event_time import below_resolution
from models.learning import Context, Learner
from models.observation import Observation
from models.policy import Policy
from models.space import PIPELINE_SPACE, ChangeCost, Config, Value
from models.verdict import Drain, Verdict, judge

RESTART_BUDGET_S = 3600.0  # max_restarts_per_hour counts the restarts of the last hour of pipeline time
# The same unexpected error in this many windows in a row is not a passing one (a broken learner, a bug):
# three windows rule out a single bad read or a restarting service, and stop the loop within minutes.
ERROR_WINDOWS = 3
# A candidate whose windows ran at a load the incumbent has no figure for is held this many windows, waiting for
# the load to come back, before the incumbent is re-measured: a burst or a flash lasts a few windows, and going
# back at once cost two restarts a burst (zoo 1294639103, an MMPP: 7 of its 30 changes).
AWAY_WINDOWS = 3
log = logging.getLogger("pipetune.daemon")


class PersistentError(RuntimeError):
    """The same unexpected error in `ERROR_WINDOWS` windows in a row: the daemon's loop stops, naming it."""


class DaemonMetrics:
    """The daemon's own Prometheus metrics, in a registry of its own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.decisions = Counter("pipetune_decisions_total", "Decisions taken, by action", ["action"],
                                 registry=self.registry)
        self.rollbacks = Counter("pipetune_rollbacks_total", "Rollbacks to the incumbent", registry=self.registry)
        self.restarts = Counter("pipetune_component_restarts_total", "Config changes that restarted a component",
                                registry=self.registry)
        self.incumbent_p95 = Gauge("pipetune_incumbent_p95_seconds", "P95 the incumbent measured",
                                   registry=self.registry)
        self.window_p95 = Gauge("pipetune_window_p95_seconds", "P95 of the last window", registry=self.registry)
        self.throughput_ratio = Gauge("pipetune_throughput_ratio", "Output over offered load in the last window",
                                      registry=self.registry)
        self.violation_seconds = Counter("pipetune_violation_seconds_total",
                                         "Seconds of windows that breached a guardrail", registry=self.registry)
        self.cpu_cores = Gauge(*CPU_GAUGE, ["part"], registry=self.registry)
        self.cost = {key: Gauge(name, help_text, registry=self.registry) for name, key, help_text in COST_GAUGES}

    def show_cost(self, observed: dict) -> None:
        """The window's cost as `observed` holds it (NaN: not measured; a part not measured has no series)."""
        self.cpu_cores.clear()
        for part, cores in (observed.get("cpu_cores") or {}).items():
            self.cpu_cores.labels(part).set(cores)
        for key, gauge in self.cost.items():
            value = observed.get(key)
            gauge.set(math.nan if value is None else value)


@dataclass(frozen=True)
class Collected:
    """What `Daemon._collect` read: the config the window ran and its observation as the daemon judges it,
    and what the realizer concluded of it (a pool's canary judged: the observation is the measured effect)."""

    config: Config
    observation: Observation
    outcome: Outcome | None = None


@dataclass(frozen=True)
class Choice:
    """What `Daemon._decide` settles on: the config to run next, the action that names it, and why; in mode
    advise, the change it recommends; the override a guardrail rolled back (`record` vetoes it for good)."""

    target: Config
    action: Action
    reason: str
    predicted: dict[str, float] = field(default_factory=dict)
    recommendation: dict[str, list[Value]] = field(default_factory=dict)
    vetoed: str | None = None


def _summary(observation: Observation) -> dict:
    """The decision log's `observed`: latency, rates and backlog, then the window's `Cost`."""
    return {"p95_s": observation.p95_s, "p50_s": observation.p50_s, "throughput_ratio": observation.throughput_ratio,
            "offered_eps": observation.offered_eps, "throughput_eps": observation.throughput_eps,
            "backlog_events": observation.backlog_total, "duration_s": observation.duration_s} | \
        Cost.of(observation).model_dump()


def _unobserved(duration_s: float) -> dict:
    """`_summary` of a window nothing could be read of: every figure unknown (NaN; null in the API), no cost."""
    blank = Observation(duration_s, *[math.nan] * 6)
    return dict.fromkeys(_summary(blank), math.nan) | {"duration_s": duration_s} | Cost().model_dump()


def _restarts(old: Config, new: Config) -> bool:
    return ChangeCost.dearest(PIPELINE_SPACE[name].cost for name in old.diff(new)) is ChangeCost.RESTART


def _restarted(old: Config, new: Config) -> set[str]:
    """The components going from `old` to `new` restarts."""
    return {PIPELINE_SPACE[n].component for n in old.diff(new) if PIPELINE_SPACE[n].cost is ChangeCost.RESTART}


def _change(old: Config, new: Config) -> dict[str, list[Value]]:
    return {k: [a, b] for k, (a, b) in old.diff(new).items()}


class Daemon:
    """Drives one pipeline with one learner under one policy; `realizer` puts its decisions in force (by
    default `Direct`: applied to `pipeline` at once, which must then be a `Pipeline`). `space` says what the
    pool's agents apply: every other parameter stays at the running config's value, whatever decides a change."""

    def __init__(self, pipeline: Measured, learner: Learner, policy: Policy, *, window_s: float,
                 store: StateStore | None = None, metrics: DaemonMetrics | None = None, name: str = "pipeline",
                 realizer: Realizer | None = None, space: TunedSpace | None = None) -> None:
        self.name = name
        self.space = space
        self.pipeline = pipeline
        self.realizer = realizer if realizer is not None else Direct(pipeline)
        self.learner = learner
        self.policy = policy
        self.window_s = window_s
        self.store = store
        self.metrics = metrics or DaemonMetrics()
        self.incumbent: Incumbent | None = store.load_incumbent() if store else None
        self.window = store.logged_decisions() if store else 0  # numbering continues across restarts
        self.previous: Observation | None = None
        self.settled_events: float | None = None  # the backlog after the last window of the pipeline's own load
        self.t_s = 0.0
        self.rollbacks = 0
        self.violation_s = 0.0
        self.told = 0  # observations the learner holds, resumed ones included
        self._dwell = 0
        self._restart_times: deque[float] = deque()  # within the last RESTART_BUDGET_S only
        self._restart_pauses_s: dict[str, float] = {}  # component -> what its latest restart paused the pipeline for
        # what the config before tuning used, which the CPU budget follows (`models.budget`); kept across restarts
        self.cost_reference: CostReference | None = store.load_cost_reference() if store else None
        self._started_on: Config | None = None  # the config of the first window judged
        # a reference resumed from the state directory was of a start this process did not see: it stays as it is
        self._reference_open = self.cost_reference is None
        self.cost_noise = CostNoise()  # how much a window's cost readings vary with the config held
        self._held: tuple[Config, dict[str, float]] | None = None  # the last window's config and its costs per event
        self._vetoed: set[str] = store.vetoed_overrides() if store else set()  # rolled back: not re-applied
        self._failing = ("", 0)  # the unexpected error the last windows ended in, and how many in a row
        self.paused = False
        self.clock_offsets: dict[str, ClockOffset] = {}  # each node's, as last measured (live pipelines only)
        self.stop = threading.Event()  # set from anywhere (a signal handler): the run ends after this window
        if store:
            store.save_policy(policy)

    def resume(self) -> int:
        """Tell the learner every observation in the state directory with its stored verdict; returns how many.

        A window stored before verdicts were is judged again under today's policy, the stored window
        before it serving for the backlog trend.
        """
        if not self.store:
            return 0
        history = self.store.told(self.policy)
        for told in history:
            self._tell(*told)
        return len(history)

    def _tell(self, config: Config, context: Context, observation: Observation, verdict: Verdict) -> None:
        self.learner.tell(config, context, observation, verdict)
        self.told += 1

    def warm_up(self) -> None:
        """Let a freshly started pipeline fill its buffers; that window measures the start, not the config (an
        error reading it is recorded as a step's is). What a pool's rollout found cut short by a kill, and did
        to put one config on every node, is recorded before it (action `recover`)."""
        rollout = self.realizer.report().rollout
        if rollout is not None and rollout.recovered:
            log.warning("%s: %s", self.name, rollout.recovered)
            self._record(Decision(window=self.window, t_s=self.t_s, config=dict(self.pipeline.current()),
                                  observed=_unobserved(0.0), action=Action.RECOVER, reason=rollout.recovered,
                                  rollout=rollout))
        elif rollout is None:  # a pool's rollout reads its nodes itself (`CanaryPool`)
            self._adopt_a_change_made_while_stopped()
        self.t_s += self.window_s
        try:
            self.pipeline.observe(self.window_s)
        except PipelineUnavailable as err:
            self._record(self._unavailable(err))
        except Exception as err:  # the loop goes on, as after any window's
            self._failed(err)

    def _adopt_a_change_made_while_stopped(self) -> None:
        """A resumed daemon whose pipeline runs a config it did not leave in force (an operator's edit or a
        redeploy while it was stopped) takes that config as its incumbent, to be measured afresh, and records so:
        held to the stored incumbent, its first decision would have been to go back to it, undoing the edit with
        no word of it. The stored incumbent's windows stay in what the learner knows; a return to it is then a
        change the learner proposes for a gain it names. Left in force means the last decision's config, or that
        config with the decision's change (a change whose apply failed left the config as it was); a pipeline
        started again on the stored incumbent (the twin's, on a resumed run) runs what the daemon holds already."""
        if self.store is None or self.incumbent is None:
            return
        last = next(self.store.decisions_newest_first(), None)
        if last is None:
            return
        before = PIPELINE_SPACE.config(last["config"])
        after = PIPELINE_SPACE.config({k: to for k, (_, to) in last.get("change", {}).items()}, base=before)
        try:
            running = self.pipeline.current()
        except PipelineUnavailable:  # nothing to compare with: the first window it can read holds, as any does
            return
        if running in (before, after, self.incumbent.config):
            return
        changed = ", ".join(f"{k} {a} → {b}" for k, (a, b) in _change(after, running).items())
        reason = (f"the pipeline runs a config pipetune did not leave in force ({changed}): changed while the daemon "
                  f"was stopped; it is the incumbent now, to be measured afresh (the stored incumbent, P95 "
                  f"{self.incumbent.p95_s:.3f} s, stays in what the learner knows)")
        log.warning("%s: %s", self.name, reason)
        self.incumbent = None
        self.store.forget_incumbent()
        self._record(Decision(window=self.window, t_s=self.t_s, config=dict(running), observed=_unobserved(0.0),
                              action=Action.RECOVER, reason=reason))

    def _sync(self) -> None:
        """Adopt what people changed in the state directory since the last decision."""
        if not self.store:
            return
        stored = self.store.load_policy()
        if stored is not None and stored != self.policy:
            self.policy = stored
            self.learner.update_policy(stored)
        self.paused = self.store.paused()

    def _active_override(self) -> Override | None:
        live = [o for o in (self.store.overrides() if self.store else []) if o.id not in self._vetoed]
        return max(live, key=lambda o: o.created_at) if live else None

    def step(self, last: bool = False) -> Decision:
        """Measure one window and act on it. An unexpected error is recorded as the window's decision and the
        next window goes on; the same one `ERROR_WINDOWS` windows in a row raises `PersistentError`. `last`: the
        run's last window, after which no window judges a change (`_decide`)."""
        self.t_s += self.window_s  # the window passes whether or not it can be read
        try:
            decision = self._step(last)
        except Exception as err:  # anything but PipelineUnavailable, on which _step holds
            return self._failed(err)
        self._failing = ("", 0)
        return decision

    def _step(self, last: bool) -> Decision:
        """collect → not ready? record → judge → decide → realize → record (the Flink autoscaler's
        runScalingLogic reads alike)."""
        self._sync()
        try:
            collected = self._collect()
        except PipelineUnavailable as err:
            return self._record(self._unavailable(err))
        # a pool that judged its canary on the window (promoted, reverted, extended) has acted on it already
        judged = collected.outcome is not None and collected.outcome.judgement is not None
        if collected.observation.disturbance is not None and not judged:
            return self._record(self._disturbed(collected))
        if collected.outcome is not None and collected.outcome.kind is OutcomeKind.EXTENDED:
            return self._record(self._on_trial(collected))
        verdict = self._judge(collected)
        choice = self._decide(collected, verdict, last)
        target = self.space.hold(choice.target, collected.config) if self.space else choice.target
        decision = self._realize(collected.config, target, self._decision(collected, choice, verdict.messages))
        return self._record(decision, choice.vetoed)

    def _collect(self) -> Collected:
        """The window just measured and the config it ran; where the realizer concludes something of it (a pool
        judging its canary against the controls), its outcome, whose observation is the one judged and told."""
        observation = self.pipeline.observe(self.window_s)
        config = self.pipeline.current()
        outcome = self.realizer.conclude(self.window_s)
        if outcome is None:
            return Collected(config, observation)
        return Collected(outcome.config, outcome.observation or observation, outcome)

    def _judge(self, collected: Collected) -> Verdict:
        """The window's verdict; the learner and the state directory are told it together (so a resumed
        learner is told what this one was), and the incumbent takes its figure, before anything is decided."""
        config, observation = collected.config, collected.observation
        limits = self._limits.at(observation.offered_eps)
        verdict = judge(observation, self.policy, config, self.previous, self.settled_events, limits,
                        self.cost_noise.allowances(limits, self.cost_reference))
        self._take_cost_reference(config, observation, verdict)
        self._measure_cost_noise(config, observation, verdict)
        self.previous = observation
        if verdict.ok and verdict.drain is Drain.NONE:
            self.settled_events = observation.backlog_total
        if observation.clock_offsets:
            self.clock_offsets = observation.clock_offsets
        if observation.events_in > 0:  # a window without load says nothing about the config
            self._tell(config, Context(observation.offered_eps), observation, verdict)
            if self.store:
                self.store.append_observation(config, observation.offered_eps, observation, verdict)
        if not verdict.ok:
            self.violation_s += observation.duration_s
            self.metrics.violation_seconds.inc(observation.duration_s)
        if observation.events_in > 0 and verdict.drain is Drain.NONE:
            # nor does a window without load or one still shipping the past's queue say anything of the incumbent
            if verdict.ok:
                self._update_incumbent(collected)
            elif (verdict.behind or verdict.over_budget) and self.incumbent is not None and \
                    collected.config == self.incumbent.config:
                # else the config the learner leaves it for, slower but within the rules, is never adopted, and the
                # daemon goes back to it the next window: fb-kafka diurnal made 50 changes in 60 windows so
                self.incumbent = self.incumbent.breached(observation.p95_s, observation.offered_eps,
                                                         observation.throughput_eps if verdict.behind else None)
                if self.store:
                    self.store.save_incumbent(self.incumbent)
        return verdict

    @property
    def _limits(self) -> BudgetLimits:
        return BudgetLimits(self.policy.cpu_budget, self.policy.request_budget, self.cost_reference)

    def _take_cost_reference(self, config: Config, observation: Observation, verdict: Verdict) -> None:
        """The budgets' reference: the mean of the windows of the config the run started on that kept up with their
        own load (a window behind, or shipping a queue from before, measured something else)."""
        self._started_on = self._started_on or config
        if not self._reference_open or config != self._started_on or not verdict.own_load or \
                observation.events_in == 0:
            return
        ref = self.cost_reference
        self.cost_reference = CostReference.of(observation) if ref is None else ref.with_window(observation)
        if self.cost_reference is not None and self.store:
            self.store.save_cost_reference(self.cost_reference)

    def _measure_cost_noise(self, config: Config, observation: Observation, verdict: Verdict) -> None:
        """Pair the window's costs per event with the window before's where both ran one config that kept up, the
        earlier not the first after a change (whose restart costs what no later window does)."""
        before = self._held
        if before is None or before[0] != config:
            self._held = (config, {})
            return
        reading = per_event(observation) if verdict.own_load else {}
        if before[1] and reading:
            self.cost_noise = self.cost_noise.with_pair(before[1], reading)
        self._held = (config, reading)

    def _on_trial(self, collected: Collected) -> Decision:
        """Hold while a change is on trial (a canary whose effect is still unclear): its window is part of the
        trial's judgement, not a figure of any one config, so the learner is not told it and nothing is decided
        until the trial ends."""
        return self._decision(collected, Choice(collected.config, Action.HOLD,
                                                f"canary on trial: {collected.outcome.message}"), guardrail=[])

    def _disturbed(self, collected: Collected) -> Decision:
        """Hold through a window something besides the config disturbed (the Kafka cluster: a broker lost, leaders
        moved, replicas out of sync; a node's clock that stepped): its figures are the disturbance's, so it is
        neither judged against the config (no rollback) nor told the learner or taken for the incumbent (no credit),
        and nothing changes while it lasts. The backlog trend starts afresh after it, as after any gap."""
        self.previous = None
        return self._decision(collected, Choice(collected.config, Action.HOLD, (
            f"disturbed: {collected.observation.disturbance}: the window is the disturbance's, not the config's: "
            "not judged, the config held")), guardrail=[])

    def _unavailable(self, err: PipelineUnavailable, decision: Decision | None = None) -> Decision:
        """Hold while the pipeline cannot be read or reached: a window not seen teaches the learner nothing and
        proves nothing of the incumbent, and changing what cannot be verified is not safe. `decision` is the
        window's, when the pipeline went away while it was being changed."""
        self.previous = None  # the trend guardrail must not compare windows across the gap
        if decision is None:
            return Decision(window=self.window, t_s=self.t_s, config={}, observed=_unobserved(self.window_s),
                            action=Action.FROZEN,
                            reason=f"pipeline unavailable ({err}): holding, no new change until it answers")
        decision.action = Action.FROZEN
        decision.reason = (f"pipeline unavailable while changing it ({err}): holding; "
                           "what is in force is read again when it answers")
        return decision

    def _failed(self, err: Exception) -> Decision:
        """Record a window that ended in an unexpected error (with its traceback in the log); nothing else of it
        is trusted, so the trend guardrail starts afresh. The same error `ERROR_WINDOWS` windows in a row
        raises `PersistentError` naming it."""
        said = f"{type(err).__name__}: {err}"
        in_a_row = self._failing[1] + 1 if self._failing[0] == said else 1
        self._failing = (said, in_a_row)
        log.warning("window %d of %s ended in an error (%d in a row)", self.window, self.name, in_a_row, exc_info=err)
        self.previous = None
        decision = self._record(Decision(
            window=self.window, t_s=self.t_s, config={}, observed=_unobserved(self.window_s), action=Action.ERROR,
            reason=f"unexpected error, {in_a_row} window(s) in a row (the loop stops at {ERROR_WINDOWS}): {said}",
            error=said))
        if in_a_row >= ERROR_WINDOWS:
            raise PersistentError(f"{self.name}: the same error in {in_a_row} windows in a row, the loop stops: "
                                  f"{said}") from err
        return decision

    def _update_incumbent(self, collected: Collected) -> None:
        """Take the window's figure for the incumbent: its own window (a figure at this load), or a candidate's
        that beat the incumbent's latest figure at about the same load (or kept up where it fell behind)."""
        inc, config, observation = self.incumbent, collected.config, collected.observation
        if collected.outcome is not None:
            # A realizer that concludes (a pool) judged what it runs on every node side by side with the config
            # before it, on the same windows, load moves removed: that is the incumbent, whatever the load did
            # since the last figure, and a candidate it took back is not, however low its window's figure.
            adopted = collected.outcome.in_force
        else:
            reference = inc.figure_at(observation.offered_eps) if inc is not None else None
            adopted = (inc is None or config == inc.config
                       or (reference is not None and (not reference.kept_up or observation.p95_s < reference.p95_s)))
        if not adopted:
            return
        if inc is not None and config == inc.config:
            self.incumbent = inc.measured_again(observation.p95_s, observation.offered_eps, Cost.of(observation))
        else:
            self.incumbent = Incumbent(config, observation.p95_s, observation.offered_eps, Cost.of(observation))
        if self.store:
            self.store.save_incumbent(self.incumbent)

    def _decide(self, collected: Collected, verdict: Verdict, last: bool) -> Choice:
        """The config to run next, and why; writes nothing (what it vetoes, `_record` writes down). On the run's
        `last` window the run ends on its incumbent, the config its summary calls final: a candidate applied then, or
        one not yet judged better, would be left in force unmeasured or unjudged."""
        inc, config = self.incumbent, collected.config
        offered_eps = collected.observation.offered_eps
        context = Context(offered_eps, inc.config if inc else None, dict(self._restart_pauses_s), self._limits)
        override = self._active_override()
        person_hold = Action.PAUSED if self.paused else Action.FROZEN if self.policy.mode == "frozen" else None
        if not verdict.ok:
            breached, vetoed = "; ".join(verdict.messages), None
            if override is not None and PIPELINE_SPACE.config(override.params, base=config) == config:
                vetoed = override.id  # it is rolled back below, and never applied again
            elif person_hold is not None:  # people hold the config: a breach is reported, not acted on
                return Choice(config, person_hold,
                              f"{person_hold} by a person: breach recorded, config held: {breached}")
            # the incumbent may predate a pin: roll back to it as today's policy allows
            if inc is not None and self.policy.enforce(inc.config) != config:
                shared = self._overload_shared(collected.observation, verdict) if vetoed is None else None
                if shared is not None:
                    return Choice(config, Action.HOLD, shared)
                return Choice(self.policy.enforce(inc.config), Action.ROLLBACK, f"guardrail: {breached}", vetoed=vetoed)
            if (verdict.behind or verdict.over_budget) and vetoed is None and self.policy.mode != "advise":
                return self._incumbent_breached(config, context)
            return Choice(config, Action.HOLD, f"guardrail on the incumbent itself, nothing safer known: {breached}",
                          vetoed=vetoed)
        if override is not None:
            # pins hold for what the override does not name; what it names was checked by the API
            target = PIPELINE_SPACE.config(override.params, base=self.policy.enforce(config))
            return Choice(target, Action.OVERRIDE,
                          f"override {override.id} ({override.reason}), {override.remaining_s():.0f}s left")
        if person_hold is not None:
            return Choice(config, person_hold, f"{person_hold} by a person: the config is held")
        if last and inc is not None and self.policy.enforce(inc.config) != config and self.policy.mode != "advise":
            return Choice(self.policy.enforce(inc.config), Action.RETURN, "the run's last window: back to the "
                          "incumbent, the run's final config (the candidate in force was not judged better)")
        if inc is not None and inc.config != config and inc.figure_at(context.offered_eps) is None:
            moved = f"offered load moved {inc.offered_eps:.0f} → {context.offered_eps:.0f} ev/s"
            if self._dwell + 1 < AWAY_WINDOWS:
                return Choice(config, Action.HOLD, f"{moved}, away from every load the incumbent ran at: another "
                                                   "window of the candidate, for the load to come back")
            return Choice(self.policy.enforce(inc.config), Action.REMEASURE,
                          f"{moved}, for {AWAY_WINDOWS} windows: re-measure the incumbent before trusting it")
        if verdict.drain is Drain.LONG:  # any config measured now would be measured on the past's queue
            return Choice(config, Action.HOLD, "the pipeline still ships a backlog from before this config: "
                                               "holding until it is gone")
        if self._dwell + 1 < self.policy.min_dwell_windows:
            return Choice(config, Action.HOLD, f"minimum dwell of {self.policy.min_dwell_windows} windows")
        if self.stop.is_set():  # a candidate applied now would never be measured: leave a verified config
            return Choice(config, Action.HOLD, "stopping: no new candidate, it could not be verified")
        resolution_s = collected.observation.latency_resolution_s
        unresolved = below_resolution(inc.p95_s, resolution_s) if inc is not None else None
        if unresolved is not None:
            return Choice(config, Action.HOLD, unresolved)
        suggestion = self.learner.suggest(context)
        candidate = self.policy.enforce(suggestion.config)
        if candidate != config and _restarts(config, candidate) and not self._restart_allowed():
            return Choice(config, Action.HOLD, f"restart budget of {self.policy.max_restarts_per_hour}/h spent",
                          suggestion.predicted)
        if self.policy.mode == "advise":  # names the learner's config as its target but never applies it
            return Choice(config, Action.ADVISE, "mode advise, recommended: " + suggestion.reason,
                          suggestion.predicted, _change(config, candidate))
        incumbent = self.policy.enforce(inc.config) if inc is not None else None
        reason = suggestion.reason
        if candidate == config:
            action = Action.HOLD
            if incumbent is not None and config != incumbent:  # the learner's reason reads like a change
                reason = f"another window of the candidate, which is not the incumbent yet: {reason}"
        elif candidate == incumbent:
            action = Action.RETURN  # not "explore": the change ends a search ("converged: … keep the incumbent")
        elif last:  # as when stopping: no window is left to measure it
            return Choice(config, Action.HOLD, f"the run's last window: no window left to judge the learner's "
                                               f"candidate ({reason})", suggestion.predicted)
        else:
            action = Action.EXPLORE
        return Choice(candidate, action, reason, suggestion.predicted)

    def _overload_shared(self, observation: Observation, verdict: Verdict) -> str | None:
        """Why a candidate that fell behind is not rolled back, or None: the incumbent itself fell behind at this load
        or a lower one, shipping no more than the candidate shipped here. The overload is the load's: a rollback
        would cost a restart and the backlog it leaves for a config that carries less (an MMPP's crests above every
        config's capacity rolled back each candidate they met, zoo 2858576452). Only for throughput rules."""
        if self.incumbent is None or not all(b.kind.throughput for b in verdict.breaches):
            return None
        carried_eps = self.incumbent.shipped_when_behind(observation.offered_eps)
        if carried_eps is None or observation.throughput_eps < carried_eps:
            return None
        return (f"overloaded, not rolled back: the incumbent fell behind at this load or below, shipping "
                f"{carried_eps:.0f} ev/s; the candidate shipped {observation.throughput_eps:.0f} ev/s of "
                f"{observation.offered_eps:.0f}: another window of it")

    def _incumbent_breached(self, config: Config, context: Context) -> Choice:
        """The incumbent itself fell behind or went over the CPU budget: the learner moves toward capacity where a
        config it measured is expected to carry this load better (its overload rule), or to the fastest config it
        expects within budget, within the restart budget; else the config holds. No dwell: every window spent
        behind grows the backlog, every one over budget takes the node's CPU."""
        suggestion = self.learner.suggest(context)
        candidate = self.policy.enforce(suggestion.config)
        reason = f"guardrail on the incumbent itself: {suggestion.reason}"  # the breaches: the decision's guardrail
        if candidate == config:
            return Choice(config, Action.HOLD, reason, suggestion.predicted)
        if _restarts(config, candidate) and not self._restart_allowed():
            return Choice(config, Action.HOLD, f"{reason}; restart budget of {self.policy.max_restarts_per_hour}/h "
                                               "spent", suggestion.predicted)
        return Choice(candidate, Action.EXPLORE, reason, suggestion.predicted)

    def _restart_allowed(self) -> bool:
        limit = self.policy.max_restarts_per_hour
        return limit is None or sum(self.t_s - t < RESTART_BUDGET_S for t in self._restart_times) < limit

    def _decision(self, collected: Collected, choice: Choice, guardrail: list[str]) -> Decision:
        """The window's decision as chosen, with the guardrails its verdict breached; `_realize` amends it with
        what putting it in force did."""
        outcome = collected.outcome
        return Decision(window=self.window, t_s=self.t_s, config=dict(collected.config),
                        observed=_summary(collected.observation), action=choice.action,
                        recommendation=choice.recommendation, predicted=choice.predicted,
                        reason="; ".join([choice.reason, *offset_warnings(self.clock_offsets)]),
                        guardrail=guardrail, incumbent_p95_s=self.incumbent.p95_s if self.incumbent else None,
                        rollout=outcome.rollout if outcome else None, outcome=outcome.report() if outcome else None)

    def _realize(self, config: Config, target: Config, decision: Decision) -> Decision:
        """`target` in force through the realizer (where it differs from `config`), the window after a restart
        or a rollback let settle; `decision` amended with what that did."""
        if target == config:
            self._dwell += 1
            return decision
        decision.change = _change(config, target)
        try:
            outcome = self.realizer.realize(target)
            back = self.realizer.realize(config) if outcome.kind is OutcomeKind.REFUSED else None
        except PipelineUnavailable as err:
            return self._unavailable(err, decision)
        if back is not None:
            decision.action = Action.ROLLBACK
            decision.reason = f"apply failed ({outcome.message}); back: {back.message}"
            self.rollbacks += 1
            self.metrics.rollbacks.inc()
            return decision
        self._dwell = 0
        if decision.action is Action.ROLLBACK:
            self.rollbacks += 1
            self.metrics.rollbacks.inc()
        if _restarts(config, target):
            while self._restart_times and self.t_s - self._restart_times[0] >= RESTART_BUDGET_S:
                self._restart_times.popleft()  # what is older than the budget's hour no longer counts
            self._restart_times.append(self.t_s)
            if outcome.pause_s > 0:  # components restarted together are each charged the whole pause: an upper bound
                self._restart_pauses_s |= dict.fromkeys(_restarted(config, target), outcome.pause_s)
            self.metrics.restarts.inc()
        # Let it settle: a window spent restarting, refilling or draining a rollback's backlog is not
        # a fair measurement of the new config (and when stopping, no window follows to measure).
        settle_s = self.window_s if decision.action is Action.ROLLBACK or outcome.pause_s > 0 else 0.0
        if settle_s > 0 and not self.stop.is_set():
            try:
                # not judged, but the backlog trend of the next window starts from where it leaves the backlog:
                # what a restart's pause queued is not the new config's growth
                self.previous = self.pipeline.observe(settle_s)
            except PipelineUnavailable:
                self.previous = None
            self.t_s += settle_s
            decision.pause_s = settle_s
        return decision

    def _record(self, decision: Decision, vetoed: str | None = None) -> Decision:
        """Write the window down: an override a guardrail rolled back (audited, never applied again), the
        metrics, the decision log and the status; the next window is numbered after it."""
        if vetoed is not None:
            self._vetoed.add(vetoed)
            if self.store:
                self.store.append_audit({"actor": "daemon", "action": "override_rolled_back", "id": vetoed,
                                         "why": decision.guardrail})
        self.metrics.decisions.labels(decision.action).inc()
        self.metrics.window_p95.set(decision.observed["p95_s"])
        self.metrics.throughput_ratio.set(decision.observed["throughput_ratio"])
        self.metrics.show_cost(decision.observed)
        if self.incumbent:
            self.metrics.incumbent_p95.set(self.incumbent.p95_s)
        if self.store:
            self.store.append_decision(decision)
            self.store.save_status(self.status(decision))
        self.window += 1
        return decision

    def status(self, last: Decision | None = None) -> Status:
        """What `GET /status` shows: mode, pipeline, incumbent, last window, guardrails, overrides, progress."""
        try:
            current = dict(self.pipeline.current())
        except PipelineUnavailable:
            current = None  # unknown until the pipeline answers again
        nodes = self.realizer.report()
        return Status(
            pipeline=self.name, mode=self.policy.mode, paused=self.paused, window=self.window, t_s=self.t_s,
            updated_at=time.time(), current_config=current,
            incumbent=self.incumbent.report() if self.incumbent else None, last_decision=last,
            guardrail=GuardrailReport(last_breaches=last.guardrail if last else [], rollbacks=self.rollbacks,
                                      violation_s=self.violation_s),
            overrides=[o.report(o.id in self._vetoed) for o in (self.store.overrides() if self.store else [])],
            clock_offsets=offset_reports(self.clock_offsets), nodes=nodes.versions, rollout=nodes.rollout,
            tuned_space=self.space.report() if self.space else None, budget=self._budget_report(last),
            learner=LearnerReport(observations=self.told, last_reason=last.reason if last else ""))

    def _budget_report(self, last: Decision | None) -> BudgetReport | None:
        if self.policy.cpu_budget is None and self.policy.request_budget is None:
            return None
        observed = last.observed if last is not None else {}
        offered_eps = observed.get("offered_eps", math.nan)
        used = costs_of(observed.get("cpu_cores") or {}, observed.get("produce_requests_per_s"))
        limits = self._limits.at(offered_eps) if math.isfinite(offered_eps) else {}
        ref = self.cost_reference
        return BudgetReport(limits=limits, used={name: u for name, u in used.items() if name in limits},
                            units={name: COST_UNITS[name] for name in limits},
                            reference_eps=ref.offered_eps if ref else None, reference=dict(ref.costs) if ref else {},
                            reference_windows=ref.windows if ref else 0,
                            noise_allowance=self.cost_noise.allowances(limits, ref))

    def revert(self, config: Config) -> Decision:
        """Put `config` (the one the run started from) back through the realizer, and record it."""
        try:
            current = self.pipeline.current()
            decision = Decision(window=self.window, t_s=self.t_s, config=dict(current), observed=_unobserved(0.0),
                                action=Action.REVERT, reason="on exit: back to the config the run started from",
                                change=_change(current, config))
            outcome = self.realizer.realize(config) if current != config else None
        except PipelineUnavailable as err:
            decision = Decision(window=self.window, t_s=self.t_s, config={}, observed=_unobserved(0.0),
                                action=Action.REVERT, reason=f"on exit: pipeline unavailable ({err}), not reverted")
        else:
            if outcome is not None and outcome.kind is OutcomeKind.REFUSED:
                decision.reason = f"on exit: reverting failed ({outcome.message}); the config in force stays"
                decision.change = {}
        return self._record(decision)

    def run(self, windows: int | None, on_decision: Callable[[Decision], None] | None = None,
            wall_s_per_window: float = 0.0) -> int:
        """Warm up, then step until `windows` steps (None: no limit) are done or `stop` is set; returns the steps.

        Each window lasts at least `wall_s_per_window` of wall time, spent before it is measured, as a live
        window's is; `stop` cuts that wait short and the window is then measured and recorded at once.
        """
        self.warm_up()
        done = 0
        started = time.monotonic()
        while (windows is None or done < windows) and not self.stop.is_set():
            self.stop.wait(max(0.0, wall_s_per_window - (time.monotonic() - started)))
            started = time.monotonic()
            decision = self.step(last=windows is not None and done + 1 == windows)
            done += 1
            if on_decision:
                on_decision(decision)
        return done
