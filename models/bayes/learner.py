"""The safe Bayesian learner: minimise the pipeline's P95 subject to throughput keeping up with the load.

It is Bayesian optimisation with Gaussian processes (scikit-learn), made safe and local:
- Models. Latency is modelled stage by stage, an additive model (Add-GP-UCB, Kandasamy et al. 2015): per
  stage a GP of log P95 over the parameters that move that stage, around a prior of the waits its timers
  impose (`stages`). Throughput is one GP of the output margin (output / offered − 1, the spare CPU of a
  window that kept up added, `headroom`) over every tuned parameter. The offered load is an input of
  every model, a context the learner does not choose (contextual GP bandits, Krause & Ong 2011).
- Safety (SafeOpt, Sui et al. 2015). A candidate is proposed only where the margin's lower confidence
  bound clears the policy's floor, each budgeted part's CPU upper bound is within the policy's budget
  (`costs`), and, with a P95 ceiling, the P95's upper bound stays under it. The
  margin's prior mean is 0 with a fixed spread, so far from every measured window nothing is known safe
  and the safe set grows outward from configs seen to keep up; the first config is the running one. A timer
  the load hides (a flush timeout beside its batch, `max_backoff`) stays under the cube's ceiling for it, where
  the run found it: a lull's events wait it out in full and no window prices it (`latency_bounds.lull_ceilings`);
  a candidate above one is not safe.
- Trust region (TuRBO, Eriksson et al. 2019). Candidates are drawn in a box around the daemon's
  incumbent (`trust_region`); the box doubles after successive improvements and halves after successive
  failures, an infeasible window counting as several.
- Acquisition (GP-UCB, Srinivas et al. 2010). A candidate's gain is the incumbent's predicted P95 minus
  the candidate's optimistic P95 (each stage's exp(μ − κσ), summed), or its expected P95 (κ = 0) in the
  phases where only expectations count; a change that restarts a component must also repay its pause's delay
  on the events within the policy's horizon (`rules.restart_price_s`).
- Goal-oriented expansion (GoOSE, Turchetta et al. 2019). Before it converges, where the best gain lies in a
  config the cost models expect within the CPU budget but cannot vouch for, it measures the safe config
  nearest to it (`rules.budget_expander`), so that the set known within budget grows toward the goal.
- Converge and stay. A change is proposed only when its gain beats a threshold: `confidence_z` × the
  noise of a window and `min_gain` of the P95 (`noise`). When nothing safe, in the trust region or beyond
  it, beats it, the learner holds the incumbent (`Phase.CONVERGED`) until the load moves, a guardrail
  breaks, the incumbent's P95 drifts or the policy changes (`Reopened`); the search then opens again.
- Pre-screening (optional). The best few candidates are simulated on a twin (`TwinScreen`) and only
  one it expects to keep up is proposed (`rules.screen_pick`).

`_search` makes one window's decision from the rules in `rules`, each a named function. Every number of its own
is in `LearnerSettings` (those it shares with the daemon and the screen are where they act: `LOAD_SHIFT`,
`SPARE_MAX`, `SCREEN_STEP`); docs/learner.md describes the learner in full.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from models.bayes import rules
from models.bayes.costs import CostModels, log_shares
from models.bayes.history import History
from models.bayes.inputs import context_feature, features
from models.bayes.noise import Threshold, alike_repeats, pooled_noise_s, threshold
from models.bayes.phase import Converged, Phase, Reopened, Reopening, SearchState, fresh_search
from models.bayes.rules import Pool
from models.bayes.settings import LearnerSettings
from models.bayes.stages import StageModels
from models.bayes.surrogate import margin_model
from models.bayes.trust_region import candidates
from models.budget import BudgetLimits, budgeted_costs
from models.headroom import spare_margins
from models.learning import Context, Suggestion, TunedCube, load_moved
from models.observation import Observation
from models.policy import Policy
from models.screen import TwinScreen
from models.space import Config
from models.verdict import BreachKind, Drain, Verdict, output_margin

MapFn = Callable[[Callable, Iterable], Iterable]


@dataclass(frozen=True)
class _Look:
    """What one window's decision starts from: the incumbent and its coordinates, the trust region's scored
    candidates, the incumbent's predicted and measured P95, a window's noise there and the repeated windows it
    rests on, whether the incumbent is far from capacity, and the gain a change must promise."""

    incumbent: Config
    context: Context
    center: np.ndarray
    pool: Pool
    p95_s: float
    measured_s: float
    noise_s: float
    dof: int
    far_from_capacity: bool
    limit: Threshold


@dataclass(frozen=True)
class _Ranking:
    """A pool's candidates scored by the gain that counts (expected or optimistic), net of the price of the restart
    each makes (`rules.restart_prices_s`)."""

    pool: Pool
    gains_s: np.ndarray
    expected: bool
    prices_s: np.ndarray

    @property
    def kind(self) -> str:
        return "predicted" if self.expected else "optimistic"

    @property
    def best_s(self) -> float:
        return float(np.max(self.gains_s))

    def below(self, limit: Threshold) -> str:
        if not math.isfinite(self.best_s):  # every candidate unsafe, or barred by the no-loss rule
            return f"no candidate safe to gain by ({self.kind} gains < {limit.gain_s * 1e3:.1f} ms)"
        return f"best {self.kind} gain {self.best_s * 1e3:.1f} ms < {limit.gain_s * 1e3:.1f} ms"


class SafeBayesLearner:
    """Minimise P95 subject to throughput keeping up, safely, around the incumbent.

    `settings` are what it is told (`LearnerSettings`); what it learns is its history, its models and where its
    search stands (`search`: phase, trust region, windows, why it re-opened)."""

    def __init__(self, cube: TunedCube, start: Config, *, stage_params: Mapping[str, Sequence[str]] | None = None,
                 seed: int = 0, screen: TwinScreen | None = None, parallel_map: MapFn = map,
                 settings: LearnerSettings = LearnerSettings()) -> None:
        self.cube = cube
        self.start = cube.policy.enforce(start)
        self.settings = settings
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.stage_params = dict(stage_params) if stage_params else None
        self.screen = screen
        self.parallel_map = parallel_map
        # learned state
        self.history = History()
        self._new_models()
        self.search: SearchState = fresh_search(settings)
        self._current = self.start  # the config the pipeline runs (last told or proposed)
        self._noise_s = 0.0  # the last estimate of a window's noise
        self._resolution_s = settings.finest_s  # the latest window's latency step (`latency_resolution_s`)
        self._told = 0
        self._screened: dict[Config, float] = {}  # the twin ratios of the last screen's configs
        self._behind: tuple[Config, float] | None = None  # the config and load of the last window, if it fell behind
        self._over_budget: tuple[Config, float] | None = None  # ... if it went over budget
        self._limits = BudgetLimits()  # the budgets as the load sets them, as the daemon last said

    @property
    def policy(self) -> Policy:
        return self.cube.policy

    @property
    def margin_floor(self) -> float:
        return self.policy.min_throughput_ratio - 1.0

    @property
    def converged(self) -> bool:
        """Whether the search has stopped: the incumbent is held until something re-opens it."""
        return self.search.phase is Phase.CONVERGED

    def _new_models(self) -> None:
        self.stages = StageModels(self.cube, self.stage_params, self.settings, self.seed)
        self._margin_gp = margin_model(self.cube.dims + 1, self.settings, self.seed)
        self.costs = CostModels(self.cube, self.settings, self.seed)

    def _features(self, config: Config, context: Context) -> np.ndarray:
        return features(self.cube, config, context, self.settings)

    # --- telling ---------------------------------------------------------------------------------------------

    def update_policy(self, policy: Policy) -> None:
        """Adopt new bounds and pins: re-encode every observation in the new cube and refit."""
        self.cube = self.cube.with_policy(policy)
        self.start = policy.enforce(self.start)
        h = self.history
        h.x = [self._features(c, ctx) for c, ctx in zip(h.configs, h.contexts)]
        self._new_models()
        if h.configs:
            self._fit()
        self._reopen(Reopening(Reopened.POLICY_CHANGED, "the policy changed"))

    def tell(self, config: Config, context: Context, observation: Observation, verdict: Verdict) -> None:
        self._current = config
        self._resolution_s = max(observation.latency_resolution_s, self.settings.finest_s)
        if verdict.drain is not Drain.NONE:
            # Its P95 is the queue left from before (a rollback's, a slow config's), its ratio above 1 the drain:
            # neither is the config's, and told as the config's they set the noise of every later window.
            return
        # An overload a window met before this one (of this config or another) is the load's, not the config's: its
        # P95 is the backlog's, and TuRBO counts a failure of the region only where the candidate failed. Counted, a
        # diurnal crest above every config's capacity collapsed the region and spent the search's young windows
        # (zoo 2722313664: 10 windows left after the backlog drained, searched 0.1 wide on expected gains, 10x).
        overload = verdict.behind and rules.overload_shared(
            context.offered_eps, observation.throughput_eps, [c.offered_eps for c in self.history.contexts],
            self.history.shipped_behind_eps)
        self.search.windows += not overload
        self._behind = (config, context.offered_eps) if verdict.behind else None
        self._over_budget = (config, context.offered_eps) if verdict.over_budget else None
        stage_log_p95 = {} if overload else self.stages.told(observation, self._resolution_s)
        x = self._features(config, context)
        costs = budgeted_costs(observation) if verdict.own_load else {}
        self.costs.told(x, costs, self._limits.at(context.offered_eps))
        self.history.add(config, context, x, stage_log_p95,
                         self._told_margin(config, observation, verdict), observation, costs, verdict.ok,
                         verdict.behind, self._screened.get(config, math.nan))
        self.history.keep(self.settings.history_recent, self.settings.history_best)
        self._told += 1
        self._watch_held(config, context, observation, verdict)
        if not overload and self.search.region.update(verdict.ok, observation.p95_s, self._noise_s, self.settings):
            self.search.collapse()
        self._fit()

    def _told_margin(self, config: Config, observation: Observation, verdict: Verdict) -> float:
        """The margin the throughput model learns of a window: `output_margin`, or below the floor, by as much as
        the window broke a throughput rule by, where it broke one (a window can breach the backlog rule with a
        ratio above 1: its output drained the queue it had let grow, or a micro-batch fell due)."""
        margin = max(output_margin(observation, self.policy, config), -1.0)
        behind = sum(b.excess for b in verdict.breaches if b.kind.throughput)
        if behind > 0:
            margin = min(margin, self.margin_floor * (1.0 + behind))
        return margin

    def _watch_held(self, config: Config, context: Context, observation: Observation, verdict: Verdict) -> None:
        """While converged, re-open the search when a window breaks a guardrail or the held incumbent's P95 drifts."""
        held = self.search.converged
        if held is None:
            return
        if not verdict.ok:
            budget_only = all(b.kind is BreachKind.BUDGET for b in verdict.breaches)
            self._reopen(Reopening(Reopened.OVER_BUDGET if budget_only else Reopened.GUARDRAIL,
                                   f"guardrail: {'; '.join(verdict.messages)}"))
        elif config == held.config and not load_moved(held.offered_eps, context.offered_eps):
            held.since.append(observation.p95_s)
            drift = held.drift(self.settings)
            if drift is not None:
                self._reopen(drift)

    def _reopen(self, reopening: Reopening) -> None:
        """Search again from a fresh trust region, if the search has stopped or collapsed: something changed that
        the models it stopped by did not see."""
        if self.search.phase is not Phase.SEARCHING:
            self.search = fresh_search(self.settings, reopening)

    def _fit(self) -> None:
        h = self.history
        x = np.array(h.x)
        # Hyperparameters settle after a few windows; refitting them on every window made tell() take seconds.
        every = self.settings.refit_every
        optimize = self._told <= every or self._told % every == 0
        self.stages.fit(h, x, self.start, self._resolution_s, optimize)
        self._margin_gp.fit(x, spare_margins(h.cpu_share, h.margin, self.margin_floor), optimize)
        self.costs.fit(h, x, self._limits, self.start, optimize)

    # --- suggesting ------------------------------------------------------------------------------------------

    def suggest(self, context: Context) -> Suggestion:
        if context.limits != self._limits:  # the budget's reference was taken, or the policy changed it
            self._limits = context.limits
            if self.history.configs:
                self.costs.fit(self.history, np.array(self.history.x), self._limits, self.start, optimize=True)
        if not self.history.configs:
            self._current = self.start
            return Suggestion(self.start, "measure the running config first")
        suggestion = self._search(context)
        if self.search.reopening is not None and not self.search.announced:  # say once why the search is on again
            suggestion = replace(suggestion, reason=f"re-opened ({self.search.reopening.why}); {suggestion.reason}")
            self.search.announced = True
        return suggestion

    def _search(self, context: Context) -> Suggestion:
        """One window's decision: the rules of `rules`, in order (docs/learner.md, "Phases")."""
        incumbent = self._incumbent(context)
        if rules.incumbent_breached(self._behind, incumbent, context.offered_eps):
            return self._toward_capacity(incumbent, context)
        if rules.incumbent_breached(self._over_budget, incumbent, context.offered_eps):
            return self._within_budget(incumbent, context)
        if self.search.phase is Phase.CONVERGED:
            reopening = rules.reopening(self.search.converged, incumbent, context.offered_eps)
            if reopening is None:
                return self._hold_converged(incumbent)
            self._reopen(reopening)
        look = self._look(incumbent, context)
        if not np.any(look.pool.safe):
            return self._narrow(look)
        ranking = self._rank_in_region(look)
        if ranking.best_s > look.limit.gain_s:
            return self._propose_in_region(look, ranking)
        if rules.noise_unknown(look.dof, self.settings):
            return self._measure_the_noise(look, ranking)
        if rules.young(self.search, float(np.mean(look.pool.safe)), self.settings):
            return self._explore_most_uncertain(look, ranking)
        return self._widen_or_converge(look, ranking)

    def _incumbent(self, context: Context) -> Config:
        """The config the trust region follows: the daemon's incumbent (the start until it has one), under today's
        policy."""
        return self.policy.enforce(context.incumbent if context.incumbent is not None else self.start)

    def _toward_capacity(self, incumbent: Config, context: Context) -> Suggestion:
        """Overload: the incumbent itself fell behind at this load, and the margin model, told so, expects it below
        the floor here (one window behind it, a burst the buffers could not hold, is not overload). Capacity first,
        as DS2 and the Flink autoscaler scale before they tune: of the configs measured, the one the margin model
        expects to carry this load best, where it beats the incumbent's expected margin by `confidence_z` ×
        `margin_noise_min` (`rules.most_capable`) and its CPU is within budget (`costs`); else a step the twin vouches
        for (`_capacity_step`); else hold. The margin model judges measured configs only: its prior mean is 0, which
        beats any failing config's, so an unmeasured one would be chosen for knowing nothing of it."""
        s = self.settings
        measured = list(dict.fromkeys(c for c in self.history.configs if c != incumbent))
        x = np.array([self._features(c, context) for c in [incumbent, *measured]])
        margins, _ = self._margin_gp.predict(x)
        margins[1:] = np.where(self._within_budget_all_loads(x[1:, :-1], context), margins[1:], -np.inf)
        behind = f"the incumbent fell behind at {context.offered_eps:.0f} ev/s"
        if margins[0] >= self.margin_floor:
            return self._keep(incumbent, self.history.p95_s[-1], f"{behind}, but the margin model expects it to keep "
                                                                 f"up here (margin {margins[0]:+.3f})", self._noise_s)
        best = rules.most_capable(margins[1:], float(margins[0]), s.confidence_z * s.margin_noise_min)
        if best is None:
            step = self._capacity_step(incumbent, context, behind)
            if step is not None:
                return step
            return self._keep(incumbent, self.history.p95_s[-1], f"overloaded: {behind}, and no config measured or "
                                                                 "simulated is expected to carry it better",
                              self._noise_s)
        self._current = measured[best]
        return Suggestion(self._current, f"overloaded: {behind}: move toward capacity, to the config measured that "
                                         f"the margin model expects to carry it best (margin {margins[best + 1]:+.3f} "
                                         f"against the incumbent's {margins[0]:+.3f})",
                          {"margin": float(margins[best + 1]), "incumbent_margin": float(margins[0])})

    def _capacity_step(self, incumbent: Config, context: Context, behind: str) -> Suggestion | None:
        """Overload, and no config measured is expected to carry the load better: a step toward capacity on the twin's
        word, since the margin model knows nothing away from the configs measured. `capacity_screen` configs of a box
        of side `length_init` around the incumbent, each expected no dearer than the budget or the incumbent (the
        cost models' mean: every window behind already costs a backlog), are simulated at this load
        (`rules.capacity_pick`): of those the twin expects to keep up, the one the stage models expect fastest; else
        the one it expects to carry the most, where that beats the incumbent; either way above every config the
        pipeline showed falling behind at this load or below, simulated at this load too. The search then starts afresh
        around it. None without a twin, or where no config simulated qualifies."""
        if self.screen is None:
            return None
        s = self.settings
        center = self.cube.encode(incumbent)
        cand = self.cube.kept_in_order(candidates(center, s.length_init, self.rng, s)[1:], incumbent)
        inputs = np.column_stack([cand, np.full(len(cand), context_feature(context.offered_eps, s))])
        affordable = np.flatnonzero(self.costs.no_dearer(inputs, self._features(incumbent, context))
                                    & self.cube.under_ceilings(cand))
        if len(affordable) == 0:
            return None
        drawn = self.rng.choice(affordable, size=min(s.capacity_screen, len(affordable)), replace=False)
        h = self.history
        fallen = [c for c, m, ctx in zip(h.configs, h.margin, h.contexts) if m < self.margin_floor and (
                  ctx.offered_eps <= context.offered_eps or not load_moved(ctx.offered_eps, context.offered_eps))]
        stepped = [self.cube.decode(cand[k], base=incumbent) for k in drawn]
        configs = [incumbent, *stepped, *dict.fromkeys(c for c in fallen if c != incumbent)]
        ratios = list(self.parallel_map(lambda c: self.screen.ratio(c, context.offered_eps), configs))
        p95_s = self.stages.predict_p95(inputs[drawn], [0.0], incumbent, self._resolution_s)[0]
        fell_behind = [ratios[0], *ratios[1 + len(drawn):]]  # the incumbent fell behind too
        pick = rules.capacity_pick(np.array(ratios[1:1 + len(drawn)]), ratios[0], p95_s,
                                   self.policy.min_throughput_ratio, s.confidence_z * s.margin_noise_min, fell_behind)
        if pick is None:
            return None
        self._current = configs[pick + 1]
        self.search = fresh_search(s, Reopening(Reopened.OVERLOAD, behind))
        self.search.announced = True  # the proposal says it
        keeps_up = ratios[pick + 1] >= self.policy.min_throughput_ratio
        return Suggestion(self._current, f"overloaded: {behind}, and no config measured is expected to carry it "
                                         f"better: step toward capacity, to the {'fastest ' if keeps_up else ''}"
                                         f"config of {len(drawn)} simulated near it that the twin expects to "
                                         f"{'keep up' if keeps_up else 'carry the most'} (ratio "
                                         f"{ratios[pick + 1]:.2f} against the incumbent's {ratios[0]:.2f})",
                          {"twin_ratio": float(ratios[pick + 1]), "incumbent_twin_ratio": float(ratios[0]),
                           "p95_s": float(p95_s[pick])})

    def _within_budget(self, incumbent: Config, context: Context) -> Suggestion:
        """The incumbent itself went over the CPU budget at this load (a config that spends more per event as the
        load grows): the fastest candidate of the trust region expected within it and safe, whatever it gives up
        in P95; with none, the fastest config measured that is (a trust region narrowed around the incumbent may
        hold none), else the config the run started on, whose CPU the budget follows. Where the cost model, told
        this window, still expects the incumbent within budget here and the window went over by no more than its
        noise (`costs.over_by_noise`), hold it, as one window behind is not overload: one window a hair over sent
        an incumbent held for 75 windows at 4.9 ms back to a 230 ms config, and the search took 9 changes to come
        back (fb-kafka steady)."""
        why = f"over budget: the incumbent went over its budget at {context.offered_eps:.0f} ev/s"
        if self.costs.over_by_noise(self._features(incumbent, context), self.history.costs[-1],
                                    context.limits.at(context.offered_eps)):
            return self._keep(incumbent, self.history.p95_s[-1], f"{why}, by no more than a window's noise, and its "
                                                                 "cost model expects it within: one window over is noise",
                              self._noise_s)
        self.search.region.forget_best()
        look = self._look(incumbent, context)
        # not the incumbent itself: the model may still expect it within budget from its windows before this one
        others = look.pool.safe & np.any(np.abs(look.pool.cand - look.center) > self.settings.moved_tolerance, axis=1)
        if not np.any(others):
            self._current = self._fastest_measured_within(incumbent, context) or self.start
            said = "the fastest config measured" if self._current != self.start else "the config the run started on"
            return Suggestion(self._current, f"{why}, and no candidate near it is expected within it: {said} that is")
        ranking = self._rank(look.pool, look, expected=True)
        ranking = replace(ranking, gains_s=np.where(others, ranking.gains_s, -np.inf))
        return self._propose(look, ranking, np.argsort(-ranking.gains_s)[:1],
                             f"{why}: the fastest config expected within it and safe (predicted gain "
                             "{gain_ms:.1f} ms)")

    def _fastest_measured_within(self, incumbent: Config, context: Context) -> Config | None:
        """Of the configs measured, the one with the lowest expected P95 at this load among those within the CPU
        budget and safe there (the margin's lower bound on the floor); None where none is. Within: the cost models
        vouch for it (`_within_budget_all_loads`), or its windows here kept to the rules and went over by no more
        than the noise the incumbent is held by (`_measured_near_budget`). Held to the cost models alone, a config
        1 % over its budget, which the verdict let through and would have gone on letting through, was passed over
        for one at 230 ms, and the search took 8 changes to come back (fb-kafka steady)."""
        measured = [c for c in dict.fromkeys(self.history.configs) if c not in (incumbent, self.start)]
        if not measured:
            return None
        x = np.array([self._features(c, context) for c in measured])
        m_mean, m_std = self._margin_gp.predict(x)
        near = self._measured_near_budget(context)
        within = self._within_budget_all_loads(x[:, :-1], context) | np.array([c in near for c in measured])
        ok = within & (m_mean - self.settings.beta * m_std >= self.margin_floor)
        if not np.any(ok):
            return None
        p95_s = np.concatenate([self.stages.predict_p95(x[i:i + 1], [0.0], c, self._resolution_s)[0]
                                for i, c in enumerate(measured)])
        return measured[int(np.argmin(np.where(ok, p95_s, np.inf)))]

    def _measured_near_budget(self, context: Context) -> set[Config]:
        """The configs whose windows at about this load all kept to the rules, and whose costs there went over each
        budgeted part's limit by no more, on average, than its cost model's noise allows (`costs.within_noise`): what
        an incumbent is held by (`costs.over_by_noise`)."""
        h = self.history
        here = [i for i, ctx in enumerate(h.contexts) if not load_moved(ctx.offered_eps, context.offered_eps)]
        shares: dict[Config, list[dict[str, float]]] = {}
        for i in here:
            limits = self._limits.at(h.contexts[i].offered_eps)
            shares.setdefault(h.configs[i], []).append(log_shares(h.costs[i], limits))
        flagged = {h.configs[i] for i in here if not h.feasible[i]}
        return {config for config, told in shares.items() if config not in flagged and self.costs.within_noise(told)}

    def _look(self, incumbent: Config, context: Context) -> _Look:
        """Score the trust region around `incumbent` and measure the incumbent: its predicted P95, its measured one,
        the noise of a window there, how far it is from capacity and the gain a change must promise."""
        s = self.settings
        center = self.cube.encode(incumbent)
        pool = self._pool(center, context, self.search.region.length, incumbent)
        inc_features = self._features(incumbent, context)[None, :]
        p95_s = float(self.stages.predict_p95(inc_features, [0.0], incumbent, self._resolution_s)[0][0])
        measured_s = self._measured_p95(incumbent, context, p95_s)
        noise_s, dof = self._window_noise(context, measured_s, inc_features)
        self._noise_s = noise_s
        far_from_capacity = float(self._margin_gp.predict(inc_features)[0][0]) >= s.far_spare
        return _Look(incumbent, context, center, pool, p95_s, measured_s, noise_s, dof, far_from_capacity,
                     threshold(measured_s, noise_s, s))

    def _narrow(self, look: _Look) -> Suggestion:
        """No candidate is predicted safe: halve the trust region and hold."""
        self.search.region.narrow(self.settings)
        return self._hold(look, f"no candidate predicted safe in trust region {self.search.region.length:.2f}")

    def _rank_in_region(self, look: _Look) -> _Ranking:
        """The trust region's candidates by the gain that counts now (`rules.expects_only`), far from capacity only
        where no loss is expected (`rules.no_loss`)."""
        expected = rules.expects_only(self.search, look.far_from_capacity, self.settings)
        ranking = self._rank(look.pool, look, expected)
        gains_s = rules.no_loss(ranking.gains_s, look.pool, look.p95_s, look.far_from_capacity, expected,
                                self.search.windows, self.settings)
        return replace(ranking, gains_s=gains_s)

    def _propose_in_region(self, look: _Look, ranking: _Ranking) -> Suggestion:
        """Something in the trust region beats the threshold: propose the best of those the twin lets through."""
        return self._propose(look, ranking, rules.ranked(ranking.gains_s, look.limit.gain_s),
                             f"{ranking.kind} gain {{gain_ms:.1f}} ms > {look.limit.gain_s * 1e3:.1f} ms "
                             f"({look.limit.why})")

    def _measure_the_noise(self, look: _Look, ranking: _Ranking) -> Suggestion:
        """Nothing beats a threshold set by the models' guess of the noise: measure the incumbent again."""
        return self._hold(look, f"{ranking.below(look.limit)}, the noise {look.noise_s * 1e3:.1f} ms the models' "
                                "guess: measure the incumbent again to know it")

    def _explore_most_uncertain(self, look: _Look, ranking: _Ranking) -> Suggestion:
        """A young search that knows little around the incumbent safe measures where the models are least sure among
        the configs that could be faster (`rules.expanders`), so that the safe set grows."""
        below = ranking.below(look.limit)
        order = rules.expanders(look.pool, look.p95_s)
        if order is None:
            return self._hold(look, f"{below}, and no safe config could be faster")
        return self._propose(look, ranking, order,
                             f"{below}, {float(np.mean(look.pool.safe)):.0%} of the trust region known safe after "
                             f"{self.search.windows} < {self.settings.min_search} windows: explore the most uncertain")

    def _widen_or_converge(self, look: _Look, ranking: _Ranking) -> Suggestion:
        """The trust region is a box around the incumbent; the safe set reaches beyond it, and near capacity the big
        gains lie there. Look over every safe config (a box as wide as the cube): if something there beats the
        threshold, widen the trust region again and propose it; if nothing does, converge and hold."""
        wide = self._pool(look.center, look.context, self.settings.length_max, look.incumbent)
        expected = rules.beyond_expects_only(self.search, look.far_from_capacity)
        beyond = self._rank(wide, look, expected)
        if beyond.best_s <= look.limit.gain_s:
            expansion = self._expand_toward_budget(look, beyond)
            if expansion is not None:
                return expansion
            held = Converged(look.incumbent, look.context.offered_eps, look.measured_s, look.noise_s,
                             max(ranking.best_s, beyond.best_s, 0.0), look.limit)
            self.search.converge(held)
            return self._hold(look, held.reason)
        self.search.widen(self.settings)
        kind = "a predicted" if self.search.known_ground else "an optimistic"
        return self._propose(look, beyond, rules.ranked(beyond.gains_s, look.limit.gain_s),
                             f"{ranking.below(look.limit)} in the trust region, but beyond it {kind} gain "
                             "{gain_ms:.1f} ms: widen the trust region")

    def _expand_toward_budget(self, look: _Look, beyond: _Ranking) -> Suggestion | None:
        """Nothing known within the CPU budget beats the threshold, but a config its cost models expect within it
        without being able to vouch for it does: measure the safe config nearest to it that the twin lets through
        (`rules.budget_expander`), so that the known set grows toward it. Without this the search stopped at the edge
        of what it had measured: fb-kafka at 83 ev/s held 8.7 ms, where 2.9 ms is within budget (zoo 3409820409).
        None where no config qualifies, or the twin lets none through."""
        wide = beyond.pool
        goals = rules.gains(replace(wide, safe=wide.hoped), look.p95_s, beyond.expected, beyond.prices_s, self.settings)
        pick = rules.budget_expander(wide, goals, look.limit.gain_s, look.p95_s, np.array(self.history.x)[:, :-1],
                                     self.settings.expand_step)
        if pick is None:
            return None
        order, goal = pick
        i = self._screened_pick(order, wide.cand, look.incumbent, look.context)
        if i is None:
            return None
        return self._suggest(look, beyond, i, f"{beyond.below(look.limit)} among configs known within the CPU budget, "
                                              f"but {goals[goal] * 1e3:.1f} ms in one expected within it that its cost "
                                              "model cannot vouch for: measure the nearest known within it (GoOSE)")

    def _propose(self, look: _Look, ranking: _Ranking, order: np.ndarray, why: str) -> Suggestion:
        """The best-ranked candidate of `order` the twin lets through (`why` takes its gain), or hold."""
        i = self._screened_pick(order, ranking.pool.cand, look.incumbent, look.context)
        if i is None:
            top = min(len(order), self.settings.screen_top)
            return self._hold(look, f"the twin expects none of the {top} best candidates to keep up")
        return self._suggest(look, ranking, i, why)

    def _suggest(self, look: _Look, ranking: _Ranking, i: int, why: str) -> Suggestion:
        """Propose candidate `i` of the ranking's pool (`why` takes its gain)."""
        pool = ranking.pool
        lcb = pool.m_mean[i] - self.settings.beta * pool.m_std[i]
        self._current = self.cube.decode(pool.cand[i], base=look.incumbent)
        price_s = ranking.prices_s[i]
        priced = f", net of a restart's {price_s * 1e3:.1f} ms" if price_s >= 5e-5 else ""  # not a word for 0.0 ms
        return Suggestion(self._current,
                          f"{why.format(gain_ms=ranking.gains_s[i] * 1e3)}{priced}: predicted P95 "
                          f"{pool.mean[i]:.3f}s vs incumbent {look.p95_s:.3f}s, margin LCB {lcb:+.3f}, trust region "
                          f"{self.search.region.length:.2f}, {int(pool.safe.sum())}/{len(pool.safe)} safe",
                          {"p95_s": float(pool.mean[i]), "p95_lower_s": float(pool.optimistic[i]),
                           "margin": float(pool.m_mean[i]), "margin_lcb": float(lcb), "noise_s": look.noise_s,
                           "incumbent_p95_s": look.p95_s})

    def _hold(self, look: _Look, why: str) -> Suggestion:
        return self._keep(look.incumbent, look.p95_s, why, look.noise_s)

    def _hold_converged(self, incumbent: Config) -> Suggestion:
        held = self.search.converged
        return self._keep(incumbent, held.p95_s, held.reason, held.noise_s)

    def _keep(self, incumbent: Config, p95_s: float, why: str, noise_s: float) -> Suggestion:
        self._current = incumbent
        return Suggestion(incumbent, f"{why}: keep the incumbent",
                          {"p95_s": p95_s, "noise_s": noise_s, "incumbent_p95_s": p95_s})

    # --- scoring ---------------------------------------------------------------------------------------------

    def _pool(self, center: np.ndarray, context: Context, length: float, base: Config) -> Pool:
        """Candidates in a box of side `length` around `center` (TuRBO's, then stage by stage), scored; untuned
        values from `base`. Safe: the margin's lower bound clears the floor (SafeOpt), the recent peak load is carried
        (`_carry_peak`), each budgeted part's CPU is within its budget with confidence at the loads seen
        (`_within_budget_all_loads`), it stays under the cube's ceilings, and under a P95 ceiling the P95's upper bound
        stays below it. Hoped: safe but for
        this load's budget, which the cost models expect it within (their mean) without vouching for it."""
        s = self.settings
        feature = context_feature(context.offered_eps, s)
        cand = np.vstack([candidates(center, length, self.rng, s),
                          self.stages.best_moves(center, feature, length, base, self.rng, self._resolution_s)])
        cand = self.cube.kept_in_order(cand, base)
        inputs = np.column_stack([cand, np.full(len(cand), feature)])
        chunks = np.array_split(inputs, max(1, len(inputs) // s.score_chunk))
        scored = list(self.parallel_map(partial(self._score_chunk, base=base), chunks))
        mean, optimistic, m_mean, m_std = (np.concatenate([part[k] for part in scored]) for k in range(4))
        safe_but_budget = (m_mean - s.beta * m_std >= self.margin_floor) & self._carry_peak(center, cand, context)
        safe_but_budget &= self.cube.under_ceilings(cand)
        safe_but_budget &= self._no_riskier_elsewhere(cand, context)
        if self.policy.p95_ceiling_s is not None:
            safe_but_budget &= (self.stages.predict_p95(inputs, [-s.beta], base, self._resolution_s)[0]
                                <= self.policy.p95_ceiling_s)
        within, expected_within = self.costs.within_and_expected(inputs)
        hoped = safe_but_budget & ~within & expected_within
        return Pool(cand, mean, optimistic, m_mean, m_std, safe_but_budget & within, hoped)

    def _carry_peak(self, center: np.ndarray, cand: np.ndarray, context: Context) -> np.ndarray:
        """Which candidates carry the highest load of the learner's history as well as the incumbent (at `center`)
        does (`rules.carries_peak`); all of them where that peak is about the window's load or below it."""
        peak_eps = self._history_load_range()[1]
        if peak_eps <= context.offered_eps or not load_moved(context.offered_eps, peak_eps):
            return np.ones(len(cand), dtype=bool)
        at_peak = np.column_stack([np.vstack([center, cand]),
                                   np.full(len(cand) + 1, context_feature(peak_eps, self.settings))])
        margins, _ = self._margin_gp.predict(at_peak)
        return rules.carries_peak(margins[1:], float(margins[0]), self.margin_floor)

    def _within_budget_all_loads(self, cand: np.ndarray, context: Context) -> np.ndarray:
        """Which candidates (unit-cube rows) every budgeted part is expected within its budget at, with confidence
        (`costs`), at this window's load, and no riskier than the incumbent (`costs.no_riskier`) at the lowest and the
        highest load of the learner's history, where the model may know no config, the incumbent included. The budget
        follows the load and a config's CPU does not follow it in step (a poll costs the same at any load, a smaller
        batch more per event): a config adopted within budget at one load went over it as the load moved on, and
        was rolled back, a restart for nothing (fb-kafka diurnal: 19 rollbacks in 3 runs of 60 windows). Where the
        incumbent itself went over at this load, only this load: held to every load, nothing near it was, and the
        learner fell back to the config the run started on, 9 ms → 2 s, and took 15 changes to come back."""
        return self.costs.within(self._at(context.offered_eps, cand)) & self._no_riskier_elsewhere(cand, context)

    def _no_riskier_elsewhere(self, cand: np.ndarray, context: Context) -> np.ndarray:
        """Which candidates (unit-cube rows) every budgeted part is bounded no higher at than the incumbent, or within
        its budget with confidence, at the lowest and the highest load of the learner's history where those differ
        from this window's (`_within_budget_all_loads` says why); all of them where the incumbent itself went over
        at this load."""
        ok = np.ones(len(cand), dtype=bool)
        incumbent = self._incumbent(context)
        if rules.incumbent_breached(self._over_budget, incumbent, context.offered_eps):
            return ok
        center = self.cube.encode(incumbent)[None, :]
        for eps in (eps for eps in self._history_load_range() if load_moved(context.offered_eps, eps)):
            ok &= self.costs.no_riskier(self._at(eps, cand), self._at(eps, center)[0])
        return ok

    def _at(self, offered_eps: float, cand: np.ndarray) -> np.ndarray:
        """Model inputs: unit-cube rows at a load."""
        return np.column_stack([cand, np.full(len(cand), context_feature(offered_eps, self.settings))])

    def _history_load_range(self) -> tuple[float, float]:
        """The lowest and the highest offered load (events/s) of the windows the learner keeps."""
        loads = [c.offered_eps for c in self.history.contexts]
        return min(loads), max(loads)

    def _score_chunk(self, inputs: np.ndarray, base: Config) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        mean, optimistic = self.stages.predict_p95(inputs, [0.0, self.settings.kappa], base, self._resolution_s)
        m_mean, m_std = self._margin_gp.predict(inputs)
        return mean, optimistic, m_mean, m_std

    def _rank(self, pool: Pool, look: _Look, expected: bool) -> _Ranking:
        """`pool` ranked by the gain that counts, expected or optimistic, net of a restart's price."""
        prices_s = rules.restart_prices_s(pool.cand, self.cube.encode(self._current), self.cube.restart_dims(),
                                          look.context.restart_pauses_s, self.policy.change_horizon_s, self.settings)
        return _Ranking(pool, rules.gains(pool, look.p95_s, expected, prices_s, self.settings), expected, prices_s)

    def _incumbent_p95s(self, incumbent: Config, context: Context) -> list[float]:
        """The P95 of the incumbent's feasible windows at about this load."""
        h = self.history
        return [p for c, ctx, p, ok in zip(h.configs, h.contexts, h.p95_s, h.feasible)
                if ok and c == incumbent and not load_moved(ctx.offered_eps, context.offered_eps)]

    def _measured_p95(self, incumbent: Config, context: Context, predicted_s: float) -> float:
        """The mean P95 of the incumbent's feasible windows at about this load (the model's, with none)."""
        repeats = self._incumbent_p95s(incumbent, context)
        return float(np.mean(repeats)) if repeats else predicted_s

    def _window_noise(self, context: Context, p95_s: float, inc_features: np.ndarray) -> tuple[float, int]:
        """A window's P95 noise (s) at the incumbent (its P95 `p95_s`, measured where it can be), and how many
        repeated windows it rests on.

        Once `noise_dof` repeated windows exist: the pooled relative spread of configs like the incumbent
        (`noise.pooled_noise_s`). Before: the stage models' noise terms. Either way never below `noise_floor` of
        the P95 nor half the step the latest window states for its latencies (a millisecond live, none on the
        twin): live repeats can agree to the millisecond, and a gain no window resolves must not count.
        """
        s = self.settings
        floor_s = max(p95_s * s.noise_floor, self._resolution_s / 2)
        repeats = alike_repeats(self.history, context.offered_eps, p95_s, s)
        dof = sum(len(g) - 1 for g in repeats)
        if dof < s.noise_dof:
            return max(self.stages.noise_s(inc_features, self._current), floor_s), dof
        return max(pooled_noise_s(repeats, p95_s, s), floor_s), dof

    def _screened_pick(self, order: np.ndarray, cand: np.ndarray, incumbent: Config, context: Context) -> int | None:
        """The best-ranked candidate the twin lets through (`rules.screen_pick`), after simulating the incumbent and
        the `screen_top` best; the best one, without a screen."""
        if self.screen is None:
            return int(order[0])
        top = [int(k) for k in order[: self.settings.screen_top]]
        configs = [incumbent] + [self.cube.decode(cand[k], base=incumbent) for k in top]
        ratios = list(self.parallel_map(lambda c: self.screen.ratio(c, context.offered_eps), configs))
        self._screened = dict(zip(configs, ratios))
        h = self.history
        here = [(r, m >= self.margin_floor) for r, m, ctx in zip(h.twin_ratio, h.margin, h.contexts)
                if math.isfinite(r) and not load_moved(ctx.offered_eps, context.offered_eps)]
        return rules.screen_pick(top, ratios[1:], ratios[0], [r for r, kept_up in here if kept_up],
                                 [r for r, kept_up in here if not kept_up], self.policy.min_throughput_ratio)
