"""A pool's changes, canary first: what the daemon measures and how it realizes a config, for a pool of
several nodes.

A candidate goes to the plan's canary nodes only (`realize`: outcome CANARY); the pool's other nodes keep
the promoted config and are the controls. The next full window judges it (`conclude`, with
`models.canary.judge_canary`): the change of the canary's P95 against the window before the change, minus
the same change on the controls over the same windows, with its interval. Load that moves the whole pool
cancels out of that comparison.
- Unclear: the canary runs one more window and is judged again over all its windows together, up to
  `canary_max_windows` (a deployment's pool setting); still unclear after them, it is taken back.
- Better: promoted to the other nodes in the plan's steps (at most `max_unavailable` at once). Each
  node's change goes through its agent, which checks health and rolls back what fails: such a node
  stays on the promoted config alone, the others keep the candidate. Each step is judged on its own
  window too (`models.canary.judge_step`): a newly promoted node's P95 change against the nodes whose
  config held. The canary's traffic is not every node's: a node clearly worse takes the whole
  promotion back (every node to the previous config); an unclear one goes on, as the canary showed the
  candidate better.
- Worse: the canary nodes go back to the promoted config.
A config the pool ran in full before (the one a run started from, an incumbent measured again, a
rollback) was judged then: it goes to every node at once, in the same steps, not judged again (APPLIED).
The judgement is an `Outcome` (PROMOTED, REVERTED, TAKEN_BACK) naming the candidate, its effect and interval,
the canary windows it rests on, and the observation the learner is told instead of a raw window: the
window's P95 is the canary's, scaled by how the controls' P95 moved since the window before the change,
with the standard deviation the judgement's interval implies (`Observation.p95_sd_s`); a promotion taken
back is told worse by the share the worst node's P95 rose. A window that follows a restart only settles the
canary (or a step) and judges nothing. After a judgement the pool measures one window of every node on the
promoted config (after a settle window when that took a restart): the next candidate's baseline. A window
with nothing on trial concludes where the pool stands: APPLIED (the promoted config on every node), or
CANARY (a candidate not judged yet).

Each node's version and state are written to the state file after every step, and the phase before the nodes
change, so a daemon killed at any point finds the pool's rollout as far as it got when it restarts, and puts every
node on one config: it finishes a promotion that was judged better (its remaining steps are not judged one by one),
finishes taking back a promotion a step showed worse, and takes back a canary that was not judged yet (or was still
being put on its nodes), however many windows it had run. What it found and did is the rollout's `recovered` until
the pool's next window, and the daemon records it as its first decision (`recover`).

A node whose agent does not answer a change (cut off, or its answer lost: it may have made the change) is marked
unreachable, never placed on a version it may not run: the rollout stops where it stands, its phase kept, and the pool
is unavailable (the daemon holds, naming the node) until every node answers; then it is finished as after a restart,
and `recovered` says so. No new candidate goes on the canary while a node of the pool does not answer.
"""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from statistics import NormalDist
from typing import Callable, Mapping, Protocol

import numpy as np

from agents.probe.metrics import LATENCY_BUCKETS_S
from controller.live import LivePipeline
from controller.pipelines import ApplyReport, PipelineUnavailable, TwinPipeline
from controller.realizer import NodesReport, NodeVersions, Outcome, OutcomeKind
from controller.state import NodeRolloutReport, RolloutReport
from controller.telemetry import PrometheusTelemetry
from models.canary import (MAX_BASELINE_GAP, CanaryJudgement, CanaryOutcome, LatencyHistogram, judge_canary, judge_step,
                           merge_windows)
from models.observation import Observation
from models.rollout import CanaryNext, NodeState, NodeVersion, RolloutPlan, canary_next
from models.space import Config


class NodeConfig(Protocol):
    """One node's config, changed through its agent (a `LivePipeline` over that node's agent is one)."""

    def apply(self, config: Config) -> ApplyReport: ...

    def current(self) -> Config: ...


@dataclass(frozen=True)
class PoolWindow:
    """One window of a pool: the whole pool's observation and each node's end-to-end latencies."""

    observation: Observation
    latency: dict[str, LatencyHistogram]


class PoolWindows(Protocol):
    def observe(self, seconds: float) -> PoolWindow:
        """Measure the next `seconds`; `PipelineUnavailable` when that window cannot be read."""
        ...

    def close(self) -> None:
        """Let go of what it holds (agent clients, telemetry)."""
        ...


KNOWN_CONFIGS = 20  # the latest configs the pool ran in full, which go back to every node at once
BASELINE_RATIOS = 20  # the latest baselines whose median is where a canary usually stands against the controls


class Phase(StrEnum):
    STEADY = "steady"  # every node runs the promoted config (or failed on the last candidate)
    CANARY = "canary"  # the canary nodes run the candidate, not judged yet
    PROMOTING = "promoting"  # judged better: going to the other nodes step by step
    TAKING_BACK = "taking_back"  # a step showed a node worse: every node going back to the promoted config


@dataclass
class RolloutState:
    """What the state file holds: the pool's promoted config, the candidate, and each node's record."""

    promoted: dict
    version: int = 0  # of the promoted config; a candidate is version + 1
    candidate: dict | None = None
    phase: Phase = Phase.STEADY
    nodes: list[NodeVersion] = field(default_factory=list)
    judgement: str = ""
    known: list[dict] = field(default_factory=list)  # configs the pool ran in full, the latest last
    # the canary's P95 over the controls' in the promoted version's baselines (`CanaryPool._usual_ratio`)
    baseline_ratios: list[float] = field(default_factory=list)
    recovered: str = ""  # what a restarted daemon found half done and did, until the pool's next window


@dataclass
class Trial:
    """A candidate on trial on the canary: the window before the change, the ratio the canary's P95 usually keeps
    to the controls', the canary's full windows since the change, and a window of it that could not be read
    (the trial is then judged on the windows before it)."""

    before: PoolWindow
    usual_ratio: float
    windows: list[PoolWindow]
    unread: str = ""


class CanaryPool:
    """A pool of two or more nodes: measured as one pipeline (`Measured`), every change realized canary
    first (`Realizer`); `node_versions` says what each node's agent runs (none for twins)."""

    def __init__(self, nodes: Mapping[str, NodeConfig], windows: PoolWindows, plan: RolloutPlan,
                 state_file: Path | None = None, *, max_windows: int, confidence: float = 0.95,
                 node_versions: Callable[[], NodeVersions] = dict) -> None:
        if not plan.steps:
            raise ValueError("plan: a canary pool needs control nodes besides its canaries")
        if max_windows < 1:
            raise ValueError(f"canary_max_windows: {max_windows} is below 1")
        self.max_windows = max_windows
        self.nodes = dict(nodes)
        self.windows = windows
        self.plan = plan
        self.state_file = state_file
        self.confidence = confidence
        self.node_versions = node_versions
        self._before: PoolWindow | None = None  # the last window observed: the baseline of a new canary
        self._settling = False  # the candidate restarted the canary: its first window is not judged
        self._trial: Trial | None = None  # the candidate's trial, from the canary's first full window
        # the last promotion's step judgements: node -> its judgement and its P95 before its step
        self._step_judgements: dict[str, tuple[CanaryJudgement, float]] = {}
        started = dict(self.nodes[plan.canary[0]].current())
        self.state = self._load() or RolloutState(started, known=[started])
        if not self.state.nodes:
            self.state.nodes = [NodeVersion(node, 0, NodeState.PROMOTED) for node in self._order()]
        self._recover()

    # -- what the daemon measures --------------------------------------------------------------------

    def close(self) -> None:
        self.windows.close()

    def current(self) -> Config:
        """The candidate while it is on the canary, else the promoted config."""
        return Config(self.state.candidate if self.state.phase is Phase.CANARY else self.state.promoted)

    def observe(self, seconds: float) -> Observation:
        """Measure the pool, keeping each node's latencies: the window before a change is the canary's
        baseline, and the canary's full windows after it are its trial, which `conclude` judges (a window that
        settles the canary's restart is neither). What a restart recovered has been said by then."""
        if self.state.recovered:
            self.state.recovered = ""
            self._save()
        if self._silent():
            self._resume(seconds)
        try:
            window = self.windows.observe(seconds)
        except PipelineUnavailable as err:
            if self._trial is not None:
                self._trial.unread = f"window {len(self._trial.windows) + 1} unread: {err}"
            raise
        if self.state.phase is not Phase.CANARY or self._before is None:
            self._before = window
        elif self._settling:
            self._settling = False
        elif self._trial is None:
            self._trial = Trial(self._before, self._usual_ratio(self._before), [window])
        elif not self._trial.unread:
            self._trial.windows.append(window)
        return window.observation

    # -- the Realizer seam ----------------------------------------------------------------------------

    def realize(self, config: Config) -> Outcome:
        """A new config goes to the canary nodes (CANARY); the promoted one takes a canary back, and a config
        the pool ran before goes to every node (APPLIED); REFUSED when a node would not take it."""
        if self.state.phase is Phase.CANARY:
            self._trial = None
            self._revert_canary("replaced before it was judged")
        if config == Config(self.state.promoted):
            return Outcome(OutcomeKind.APPLIED, config, "the pool's promoted config")
        if dict(config) in self.state.known:
            return self._roll_out_known(config)
        silent = [node for node, versions in self.node_versions().items() if versions is None]
        if silent:  # a promotion could not reach them: nothing is begun that cannot be finished
            raise PipelineUnavailable(f"{', '.join(silent)} did not answer: no candidate goes on the canary until "
                                      "every node of the pool answers")
        # written before the canary changes: a daemon that stops meanwhile finds a canary to take back
        self.state.candidate, self.state.phase = dict(config), Phase.CANARY
        self._save()
        reports = self._change(self.plan.canary, config)
        if self._silent():  # a canary node may run the candidate: taken back once every node answers
            self._set([n for n, r in reports.items() if r.ok], self.state.version + 1, NodeState.CANARY)
            self._hold(self.plan.canary)
        failed = {node: r for node, r in reports.items() if not r.ok}
        if failed:
            self._change([n for n in reports if n not in failed], Config(self.state.promoted))
            self._hold(self.plan.canary)
            self.state.candidate, self.state.phase = None, Phase.STEADY
            self._save()
            said = "; ".join(f"{node}: {r.message}" for node, r in failed.items())
            return Outcome(OutcomeKind.REFUSED, config, f"canary refused the change ({said})")
        self._set(self.plan.canary, self.state.version + 1, NodeState.CANARY)
        pause_s = max((r.pause_s for r in reports.values()), default=0.0)
        self._settling = pause_s > 0
        return Outcome(OutcomeKind.CANARY, config, f"on canary {', '.join(self.plan.canary)}", pause_s)

    def conclude(self, seconds: float) -> Outcome:
        """Judge the canary over its windows since the change: better is promoted (after its steps, or taken
        back), worse reverted, unclear judged again after one more window (EXTENDED) until `max_windows`, then
        reverted. With no canary window to judge: where the pool stands (APPLIED, or CANARY not judged yet)."""
        trial = self._trial
        if trial is None:
            if self.state.phase is Phase.CANARY:
                return Outcome(OutcomeKind.CANARY, self.current(), "on the canary, not judged yet",
                               rollout=self.rollout())
            return Outcome(OutcomeKind.APPLIED, self.current(),
                           f"the pool's promoted config (version {self.state.version}) on every node",
                           rollout=self.rollout())
        before, candidate, windows = trial.before, self.current(), len(trial.windows)
        after = PoolWindow(trial.windows[-1].observation, merge_windows([w.latency for w in trial.windows]))
        judgement = self._judge(before, after, trial.usual_ratio)
        if trial.unread:  # judged on what was read: unclear, so taken back
            judgement = replace(judgement, reason=f"{judgement.reason} ({trial.unread})")
        elif canary_next(judgement.outcome, windows, self.max_windows) is CanaryNext.EXTEND:
            self.state.judgement = f"unclear over {windows} window(s), judged again with one more: " \
                                   f"{judgement.reason}"
            self._save()
            return Outcome(OutcomeKind.EXTENDED, candidate, self.state.judgement, judgement=judgement,
                           windows=windows, rollout=self.rollout())
        self._trial = None
        self.state.judgement = judgement.reason
        told = (self._told_p95_s(judgement, before, after), self._told_sd_s(judgement))
        kind = OutcomeKind.REVERTED
        if judgement.outcome is CanaryOutcome.BETTER:
            changed, taken_back = self._promote(seconds, after)
            kind = OutcomeKind.TAKEN_BACK if taken_back else OutcomeKind.PROMOTED
            if taken_back:
                judgement, *told = self._told_worse(_p95(before, self.plan.canary))
        else:
            changed = self._revert_canary(f"{judgement.outcome}: {judgement.reason}")
        # The next candidate's baseline is a window in which every node runs the promoted config, settled:
        # the judged window had the canary on the candidate, and a restart's window is not steady.
        if any(report.pause_s > 0 for report in changed.values()):
            self.windows.observe(seconds)
        self._before = self.windows.observe(seconds)
        # The told P95 is the candidate's at the load of the window before the change: so are the load and the
        # throughput (at the judged window's ratio), or the daemon would read a load move into it.
        offered_eps = before.observation.offered_eps
        told_observation = replace(after.observation, p95_s=told[0], offered_eps=offered_eps,
                                   throughput_eps=after.observation.throughput_ratio * offered_eps, p95_sd_s=told[1])
        return Outcome(kind, candidate, self.state.judgement, observation=told_observation, judgement=judgement,
                       windows=windows, rollout=self.rollout())

    def report(self) -> NodesReport:
        """Each node's components and the config version each runs (as its agent says), and the rollout."""
        return NodesReport(self.node_versions(), self.rollout())

    def _told_p95_s(self, judgement: CanaryJudgement, before: PoolWindow, after: PoolWindow) -> float:
        """The candidate's P95 at the load of the window before it: the canary's P95 scaled by how the
        controls' P95 moved (load acts as a factor, and a P95 stays positive). An unclear effect is told as
        measured too, with its wide spread (`_told_sd_s`): told none, a learner takes its search for done.
        The daemon takes as its incumbent only what the pool promoted, so noise never makes one."""
        if not math.isfinite(judgement.effect_s):
            return after.observation.p95_s
        controls = self._controls()
        return _p95(after, self.plan.canary) * _p95(before, controls) / _p95(after, controls)

    def _told_sd_s(self, judgement: CanaryJudgement) -> float | None:
        """How sure the told P95 is: the standard deviation its interval implies (a normal one of the same
        width), so the learner weighs a loose judgement less; an unclear one too, whose effect lies anywhere in
        it. None without an interval (the learner's own noise estimate applies)."""
        if not (math.isfinite(judgement.low_s) and math.isfinite(judgement.high_s)):
            return None
        return (judgement.high_s - judgement.low_s) / (2 * NormalDist().inv_cdf(0.5 + self.confidence / 2))

    # -- the rollout --------------------------------------------------------------------------------

    def rollout(self) -> RolloutReport:
        """Where the pool's rollout stands: its phase, the promoted version, each node's, the last judgement."""
        return RolloutReport(phase=str(self.state.phase), promoted_version=self.state.version,
                             judgement=self.state.judgement, recovered=self.state.recovered,
                             nodes={v.node: NodeRolloutReport(version=v.version, state=str(v.state),
                                                              judgement=v.judgement)
                                    for v in self.state.nodes})

    def _order(self) -> list[str]:
        return [*self.plan.canary, *self._controls()]

    def _controls(self) -> list[str]:
        return [node for step in self.plan.steps for node in step]

    def _ratio(self, window: PoolWindow) -> float | None:
        """The canary's P95 over the controls' in `window`; None where a node has no latency in it."""
        if any(n not in window.latency for n in self._order()):
            return None
        canary_s, controls_s = _p95(window, self.plan.canary), _p95(window, self._controls())
        return canary_s / controls_s if canary_s > 0 and controls_s > 0 else None  # False for NaN (no events)

    def _usual_ratio(self, baseline: PoolWindow) -> float:
        """Where the canary's P95 usually stands against the controls' on the promoted version, for a canary
        whose `baseline` is judged against it: the median ratio of the version's baselines so far (each kept
        when within `MAX_BASELINE_GAP` of the median before it), the first baseline's own ratio (the window
        after a promotion or the start: no trial's backlog in it), or 1 when no node could be read.

        Nodes of one pool may carry different rates, and once a config's latency follows the rate (a batch
        that fills), their P95s part for good: judged against a ratio of 1, every later canary would start
        "off its controls" and none would be judged again (bench.fleet run 2)."""
        ratios, ratio = self.state.baseline_ratios, self._ratio(baseline)
        usual = float(np.exp(np.median(np.log(ratios)))) if ratios else ratio or 1.0
        if ratio is not None and abs(ratio / usual - 1.0) <= MAX_BASELINE_GAP:
            ratios[:] = [*ratios, ratio][-BASELINE_RATIOS:]
        return usual

    def _judge(self, before: PoolWindow, after: PoolWindow, usual_ratio: float) -> CanaryJudgement:
        """The canary nodes against the controls from `before` to `after`."""
        missing = sorted({n for window in (before, after) for n in self._order() if n not in window.latency})
        if missing:
            return CanaryJudgement(CanaryOutcome.UNCLEAR, math.nan, math.nan, math.nan,
                                   f"no latency of node(s) {', '.join(missing)} in the windows compared")

        def merged(window: PoolWindow, nodes: list[str] | tuple[str, ...]) -> LatencyHistogram:
            return LatencyHistogram.merge(window.latency[n] for n in nodes)
        return judge_canary(merged(before, self.plan.canary), merged(after, self.plan.canary),
                            [before.latency[n] for n in self._controls()], [after.latency[n] for n in self._controls()],
                            confidence=self.confidence, seed=self.state.version, usual_ratio=usual_ratio)

    def _promote(self, seconds: float, judged: PoolWindow) -> tuple[dict[str, ApplyReport], bool]:
        """The candidate to the other nodes step by step, each step judged on a window of its own (the first
        against the `judged` one): the reports of every change, and whether a step took the promotion back."""
        self.state.phase = Phase.PROMOTING
        self._set(self.plan.canary, self.state.version + 1, NodeState.PROMOTED)
        self._set(self._controls(), self.state.version, NodeState.PENDING)
        reports = self._finish_promotion(seconds, judged)
        if self.state.phase is Phase.STEADY:
            return reports, False
        return reports | self._roll_back_promotion(), True

    def _told_worse(self, replaced_p95_s: float) -> tuple[CanaryJudgement, float, float | None]:
        """A promotion taken back: the judgement of the node it hurt most, and the candidate's P95 as told: the
        replaced config's at the canary's load before the change (`replaced_p95_s`), risen by the share that
        node's rose net of the controls, with the spread of its interval in the same proportion. Worse than
        what it replaced, as on the node it hurt: the canary's gain is not the pool's."""
        judgement, node_p95_s = max((j for j in self._step_judgements.values() if j[0].outcome is CanaryOutcome.WORSE),
                                    key=lambda j: j[0].effect_s / j[1])
        sd = self._told_sd_s(judgement)
        scale = replaced_p95_s / node_p95_s
        return judgement, replaced_p95_s + judgement.effect_s * scale, None if sd is None else sd * scale

    def _roll_out_known(self, config: Config) -> Outcome:
        """A config the pool ran before (judged then) goes to every node, in the plan's steps."""
        self.state.candidate, self.state.phase = dict(config), Phase.PROMOTING
        self._set(self._order(), self.state.version, NodeState.PENDING)
        reports = self._finish_promotion()
        failed = "; ".join(f"{node}: {r.message}" for node, r in reports.items() if not r.ok)
        pause_s = max((r.pause_s for r in reports.values()), default=0.0)
        if failed:
            return Outcome(OutcomeKind.REFUSED, config, f"not on every node ({failed})", pause_s)
        return Outcome(OutcomeKind.APPLIED, config,
                       f"a config the pool ran before, on every node (version {self.state.version})", pause_s)

    def _finish_promotion(self, seconds: float | None = None, last: PoolWindow | None = None
                          ) -> dict[str, ApplyReport]:
        """The candidate on every node still pending, step by step; the pool's promoted config then. Given
        `seconds` and the `last` window before the first step, each step is judged on the window after it
        (after a settle window when it restarted); a node clearly worse stops the promotion, its phase left
        PROMOTING for `_roll_back_promotion`."""
        candidate, version = Config(self.state.candidate), self.state.version + 1
        reports: dict[str, ApplyReport] = {}
        self._step_judgements.clear()
        for step in (self.plan.canary, *self.plan.steps):
            pending = [n for n in step if self._record(n).state in (NodeState.PENDING, NodeState.UNREACHABLE)]
            changed = self._change(pending, candidate)
            for node, report in changed.items():
                # the agent rolled a node that failed its health check back: it stays on the promoted config
                self._set([node], version if report.ok else self.state.version,
                          NodeState.PROMOTED if report.ok else NodeState.ROLLED_BACK)
                reports[node] = report
            self._hold(pending)
            promoted = [n for n, r in changed.items() if r.ok]
            if seconds is None or last is None or not promoted:
                continue
            if any(r.pause_s > 0 for r in changed.values()):
                self.windows.observe(seconds)
            window = self.windows.observe(seconds)
            if self._judge_step(last, window, promoted, [n for n in step if n not in promoted]):
                return reports
            last = window
        self.state = replace(self.state, promoted=dict(candidate), version=version, candidate=None,
                             phase=Phase.STEADY, known=self._known_with(dict(candidate)), baseline_ratios=[])
        self._save()
        return reports

    def _judge_step(self, before: PoolWindow, after: PoolWindow, promoted: list[str], changed: list[str]) -> bool:
        """Judge each node `promoted` by a step against the nodes whose config held (none of the step's
        `changed` ones, nor a failed one); record each; whether any is clearly worse."""
        held = [n for n in self._order() if n not in promoted and n not in changed
                and self._record(n).state is not NodeState.FAILED]
        judged = judge_step(before.latency, after.latency, promoted, held, confidence=self.confidence,
                            seed=self.state.version)
        for node, judgement in judged.items():
            record = self._record(node)
            self._set([node], record.version, record.state, f"{judgement.outcome}: {judgement.reason}")
            self._step_judgements[node] = (judgement, before.latency[node].quantile_s())
        worse = [n for n, j in judged.items() if j.outcome is CanaryOutcome.WORSE]
        if worse:
            self.state.judgement = (f"promotion taken back: {', '.join(worse)} worse after its step ("
                                    + "; ".join(f"{n}: {judged[n].reason}" for n in worse) + ")")
        return bool(worse)

    def _roll_back_promotion(self) -> dict[str, ApplyReport]:
        """Every node that took the candidate back on the promoted config, in the plan's steps (at most
        `max_unavailable` restarting at once): a step showed it worse."""
        self.state.phase = Phase.TAKING_BACK
        self._save()
        promoted = Config(self.state.promoted)
        reports: dict[str, ApplyReport] = {}
        for step in (self.plan.canary, *self.plan.steps):
            taking = [n for n in step if self._record(n).state in (NodeState.PROMOTED, NodeState.UNREACHABLE)]
            for node, report in self._change(taking, promoted).items():
                self._set([node], self.state.version, NodeState.ROLLED_BACK if report.ok else NodeState.FAILED,
                          self._record(node).judgement)
                reports[node] = report
            self._hold(taking)
        pending = [v.node for v in self.state.nodes if v.state is NodeState.PENDING]
        self._set(pending, self.state.version, NodeState.PROMOTED)  # never left the promoted config
        self.state.candidate, self.state.phase = None, Phase.STEADY
        self._save()
        return reports

    def _revert_canary(self, why: str) -> dict[str, ApplyReport]:
        promoted = Config(self.state.promoted)
        reports = self._change(self.plan.canary, promoted)
        for node, report in reports.items():
            self._set([node], self.state.version, NodeState.ROLLED_BACK if report.ok else NodeState.FAILED)
        self._hold(self.plan.canary)
        self.state.candidate, self.state.phase, self.state.judgement = None, Phase.STEADY, why
        self._save()
        return reports

    def _recover(self) -> None:
        """After a restart in the middle of a rollout, every node on one config: a promotion judged better (or of a
        config the pool ran before) is finished, one a step showed worse is taken back in full, and a canary not
        judged yet is taken back. What was found and done is kept in `recovered` for the decision log."""
        phase = self.state.phase
        if phase is Phase.STEADY:
            self._adopt_what_the_nodes_run()
            return
        changed = Config(self.state.promoted).diff(Config(self.state.candidate or {}))
        found = (f"version {self.state.version + 1} ({', '.join(f'{k} {a} → {b}' for k, (a, b) in changed.items())}) "
                 f"{_FOUND[phase]}, {self._standing()}")
        try:
            done, _ = self._finish("the daemon restarted before the canary was judged")
        except PipelineUnavailable as err:  # held until the node answers: `observe` finishes it then
            done = str(err)
        self.state.recovered = f"the daemon restarted in the middle of a rollout: found {found}; {done}"
        self._save()

    def _adopt_what_the_nodes_run(self) -> None:
        """A pool resumed steady whose nodes all run one config other than the promoted one (changed outside its
        rollout while the daemon was stopped: redeployed, restarted on their files, edited by hand) takes that config
        as its promoted version: a canary taken back to the stored one would stand apart from its controls, and no
        later canary would start from a common baseline (a bench.fleet rerun on a kept state: 0 of 7 judged)."""
        try:
            running = [dict(self.nodes[node].current()) for node in self._order()]
        except PipelineUnavailable:
            return  # a node that does not answer is the rollout's to wait for, as found
        if any(config != running[0] for config in running) or running[0] == self.state.promoted:
            return
        changed = Config(self.state.promoted).diff(Config(running[0]))
        self.state.promoted, self.state.version = running[0], self.state.version + 1
        self.state.known = self._known_with(running[0])
        self.state.baseline_ratios = []  # of the stored version, not of this one
        self.state.recovered = (f"every node runs a config other than the promoted version {self.state.version - 1} "
                                f"({', '.join(f'{k} {b} where it was {a}' for k, (a, b) in changed.items())}): changed "
                                f"outside the rollout, taken as version {self.state.version}")
        self._set(self._order(), self.state.version, NodeState.PROMOTED)

    def _known_with(self, config: dict) -> list[dict]:
        """The configs the pool ran in full, `config` the latest, at most `KNOWN_CONFIGS`."""
        return [*[c for c in self.state.known if c != config][-(KNOWN_CONFIGS - 1):], config]

    def _finish(self, why_canary: str) -> tuple[str, dict[str, ApplyReport]]:
        """Every node on one config from a rollout left half done (see `_recover`): what was done and where the nodes
        stand, in words, and each change's report; `PipelineUnavailable` while a node does not answer."""
        phase = self.state.phase
        if phase is Phase.PROMOTING:
            did, reports = "finished the promotion, its remaining steps not judged", self._finish_promotion()
        elif phase is Phase.TAKING_BACK:
            did, reports = f"finished taking it back ({self.state.judgement})", self._roll_back_promotion()
        else:
            did, reports = "took the canary back", self._revert_canary(why_canary)
        said = "; ".join(f"{node}: {report.message}" for node, report in reports.items()) or "no node to change"
        versions = {v.version for v in self.state.nodes}
        failed = any(v.state is NodeState.FAILED for v in self.state.nodes)  # on a version it may not run
        where = f"every node on version {min(versions)}" if len(versions) == 1 and not failed else \
            f"not every node on one version: {self._standing()}"
        return f"{did} ({said}); {where}", reports

    def _resume(self, seconds: float) -> None:
        """A rollout held because a node did not answer, finished as after a restart once every node answers
        (`recovered` says what was found and done; a restart's window settles); while one does not, the window
        passes unjudged and the pool stays unavailable."""
        found = self._standing()
        try:
            done, reports = self._finish("a canary node did not answer before the canary was judged")
        except PipelineUnavailable:
            with suppress(PipelineUnavailable):
                self.windows.observe(seconds)
            raise
        self.state.recovered = f"every node answers again: found {found}; {done}"
        self._save()
        if any(report.pause_s > 0 for report in reports.values()):
            self.windows.observe(seconds)

    def _silent(self) -> list[NodeVersion]:
        """The nodes whose agent did not answer their last change."""
        return [v for v in self.state.nodes if v.state is NodeState.UNREACHABLE]

    def _hold(self, changed: list[str] | tuple[str, ...]) -> None:
        """The rollout stopped where it stands, its phase kept, when a node just `changed` is unreachable:
        `PipelineUnavailable` naming each (the daemon holds), until `observe` finds every node answering and
        finishes it."""
        silent = [v for v in self._silent() if v.node in changed]
        if silent:
            self._save()
            raise PipelineUnavailable(
                f"{', '.join(v.node for v in silent)} did not answer in the middle of a rollout (version "
                f"{self.state.version + 1} {_FOUND[self.state.phase]}): held where it stands ({self._standing()}) "
                f"until every node answers ({'; '.join(v.judgement for v in silent)})")

    def _standing(self) -> str:
        """Each node's state and version, as the state file has them."""
        return ", ".join(f"{v.node} unreachable, last on version {v.version}" if v.state is NodeState.UNREACHABLE
                         else f"{v.node} {v.state} on version {v.version}" for v in self.state.nodes)

    def _change(self, nodes: list[str] | tuple[str, ...], config: Config) -> dict[str, ApplyReport]:
        """`config` on each of `nodes` at once (a step restarts at most that many): each answering node's report.
        A node whose agent does not answer may have made the change all the same (its answer lost): it is marked
        unreachable on the version it had and left out; the caller records the others, then `_hold`s."""
        def one(node: str) -> ApplyReport | PipelineUnavailable:
            try:
                return self.nodes[node].apply(config)
            except PipelineUnavailable as err:
                return err
        if not nodes:
            return {}
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            answers = dict(zip(nodes, pool.map(one, nodes)))
        for node, answer in answers.items():
            if isinstance(answer, PipelineUnavailable):
                self._set([node], self._record(node).version, NodeState.UNREACHABLE, str(answer))
        return {node: a for node, a in answers.items() if isinstance(a, ApplyReport)}

    def _record(self, node: str) -> NodeVersion:
        return next(v for v in self.state.nodes if v.node == node)

    def _set(self, nodes: list[str] | tuple[str, ...], version: int, state: NodeState, judgement: str = "") -> None:
        self.state.nodes = [NodeVersion(v.node, version, state, judgement) if v.node in nodes else v
                            for v in self.state.nodes]
        self._save()

    def _save(self) -> None:
        if self.state_file is None:
            return
        doc = {**asdict(self.state), "nodes": [asdict(v) for v in self.state.nodes]}
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(self.state_file)

    def _load(self) -> RolloutState | None:
        if self.state_file is None or not self.state_file.exists():
            return None
        doc = json.loads(self.state_file.read_text())
        nodes = [NodeVersion(v["node"], v["version"], NodeState(v["state"]), v.get("judgement", ""))
                 for v in doc.pop("nodes")]
        return RolloutState(**{**doc, "phase": Phase(doc["phase"]), "nodes": nodes})


# What a restarted daemon found a candidate doing, by the phase the state file was left in.
_FOUND = {Phase.CANARY: "on the canary, not judged yet", Phase.PROMOTING: "being promoted",
          Phase.TAKING_BACK: "being taken back"}


def _p95(window: PoolWindow, nodes: tuple[str, ...] | list[str]) -> float:
    return LatencyHistogram.merge(window.latency[n] for n in nodes).quantile_s()


class LivePoolWindows:
    """`PoolWindows` of a live pool: the observation of the pool's `LivePipeline` (its nodes' agents) and
    each node's latency histograms from Prometheus over the same window."""

    def __init__(self, pipeline: LivePipeline, telemetry: PrometheusTelemetry) -> None:
        self.pipeline = pipeline
        self.telemetry = telemetry

    def observe(self, seconds: float) -> PoolWindow:
        start = time.time()
        observation = self.pipeline.observe(seconds)
        return PoolWindow(observation, self.telemetry.node_histograms(start, time.time()))

    def close(self) -> None:
        self.pipeline.close()


class TwinPoolWindows:
    """`PoolWindows` of twin nodes, each a `TwinPipeline` fed its own traffic, advanced together: the
    pool's figures are the nodes' summed (rates, events, backlog, CPU), its busiest CPU share the largest
    node's, and its percentiles those of every node's events merged, as Prometheus merges the probe's
    histograms."""

    def __init__(self, nodes: Mapping[str, TwinPipeline], upper_bounds_s: tuple[float, ...] = LATENCY_BUCKETS_S
                 ) -> None:
        self.nodes = dict(nodes)
        self.upper_bounds_s = upper_bounds_s

    def observe(self, seconds: float) -> PoolWindow:
        observations, latency = [], {}
        for name, node in self.nodes.items():
            start_s = node.now_s
            observations.append(node.observe(seconds))
            latency[name] = node.twin.latency_histogram(start_s, node.now_s, self.upper_bounds_s)
        merged = LatencyHistogram.merge(latency.values())
        out = sum(o.events_out for o in observations)

        def summed(part: str) -> dict[str, float]:
            keys = {k for o in observations for k in getattr(o, part)}
            return {k: sum(getattr(o, part).get(k, 0) for o in observations) for k in keys}
        observation = Observation(
            duration_s=seconds, offered_eps=sum(o.offered_eps for o in observations),
            throughput_eps=sum(o.throughput_eps for o in observations),
            p50_s=merged.quantile_s(0.5), p95_s=merged.quantile_s(0.95), p99_s=merged.quantile_s(0.99),
            mean_s=sum(o.mean_s * o.events_out for o in observations) / out if out else 0.0,
            events_in=sum(o.events_in for o in observations), events_out=out,
            lost_events=sum(o.lost_events for o in observations),
            stage_p95_s={k: max(o.stage_p95_s.get(k, 0.0) for o in observations)
                         for k in observations[0].stage_p95_s},
            backlog_events=summed("backlog_events"), cpu_cores=summed("cpu_cores"),
            busiest_cpu_share=max((o.busiest_cpu_share for o in observations if o.busiest_cpu_share is not None),
                                  default=None),
            latency_resolution_s=self.upper_bounds_s[0])  # read from histograms, as the probe's are
        return PoolWindow(observation, latency)

    def close(self) -> None:
        pass  # twins hold nothing outside this process
