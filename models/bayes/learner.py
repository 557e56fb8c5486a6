"""The safe Bayesian learner: stage-wise GP surrogates, safe acquisition, a trust region around the incumbent.

- Latency is modelled stage by stage, as the paper decomposes it (T_E2E ≈ Σ stages): one Gaussian
  process (scikit-learn; Matérn 5/2, one length scale per dimension, a noise term) per pipeline stage
  for log stage-P95, over only the parameters that move that stage (`STAGE_PARAMS`) plus the offered
  load (log-scaled) as a context input. Each is a function of two to four inputs, which a few windows
  pin down; their sum predicts the end-to-end P95. Without stage data the whole pipeline is one stage.
  Each stage's prediction stays within what the config's own waits allow (`latency_bounds`): no less than half
  its interval (a harvester's backoff, Spark's trigger), no more than its longest wait (max(backoff,
  max_backoff)), each bound scaled until no measured window contradicts it.
  A window whose measurement states its own uncertainty (`Observation.p95_sd_s`: a canary judgement's
  interval) is that much noisier a point to the models, so a loose judgement moves them less.
- Throughput is modelled by one GP over every tuned parameter for the margin (`output_margin`: output / offered
  − 1, the config's buffered batch counted as shipped, never above 0); a window that breached a throughput rule
  is told below the floor whatever its ratio. Where the nodes report their CPU, a window that kept up is told the
  share of the capacity it left unused instead of 0 (`headroom`): far from busy, the model vouches for configs
  further from those measured, and the safe set grows in leaps, not a step a window. A window that drained a
  queue left from before it (`Verdict.drain`) is told to no model: its P95 and ratio are the past's.
- Safety: a candidate is proposed only if the margin GP's lower confidence bound clears the policy's
  floor (margin ≥ min_throughput_ratio − 1) and, with a P95 ceiling, the predicted P95's upper bound
  stays under it. The margin GP's prior mean is 0 with a fixed prior spread, so far from every
  observation the bound fails and the learner expands the safe set outward from the configs it has
  seen work (SafeOpt's idea); the first config is the running one, never a random one.
- Trust region (TuRBO's idea): candidates are drawn in a box of side `length` around the daemon's
  incumbent (`Context.incumbent`), perturbing a few dimensions at a time, and each dimension alone at either
  edge of the box (where a cliff at the end of a range hides); the box doubles after
  successive improvements and halves after successive failures; an infeasible window (its `Verdict`)
  counts as several failures.
- Pre-screening (optional): the best few candidates are simulated on a twin (`TwinScreen`, fanned out
  through `parallel_map`); only one the twin expects to keep up, with headroom, is proposed. Each window
  measured is told what the twin expected of its config, and those calibrate the twin (`screen_bar`):
  a candidate must reach the floor, or where the twin doubts the incumbent, the incumbent's own twin ratio;
  where none of the best few does, it may come within a step of the weakest config the pipeline showed
  keeping up. It never ranks below one that fell behind, unless the twin ranked that one above a config that
  kept up. A twin misjudged near capacity then lets the search walk towards smaller batches a step at a time
  instead of holding where it first doubts.
- Acquisition: the optimistic gain, incumbent's predicted P95 minus the candidate's lower bound
  (Σ exp(μ − κσ) over stages). A candidate that restarts a component (Filebeat, the sink) must promise
  more: its gain is multiplied by `restart_discount`. Restart dimensions are perturbed as often as any
  other: most are (every Filebeat key), and perturbing them less starved the search. Once the trust
  region has collapsed (no gain found however close it looked), the expected gain (κ = 0) replaces the
  optimistic one; so it does once the search measured `min_search` windows when the margin model expects the
  incumbent to leave `far_spare` of the capacity unused: far from capacity, hoping on kept the config moving
  for tens of windows around a flat optimum. Before that, after `free_hope` windows, an optimistic step there
  must also be to a config the models expect no slower than the incumbent: filebeat-kafka steady stepped
  three times to configs expected 50 % slower after its P95 had come near its final.
- Converge and stay: a change is proposed only when its gain exceeds `confidence_z` × the noise of a
  window (the pooled spread of repeated windows, the stage models' noise terms before there are any; never
  below half the step the window states for its latencies, `Observation.latency_resolution_s`: 1 ms or
  coarser on a live pipeline, nothing on the twin, whose latencies are exact; a gain no window can resolve
  is none), nor than `min_gain` of the incumbent's P95: a gain so small is not worth touching the pipeline.
  No stage latency counts below that step either: under it, the models see nothing.
  When nothing in the trust region does, the noise rests on `noise_dof` repeated windows and no safe set is left
  to grow (below), the learner looks once more over every safe config (a box as wide as the cube, optimistic
  gains): the trust region is a box around the incumbent, the safe set reaches beyond it, and near capacity the
  big gains lie there. If something there promises more than the threshold, the trust region widens again; if
  nothing does, the learner holds the incumbent and says so ("converged: best predicted gain 0.8 ms < 6.0 ms
  (2 × noise 3.0 ms)"), without scoring again, until something happens: the load moves beyond `LOAD_SHIFT`, a
  window breaches the guardrails, the incumbent's P95 drifts beyond `drift_z` × the noise and `drift_min` of
  itself, or the policy changes. Then the search re-opens from a fresh trust region and says why. The load is an
  input of every model, so after a load move the search may stop again at once, and only the gain the models
  expect at the new load (κ = 0, in the trust region and beyond) justifies a change: their optimism there is the
  novelty of the load, not of the configs. The other causes are changes the models never saw: the search hopes
  optimistically again.
- Each stage's model learns its log P95 over a prior: log(what the stage takes besides its waits + the waits
  its config's timers make an event sit out, `latency_bounds.stage_wait_s`). A stage measured only at long
  waits (a 1 s backoff, a 0.4 s flush timeout) then expects a shorter one to be faster by as much, beyond where
  it measured; with a constant prior it expected the mean of what it had seen there, and near capacity, where
  a 3 s sink makes every change promise 5 % of that, the search stopped with most of a second of waits left.
- While a search is young (`min_search` windows) and under `safe_share_settled` of its trust region is known
  safe, a window in which nothing promises more than the threshold measures where the models are least sure
  among configs that could be faster, so that the safe set grows (SafeOpt's expanders). Where the safe set is
  large already (far from capacity, the spare CPU of every window makes it so), such windows only moved a config
  that had come near its final, one in a few of them into a rollback.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from models.bayes.history import History, log_var
from models.bayes.inputs import context_feature, features, offered_eps_of
from models.bayes.noise import alike_repeats, pooled_noise_s, threshold as gain_threshold
from models.bayes.phase import Converged, Phase, Reopened, Reopening, fresh_search
from models.bayes.settings import LearnerSettings
from models.bayes.surrogate import Surrogate, latency_model, margin_model
from models.bayes.trust_region import candidates
from models.headroom import spare_margins
from models.latency_bounds import stage_ceiling_s, stage_floor_s, stage_wait_s
from models.learning import WHOLE_PIPELINE, Context, Suggestion, TunedCube, load_moved
from models.observation import Observation
from models.policy import Policy
from models.screen import TwinScreen, screen_bar
from models.space import Config
from models.verdict import BreachKind, Drain, Verdict, output_margin

MapFn = Callable[[Callable, Iterable], Iterable]


@dataclass(frozen=True)
class _BoundScales:
    """How far a stage's latency bounds hold on the measured windows: the floor scaled down and the ceiling up
    until no window contradicts them (a pipeline unlike the components they assume, a window slowed by a
    restart), so neither ever overrules a measurement."""

    floor: float = 1.0
    ceiling: float = 1.0


@dataclass(frozen=True)
class _Pool:
    """Candidates (unit cube) with their predicted P95, its optimistic bound, the margin's mean and std, and
    whether each is predicted safe."""

    cand: np.ndarray
    mean: np.ndarray
    optimistic: np.ndarray
    m_mean: np.ndarray
    m_std: np.ndarray
    safe: np.ndarray


class SafeBayesLearner:
    """Minimise P95 subject to throughput keeping up, safely, around the incumbent."""

    def __init__(self, cube: TunedCube, start: Config, *, stage_params: Mapping[str, Sequence[str]] | None = None,
                 seed: int = 0, screen: TwinScreen | None = None, parallel_map: MapFn = map,
                 settings: LearnerSettings = LearnerSettings()) -> None:
        self.cube = cube
        self.start = cube.policy.enforce(start)
        self.settings = settings
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.parallel_map = parallel_map
        self.screen = screen
        self.history = History()
        self.stage_params = dict(stage_params) if stage_params else None
        self._new_models()
        self._current = self.start
        self.search = fresh_search(settings)  # phase, trust region, windows, why it re-opened
        self._noise_s = 0.0  # the last estimate of a window's noise
        self._resolution_s = settings.finest_s  # the latest window's latency step (`latency_resolution_s`)
        self._told = 0
        self._screened: dict[Config, float] = {}  # the twin ratios of the last screen's configs

    @property
    def policy(self) -> Policy:
        return self.cube.policy

    def _new_models(self) -> None:
        self.stage_dims = self.cube.stage_dims(self.stage_params)
        self._stage_gps: dict[str, Surrogate] = {}
        self._stage_base_s: dict[str, float] = {}  # what each stage takes besides its waits (`_stage_log_p95`)
        self._bound_scales: dict[str, _BoundScales] = {}
        self._margin_gp = margin_model(self.cube.dims + 1, self.settings, self.seed)

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

    @property
    def margin_floor(self) -> float:
        return self.policy.min_throughput_ratio - 1.0

    def _features(self, config: Config, context: Context) -> np.ndarray:
        return features(self.cube, config, context, self.settings)

    def _stage_values(self, observation: Observation) -> dict[str, float]:
        if set(self.stage_dims) == {WHOLE_PIPELINE}:
            return {WHOLE_PIPELINE: math.log(max(observation.p95_s, self._resolution_s))}
        return {stage: math.log(max(observation.stage_p95_s[stage], self._resolution_s))
                for stage in self.stage_dims if stage in observation.stage_p95_s}

    def tell(self, config: Config, context: Context, observation: Observation, verdict: Verdict) -> None:
        self._current = config
        self._resolution_s = max(observation.latency_resolution_s, self.settings.finest_s)
        if verdict.drain is not Drain.NONE:
            # Its P95 is the queue left from before (a rollback's, a slow config's), its ratio above 1 the drain:
            # neither is the config's. Told as the config's, one such window set the noise of every later window
            # at ~1.7 s near capacity, and the search stopped 60 % off the best it had found the way to.
            return
        self.search.windows += 1
        h = self.history
        margin = max(output_margin(observation, self.policy, config), -1.0)
        behind = sum(b.excess for b in verdict.breaches if b.kind is not BreachKind.CEILING)
        if behind > 0:
            # A window can breach the backlog rule with a ratio above 1 (its output drained the queue it had let
            # grow, or a micro-batch fell due): told its ratio, the margin model would vouch for it. It is told
            # below the floor instead, by as much as it broke the rule by.
            margin = min(margin, self.margin_floor * (1.0 + behind))
        h.configs.append(config)
        h.contexts.append(context)
        h.x.append(self._features(config, context))
        h.stage_log_p95.append(self._stage_values(observation))
        h.margin.append(margin)
        share = observation.busiest_cpu_share
        h.cpu_share.append(math.nan if share is None else share)
        h.p95_s.append(observation.p95_s)
        h.p95_log_var.append(log_var(observation))
        h.feasible.append(verdict.ok)
        h.twin_ratio.append(self._screened.get(config, math.nan))
        h.keep(self.settings.history_recent, self.settings.history_best)
        self._told += 1
        held = self.search.converged
        if held is not None and not verdict.ok:
            self._reopen(Reopening(Reopened.GUARDRAIL, f"guardrail: {'; '.join(verdict.messages)}"))
        elif held is not None and config == held.config and not load_moved(held.offered_eps, context.offered_eps):
            held.since.append(observation.p95_s)
            drift = held.drift(self.settings)
            if drift is not None:
                self._reopen(drift)
        if self.search.region.update(verdict.ok, observation.p95_s, self._noise_s, self.settings):
            self.search.collapse()  # nothing found beyond the noise however close it looked: go by what is expected
        self._fit()

    def _reopen(self, reopening: Reopening) -> None:
        """Search again from a fresh trust region, if the search has stopped or collapsed: something changed that
        the models it stopped by did not see (`SearchState.known_ground`: a load move, which they take as input)."""
        if self.search.phase is not Phase.SEARCHING:
            self.search = fresh_search(self.settings, reopening)

    def _fit(self) -> None:
        h = self.history
        x = np.array(h.x)
        # Hyperparameters settle after a few windows; refitting them on every window made tell() take seconds.
        optimize = self._told <= self.settings.refit_every or self._told % self.settings.refit_every == 0
        context_col = x.shape[1] - 1
        for stage, dims in self.stage_dims.items():
            rows = [i for i, values in enumerate(h.stage_log_p95) if stage in values]
            if not rows:
                continue
            columns = np.append(dims, context_col)
            log_p95 = np.array([h.stage_log_p95[i][stage] for i in rows])
            waits_s = self._stage_wait_s(stage, x[rows], self.start)
            self._stage_base_s[stage] = max(float(np.median(np.exp(log_p95) - waits_s)), self._resolution_s)
            gp = self._stage_gps.setdefault(stage, latency_model(len(columns), self.settings, self.seed))
            gp.fit(x[np.ix_(rows, columns)], log_p95 - np.log(self._stage_base_s[stage] + waits_s), optimize,
                   np.array([h.p95_log_var[i] for i in rows]))
        self._margin_gp.fit(x, spare_margins(h.cpu_share, h.margin, self.margin_floor), optimize)
        self._bound_scales = {stage: self._measured_bound_scales(stage) for stage in self._stage_gps}

    def _measured_bound_scales(self, stage: str) -> _BoundScales:
        """How far `stage`'s bounds (`latency_bounds`) hold on its measured windows."""
        h = self.history
        rows = [i for i, values in enumerate(h.stage_log_p95) if stage in values]
        measured_s = np.exp([h.stage_log_p95[i][stage] for i in rows])

        def value_of(name: str) -> np.ndarray:
            return np.array([float(h.configs[i][name]) for i in rows])

        floors_s = np.broadcast_to(stage_floor_s(stage, value_of), measured_s.shape)
        ceilings_s = np.maximum(np.broadcast_to(stage_ceiling_s(stage, value_of), measured_s.shape), self._resolution_s)
        waits = floors_s > 0
        floor = float(min(1.0, np.min(measured_s[waits] / floors_s[waits]))) if np.any(waits) else 1.0
        return _BoundScales(floor=floor, ceiling=float(max(1.0, np.max(measured_s / ceilings_s))))

    def _stage_p95(self, stage: str, features: np.ndarray, kappas: Sequence[float], base: Config) -> list[np.ndarray]:
        """`stage`'s predicted P95 (κ = 0) or its optimistic bound (κ > 0) at each row of `features` (values the
        cube does not tune from `base`), one array per κ from one prediction of the stage's model, within what the
        config's own waits allow (`latency_bounds`), as far as the measured windows bear that out, and never below
        the resolution: a gain no window could show."""
        mean, std = self._stage_log_p95(stage, features, base)
        value_of = partial(self.cube.values, features[:, :-1], base=base)
        scales = self._bound_scales.get(stage, _BoundScales())
        floor_s = np.maximum(np.multiply(stage_floor_s(stage, value_of), scales.floor), self._resolution_s)
        ceiling_s = np.maximum(np.multiply(stage_ceiling_s(stage, value_of), scales.ceiling), floor_s)
        return [np.clip(np.exp(mean - kappa * std), floor_s, ceiling_s) for kappa in kappas]

    def _stage_wait_s(self, stage: str, features: np.ndarray, base: Config) -> np.ndarray:
        """What `stage`'s own timers make an event sit out at each row of `features` (`latency_bounds.stage_wait_s`);
        none for the whole pipeline, whose P95 no one wait of its config moves one for one."""
        if stage == WHOLE_PIPELINE:
            return np.zeros(len(features))
        names = [self.cube.names[i] for i in self.stage_dims[stage]]
        value_of = partial(self.cube.values, features[:, :-1], base=base)
        offered_eps = offered_eps_of(features[:, -1], self.settings)
        return np.broadcast_to(stage_wait_s(names, value_of, offered_eps), len(features))

    def _stage_log_p95(self, stage: str, features: np.ndarray, base: Config) -> tuple[np.ndarray, np.ndarray]:
        """`stage`'s log P95 at each row of `features`, mean and std: the model's residual over the stage's prior,
        log(what it takes besides its waits + its config's waits), so that away from what was measured a shorter
        wait is still expected to be faster."""
        columns = np.append(self.stage_dims[stage], features.shape[1] - 1)
        mean, std = self._stage_gps[stage].predict(features[:, columns])
        return mean + np.log(self._stage_base_s[stage] + self._stage_wait_s(stage, features, base)), std

    def _predict_p95(self, features: np.ndarray, kappas: Sequence[float], base: Config) -> list[np.ndarray]:
        """Σ over stages of `_stage_p95`: the predicted P95 (κ = 0) or its optimistic bound (κ > 0), per κ."""
        totals = [np.zeros(len(features)) for _ in kappas]
        for stage in self._stage_gps:
            for total, stage_p95 in zip(totals, self._stage_p95(stage, features, kappas, base)):
                total += stage_p95
        return totals

    def suggest(self, context: Context) -> Suggestion:
        if not self.history.configs:
            self._current = self.start
            return Suggestion(self.start, "measure the running config first")
        suggestion = self._search(context)
        if self.search.reopening is not None and not self.search.announced:  # say once why the search is on again
            suggestion = replace(suggestion, reason=f"re-opened ({self.search.reopening.why}); {suggestion.reason}")
            self.search.announced = True
        return suggestion

    @property
    def converged(self) -> bool:
        """Whether the search has stopped: the incumbent is held until a shift re-opens it."""
        return self.search.phase is Phase.CONVERGED

    def _search(self, context: Context) -> Suggestion:
        # the trust region follows the daemon's incumbent (the start until it has one), under today's policy
        incumbent = self.policy.enforce(context.incumbent if context.incumbent is not None else self.start)
        held = self.search.converged
        if held is not None:
            if load_moved(held.offered_eps, context.offered_eps):
                self._reopen(Reopening(Reopened.LOAD_MOVED,
                                       f"load moved {held.offered_eps:.0f} → {context.offered_eps:.0f} ev/s"))
            elif incumbent != held.config:
                self._reopen(Reopening(Reopened.INCUMBENT_CHANGED, "the daemon's incumbent changed"))
            else:
                return self._hold(incumbent, held.p95_s, held.reason, held.noise_s)
        search = self.search
        center = self.cube.encode(incumbent)
        pool = self._pool(center, context, search.region.length, incumbent)
        inc_features = self._features(incumbent, context)[None, :]
        inc_p95 = float(self._predict_p95(inc_features, [0.0], incumbent)[0][0])
        measured_s = self._measured_p95(incumbent, context, inc_p95)
        noise_s, dof = self._window_noise(context, measured_s, inc_features)
        self._noise_s = noise_s
        if not np.any(pool.safe):
            search.region.narrow(self.settings)
            why = f"no candidate predicted safe in trust region {search.region.length:.2f}"
            return self._hold(incumbent, inc_p95, why, noise_s)
        # Before the trust region collapses, the optimistic gain (what the model hopes for); after, the expected.
        # After a load move, the models have searched this ground before: only the gain they expect at the new
        # load justifies a change (their optimism there is only the load's novelty). Far from capacity, the same
        # once the search has looked around: there a step off what the models expect breaks nothing and gains
        # little, and hoping on kept the config moving for tens of windows; near it, the gains hide where the
        # models are unsure.
        s = self.settings
        far_from_capacity = float(self._margin_gp.predict(inc_features)[0][0]) >= s.far_spare
        expected = (search.phase is Phase.EXHAUSTED or search.known_ground
                    or (far_from_capacity and search.windows >= s.min_search))
        promise = self._promise(pool, inc_p95, expected=expected)
        if far_from_capacity and not expected and search.windows >= s.free_hope:
            # there a step the models expect to be slower only moved a config that had come near its final
            promise = np.where(pool.mean <= inc_p95, promise, -np.inf)
        limit = gain_threshold(measured_s, noise_s, s)
        threshold = limit.gain_s
        best = float(np.max(promise))
        kind = "predicted" if expected else "optimistic"
        why = f"{kind} gain {{gain_ms:.1f}} ms > {threshold * 1e3:.1f} ms ({limit.why})"
        if best <= threshold:
            below = f"best {kind} gain {best * 1e3:.1f} ms < {threshold * 1e3:.1f} ms"
            if dof < s.noise_dof:  # before stopping, know the noise: measure the incumbent itself again
                return self._hold(incumbent, inc_p95, f"{below}, the noise {noise_s * 1e3:.1f} ms the models' guess: "
                                                      "measure the incumbent again to know it", noise_s)
            safe_share = float(np.mean(pool.safe))
            if (search.phase is Phase.SEARCHING and not search.known_ground and search.windows < s.min_search
                    and safe_share < s.safe_share_settled):
                # A young search that knows little around the incumbent safe: measure where the models are least
                # sure, among the configs that could be faster at all, so that the safe set grows (SafeOpt's
                # expanders) and models of a few windows see where they have not looked. Where most of the trust
                # region is known safe already, such a window only moves the config.
                why = (f"{below}, {safe_share:.0%} of the trust region known safe after {search.windows} < "
                       f"{s.min_search} windows: explore the most uncertain")
                could_gain = pool.safe & (pool.optimistic < inc_p95)
                if not np.any(could_gain):
                    return self._hold(incumbent, inc_p95, f"{below}, and no safe config could be faster", noise_s)
                order = np.argsort(-np.where(could_gain, pool.mean - pool.optimistic + pool.m_std, -np.inf)
                                   )[: int(could_gain.sum())]
            else:
                # The trust region is a box around the incumbent; the safe set reaches beyond it. Stop only when
                # nothing safe anywhere promises more than the threshold (even optimistically, but on known ground).
                wide = self._pool(center, context, s.length_max, incumbent)
                wide_promise = self._promise(wide, inc_p95, expected=search.known_ground or far_from_capacity)
                if float(np.max(wide_promise)) <= threshold:
                    held = Converged(incumbent, context.offered_eps, measured_s, noise_s,
                                     max(best, float(np.max(wide_promise)), 0.0), limit)
                    search.converge(held)
                    return self._hold(incumbent, inc_p95, held.reason, noise_s)
                search.widen(s)  # search again from a trust region of the initial side
                pool, promise = wide, wide_promise
                beyond = "a predicted" if search.known_ground else "an optimistic"
                why = (f"{below} in the trust region, but beyond it {beyond} gain {{gain_ms:.1f}} ms: "
                       "widen the trust region")
                order = np.argsort(-promise)[: int(np.sum(promise > threshold))]
        else:
            order = np.argsort(-promise)[: int(np.sum(promise > threshold))]
        i = self._first_passing(order, pool.cand, incumbent, context)
        if i is None:
            return self._hold(incumbent, inc_p95, f"the twin expects none of the "
                                                  f"{min(len(order), s.screen_top)} best candidates to keep up",
                              noise_s)
        lcb = pool.m_mean[i] - s.beta * pool.m_std[i]
        self._current = self.cube.decode(pool.cand[i], base=incumbent)
        return Suggestion(self._current,
                          f"{why.format(gain_ms=promise[i] * 1e3)}: predicted P95 {pool.mean[i]:.3f}s vs incumbent "
                          f"{inc_p95:.3f}s, margin LCB {lcb:+.3f}, trust region {search.region.length:.2f}, "
                          f"{int(pool.safe.sum())}/{len(pool.safe)} safe",
                          {"p95_s": float(pool.mean[i]), "p95_lower_s": float(pool.optimistic[i]),
                           "margin": float(pool.m_mean[i]), "margin_lcb": float(lcb), "noise_s": noise_s,
                           "incumbent_p95_s": inc_p95})

    def _pool(self, center: np.ndarray, context: Context, length: float, base: Config) -> _Pool:
        """Candidates in a box of side `length` around `center` (and stage-by-stage moves in it), scored; untuned
        values from `base`."""
        s = self.settings
        cand = np.vstack([candidates(center, length, self.rng, s), self._stage_moves(center, context, length, base)])
        inputs = np.column_stack([cand, np.full(len(cand), context_feature(context.offered_eps, s))])
        chunks = np.array_split(inputs, max(1, len(inputs) // s.score_chunk))
        scored = list(self.parallel_map(partial(self._score_chunk, base=base), chunks))
        mean, optimistic, m_mean, m_std = (np.concatenate([s[k] for s in scored]) for k in range(4))
        safe = m_mean - s.beta * m_std >= self.margin_floor
        if self.policy.p95_ceiling_s is not None:
            safe &= self._predict_p95(inputs, [-s.beta], base)[0] <= self.policy.p95_ceiling_s
        return _Pool(cand, mean, optimistic, m_mean, m_std, safe)

    def _promise(self, pool: _Pool, inc_p95: float, expected: bool) -> np.ndarray:
        """Each candidate's gain over the incumbent's predicted P95 (expected, or optimistic), a restart's
        discounted; -inf where not safe."""
        promise = inc_p95 - (pool.mean if expected else pool.optimistic)
        moved = np.abs(pool.cand - self.cube.encode(self._current))[:, self.cube.restart_mask()]
        restarts = np.any(moved > self.settings.moved_tolerance, axis=1)
        promise = np.where(restarts, promise * self.settings.restart_discount, promise)  # a restart must promise more
        return np.where(pool.safe, promise, -np.inf)

    def _incumbent_p95s(self, incumbent: Config, context: Context) -> list[float]:
        """The P95 of the incumbent's feasible windows at about this load."""
        h = self.history
        return [p for c, ctx, p, ok in zip(h.configs, h.contexts, h.p95_s, h.feasible)
                if ok and c == incumbent and not load_moved(ctx.offered_eps, context.offered_eps)]

    def _measured_p95(self, incumbent: Config, context: Context, predicted_s: float) -> float:
        """The mean P95 of the incumbent's feasible windows at about this load (the model's, with none)."""
        repeats = self._incumbent_p95s(incumbent, context)
        return float(np.mean(repeats)) if repeats else predicted_s

    def _window_noise(self, context: Context, p95_s: float, features: np.ndarray) -> tuple[float, int]:
        """A window's P95 noise (s) at the incumbent (its P95 `p95_s`, measured where it can be), and how many
        repeated windows it rests on.

        Once `noise_dof` repeated windows exist: the relative spread of the P95 of every config measured more
        than once at about this load with a P95 like the incumbent's (the incumbent above all: the daemon
        holds it), pooled and robust to a stray window. Before: the stage models' noise terms (each stage's
        P95 × its log-noise deviation, in quadrature), which also take in what the models do not fit yet, so
        they overstate the noise. Either way never below `noise_floor` of the P95 nor half the step the latest
        window states for its latencies (a millisecond live, a coarser event time's, none on the twin): live
        repeats can agree to the millisecond, and a gain no window resolves must not count.
        """
        s = self.settings
        floor_s = max(p95_s * s.noise_floor, self._resolution_s / 2)
        repeats = alike_repeats(self.history, context.offered_eps, p95_s, s)
        dof = sum(len(g) - 1 for g in repeats)
        if dof < s.noise_dof:
            modelled = 0.0  # variance
            for stage, gp in self._stage_gps.items():
                mean, _ = self._stage_log_p95(stage, features, self._current)
                modelled += float(np.exp(mean[0])) ** 2 * gp.noise_var
            return max(math.sqrt(modelled), floor_s), dof
        return max(pooled_noise_s(repeats, p95_s, s), floor_s), dof

    def _hold(self, incumbent: Config, inc_p95: float, why: str, noise_s: float) -> Suggestion:
        self._current = incumbent
        return Suggestion(incumbent, f"{why}: keep the incumbent",
                          {"p95_s": inc_p95, "noise_s": noise_s, "incumbent_p95_s": inc_p95})

    def _first_passing(self, order: np.ndarray, cand: np.ndarray, incumbent: Config, context: Context) -> int | None:
        """The best-ranked candidate the twin expects to keep up as well as the incumbent, or else within a step of
        every config the pipeline was measured keeping up (`screen_bar`); the best one, without a screen."""
        if self.screen is None:
            return int(order[0])
        top = [int(k) for k in order[: self.settings.screen_top]]
        configs = [incumbent] + [self.cube.decode(cand[k], base=incumbent) for k in top]
        ratios = list(self.parallel_map(lambda c: self.screen.ratio(c, context.offered_eps), configs))
        self._screened = dict(zip(configs, ratios))
        h = self.history
        here = [(r, m >= self.margin_floor) for r, m, ctx in zip(h.twin_ratio, h.margin, h.contexts)
                if math.isfinite(r) and not load_moved(ctx.offered_eps, context.offered_eps)]
        fell_behind = [r for r, kept_up in here if not kept_up]
        floor = self.policy.min_throughput_ratio
        for bar in (screen_bar([ratios[0]], fell_behind, floor, step=1.0),
                    screen_bar([ratios[0]] + [r for r, kept_up in here if kept_up], fell_behind, floor)):
            passing = next((k for k, ratio in zip(top, ratios[1:]) if ratio >= bar), None)
            if passing is not None:
                return passing
        return None

    def _score_chunk(self, features: np.ndarray, base: Config) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        mean, optimistic = self._predict_p95(features, [0.0, self.settings.kappa], base)
        m_mean, m_std = self._margin_gp.predict(features)
        return mean, optimistic, m_mean, m_std

    def _stage_moves(self, center: np.ndarray, context: Context, length: float, base: Config) -> np.ndarray:
        """Candidates built stage by stage, as an additive model allows (Add-GP-UCB's idea).

        For each stage, the move of only its own parameters that its model finds most promising; then
        each such move alone, and all of them together.
        """
        per_stage = self.settings.stage_moves
        lo = np.clip(center - length / 2, 0.0, 1.0)
        hi = np.clip(center + length / 2, 0.0, 1.0)
        moves = []
        for stage in self._stage_gps:
            dims = self.stage_dims[stage]
            if dims.size == 0:
                continue
            trial = np.tile(center, (per_stage, 1))
            trial[:, dims] = self.rng.uniform(lo[dims], hi[dims], size=(per_stage, dims.size))
            features = np.column_stack([trial, np.full(per_stage, context_feature(context.offered_eps, self.settings))])
            best = trial[int(np.argmin(self._stage_p95(stage, features, [self.settings.kappa], base)[0]))]
            moves.append((dims, best[dims]))
        together = center.copy()
        singles = []
        for dims, values in moves:
            single = center.copy()
            single[dims] = values
            singles.append(single)
            together[dims] = values
        return np.array(singles + [together]) if moves else np.empty((0, center.size))
