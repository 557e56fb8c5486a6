"""The safe Bayesian learner: stage-wise GP surrogates, safe acquisition, a trust region around the incumbent.

- Latency is modelled stage by stage, as the paper decomposes it (T_E2E ≈ Σ stages): one Gaussian
  process (scikit-learn; Matérn 5/2, one length scale per dimension, a noise term) per pipeline stage
  for log stage-P95, over only the parameters that move that stage (`STAGE_PARAMS`) plus the offered
  load (log-scaled) as a context input. Each is a function of two to four inputs, which a few windows
  pin down; their sum predicts the end-to-end P95. Without stage data the whole pipeline is one stage.
- Throughput is modelled by one GP over every tuned parameter for the margin (output / offered − 1).
- Safety: a candidate is proposed only if the margin GP's lower confidence bound clears the policy's
  floor (margin ≥ min_throughput_ratio − 1) and, with a P95 ceiling, the predicted P95's upper bound
  stays under it. The margin GP's prior mean is 0 with a fixed prior spread, so far from every
  observation the bound fails and the learner expands the safe set outward from the configs it has
  seen work (SafeOpt's idea); the first config is the running one, never a random one.
- Trust region (TuRBO's idea): candidates are drawn in a box of side `length` around the daemon's
  incumbent (`Context.incumbent`), perturbing a few dimensions at a time; the box doubles after
  successive improvements and halves after successive failures; an infeasible window (its `Verdict`)
  counts as several failures.
- Pre-screening (optional): the best few candidates are simulated on a twin (`TwinScreen`, fanned out
  through `parallel_map`); only one the twin expects to keep up, with headroom, is proposed.
- Acquisition: the optimistic gain, incumbent's predicted P95 minus the candidate's lower bound
  (Σ exp(μ − κσ) over stages). A candidate that restarts a component (Filebeat queue/output, the sink)
  must promise more: its gain is multiplied by `restart_discount`, and restart dimensions are
  perturbed less often. When nothing promises a gain, the most uncertain safe candidate is measured.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

from models.learning import HISTORY_BEST, HISTORY_RECENT, Context, Suggestion, TunedCube, kept_history
from models.observation import Observation
from models.policy import Policy
from models.screen import TwinScreen
from models.space import Config
from models.verdict import Verdict

MapFn = Callable[[Callable, Iterable], Iterable]
_RATE_LOG_RANGE = (math.log(10.0), math.log(1e6))  # offered load, events/s, mapped onto [0, 1]
_MIN_STAGE_S = 1e-3  # stage latencies below a millisecond are all "nothing" to the model


def context_feature(context: Context) -> float:
    lo, hi = _RATE_LOG_RANGE
    return float(np.clip((math.log(max(context.offered_eps, 1.0)) - lo) / (hi - lo), 0.0, 1.0))


class Surrogate:
    """A GP with per-dimension length scales and a learned noise term.

    Margin model (`prior_std` set): prior mean 0 and a fixed prior spread, which is what makes
    "unexplored" mean "not known to be safe". Latency models: prior mean = the mean of what was seen,
    and a prior spread of at least half a log unit, so a stage whose parameters were never moved is
    still expected to move when they are, and the optimism of the acquisition goes looking.
    """

    def __init__(self, dims: int, prior_std: float | None = None, seed: int = 0) -> None:
        self.prior_std = prior_std
        if prior_std:
            # Length scales capped: a flat run of feasible windows must not make the model vouch for
            # configs far from anything it has seen.
            signal = ConstantKernel(prior_std**2, "fixed") * Matern(np.full(dims, 0.3), (0.05, 2.0), nu=2.5)
            noise = WhiteKernel((prior_std / 10) ** 2, (1e-8, (prior_std / 3) ** 2))
        else:
            signal = ConstantKernel(1.0, (0.25, 4.0)) * Matern(np.full(dims, 0.3), (0.03, 3.0), nu=2.5)
            noise = WhiteKernel(1e-2, (1e-4, 0.25))
        self.kernel = signal + noise
        self.seed = seed
        self._offset = 0.0
        self._gp: GaussianProcessRegressor | None = None

    def fit(self, x: np.ndarray, y: np.ndarray) -> None:
        self._offset = 0.0 if self.prior_std else float(np.mean(y))
        # Refit from the last fitted hyperparameters: one optimiser run, no restarts, keeps tell() fast.
        kernel = self._gp.kernel_ if self._gp is not None else self.kernel
        gp = GaussianProcessRegressor(kernel, normalize_y=False, n_restarts_optimizer=0, random_state=self.seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            gp.fit(x, y - self._offset)
        self._gp = gp

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and the std of the latent function (measurement noise taken out)."""
        assert self._gp is not None, "fit before predict"
        mean, std = self._gp.predict(x, return_std=True)
        noise_var = self._gp.kernel_.k2.noise_level
        return mean + self._offset, np.sqrt(np.maximum(std**2 - noise_var, 1e-18))


@dataclass
class _History:
    configs: list[Config] = field(default_factory=list)
    contexts: list[Context] = field(default_factory=list)
    x: list[np.ndarray] = field(default_factory=list)  # unit-cube coordinates, then the context feature
    stage_log_p95: list[dict[str, float]] = field(default_factory=list)
    margin: list[float] = field(default_factory=list)
    p95_s: list[float] = field(default_factory=list)
    feasible: list[bool] = field(default_factory=list)

    def keep(self, recent: int, best: int) -> None:
        """Forget all but what `kept_history` keeps, so fits and memory stay bounded however long the run."""
        kept = kept_history(self.p95_s, self.feasible, recent, best)
        if len(kept) < len(self.p95_s):
            for name in ("configs", "contexts", "x", "stage_log_p95", "margin", "p95_s", "feasible"):
                values = getattr(self, name)
                setattr(self, name, [values[i] for i in kept])


class SafeBayesLearner:
    """Minimise P95 subject to throughput keeping up, safely, around the incumbent."""

    def __init__(self, cube: TunedCube, start: Config, *, stage_params: Mapping[str, Sequence[str]] | None = None,
                 seed: int = 0, beta: float = 2.0, kappa: float = 1.0, candidates: int = 1024,
                 length_init: float = 0.8, length_min: float = 0.1, length_max: float = 1.6,
                 restart_discount: float = 0.8, margin_prior_std: float = 0.08, screen: TwinScreen | None = None,
                 screen_top: int = 6, parallel_map: MapFn = map, history_recent: int = HISTORY_RECENT,
                 history_best: int = HISTORY_BEST) -> None:
        self.cube = cube
        self.start = cube.policy.enforce(start)
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.beta, self.kappa = beta, kappa
        self.candidates = candidates
        self.length = self.length_init = length_init
        self.length_min, self.length_max = length_min, length_max
        self.restart_discount = restart_discount
        self.parallel_map = parallel_map
        self.screen, self.screen_top = screen, screen_top
        self.history = _History()
        self.history_recent, self.history_best = history_recent, history_best
        self.stage_params = dict(stage_params) if stage_params else None
        self.margin_prior_std = margin_prior_std
        self._new_models()
        self._successes = self._failures = 0
        self._best_p95_s = math.inf
        self._current = self.start

    @property
    def policy(self) -> Policy:
        return self.cube.policy

    def _new_models(self) -> None:
        self.stage_dims = self.cube.stage_dims(self.stage_params)
        self._stage_gps: dict[str, Surrogate] = {}
        self._margin_gp = Surrogate(self.cube.dims + 1, prior_std=self.margin_prior_std, seed=self.seed)

    def update_policy(self, policy: Policy) -> None:
        """Adopt new bounds and pins: re-encode every observation in the new cube and refit."""
        self.cube = self.cube.with_policy(policy)
        self.start = policy.enforce(self.start)
        h = self.history
        h.x = [self._features(c, ctx) for c, ctx in zip(h.configs, h.contexts)]
        self._new_models()
        if h.configs:
            self._fit()

    @property
    def margin_floor(self) -> float:
        return self.policy.min_throughput_ratio - 1.0

    def _features(self, config: Config, context: Context) -> np.ndarray:
        return np.append(self.cube.encode(config), context_feature(context))

    def _stage_values(self, observation: Observation) -> dict[str, float]:
        if set(self.stage_dims) == {"e2e"}:
            return {"e2e": math.log(max(observation.p95_s, _MIN_STAGE_S))}
        return {stage: math.log(max(observation.stage_p95_s[stage], _MIN_STAGE_S))
                for stage in self.stage_dims if stage in observation.stage_p95_s}

    def tell(self, config: Config, context: Context, observation: Observation, verdict: Verdict) -> None:
        h = self.history
        # the margin GP models the raw ratio; whether the window was feasible is the verdict's to say
        margin = float(np.clip(observation.throughput_ratio - 1.0, -1.0, 0.5))
        h.configs.append(config)
        h.contexts.append(context)
        h.x.append(self._features(config, context))
        h.stage_log_p95.append(self._stage_values(observation))
        h.margin.append(margin)
        h.p95_s.append(observation.p95_s)
        h.feasible.append(verdict.ok)
        h.keep(self.history_recent, self.history_best)
        self._current = config
        self._update_trust_region(verdict.ok, observation.p95_s)
        self._fit()

    def _update_trust_region(self, feasible: bool, p95_s: float) -> None:
        if feasible and p95_s < 0.99 * self._best_p95_s:
            # the first feasible window is the baseline, not an improvement: it must not widen the region
            improved = math.isfinite(self._best_p95_s)
            self._best_p95_s = p95_s
            self._successes, self._failures = self._successes + improved, 0
        else:
            self._successes, self._failures = 0, self._failures + (1 if feasible else 4)
        if self._successes >= 2:
            self.length, self._successes = min(2 * self.length, self.length_max), 0
        if self._failures >= 4:
            self.length, self._failures = self.length / 2, 0
            if self.length < self.length_min:
                self.length = self.length_init  # converged here: look around afresh

    def _fit(self) -> None:
        h = self.history
        x = np.array(h.x)
        context_col = x.shape[1] - 1
        for stage, dims in self.stage_dims.items():
            rows = [i for i, values in enumerate(h.stage_log_p95) if stage in values]
            if not rows:
                continue
            columns = np.append(dims, context_col)
            gp = self._stage_gps.setdefault(stage, Surrogate(len(columns), seed=self.seed))
            gp.fit(x[np.ix_(rows, columns)], np.array([h.stage_log_p95[i][stage] for i in rows]))
        self._margin_gp.fit(x, np.array(h.margin))

    def _predict_p95(self, features: np.ndarray, kappa: float) -> np.ndarray:
        """Σ over stages of exp(μ − κσ): the predicted P95 (κ = 0) or its optimistic bound (κ > 0)."""
        total = np.zeros(len(features))
        for stage, gp in self._stage_gps.items():
            mean, std = gp.predict(features[:, np.append(self.stage_dims[stage], features.shape[1] - 1)])
            total += np.exp(mean - kappa * std)
        return total

    def suggest(self, context: Context) -> Suggestion:
        if not self.history.configs:
            self._current = self.start
            return Suggestion(self.start, "measure the running config first")
        # the trust region follows the daemon's incumbent (the start until it has one), under today's policy
        incumbent = self.policy.enforce(context.incumbent if context.incumbent is not None else self.start)
        center = self.cube.encode(incumbent)
        cand = np.vstack([self._candidates(center), self._stage_moves(center, context)])
        features = np.column_stack([cand, np.full(len(cand), context_feature(context))])
        chunks = np.array_split(features, max(1, len(features) // 256))
        scored = list(self.parallel_map(self._score_chunk, chunks))
        mean, optimistic, m_mean, m_std = (np.concatenate([s[k] for s in scored]) for k in range(4))
        safe = m_mean - self.beta * m_std >= self.margin_floor
        if self.policy.p95_ceiling_s is not None:
            safe &= self._predict_p95(features, -self.beta) <= self.policy.p95_ceiling_s
        inc_p95 = float(self._predict_p95(self._features(incumbent, context)[None, :], 0.0)[0])
        gain = inc_p95 - optimistic
        restarts = np.any(np.abs(cand - self.cube.encode(self._current))[:, self.cube.restart_mask()] > 1e-9, axis=1)
        gain = np.where(restarts, gain * self.restart_discount, gain)
        if not np.any(safe):
            self.length = max(self.length / 2, self.length_min)
            return self._hold(incumbent, inc_p95, f"no candidate predicted safe in trust region {self.length:.2f}")
        uncertainty = mean - optimistic
        if float(np.max(np.where(safe, gain, -np.inf))) > 0.01 * inc_p95:
            score, why = gain, "optimistic gain"
        elif float(np.max(np.where(safe, uncertainty, -np.inf))) > 0.1 * inc_p95:
            # nothing it trusts promises a gain, but it is unsure somewhere safe: go and look
            score, why = uncertainty + m_std, "explore the most uncertain safe candidate"
        else:
            return self._hold(incumbent, inc_p95, f"converged: no safe candidate promises a gain over {inc_p95:.3f}s")
        order = np.argsort(-np.where(safe, score, -np.inf))[: int(safe.sum())]
        i = self._first_passing(order, cand, incumbent, context)
        if i is None:
            return self._hold(incumbent, inc_p95, f"the twin expects none of the "
                                                  f"{min(len(order), self.screen_top)} best candidates to keep up")
        why += f" {gain[i]:.3f}s" if why == "optimistic gain" else ""
        lcb = m_mean[i] - self.beta * m_std[i]
        self._current = self.cube.decode(cand[i], base=incumbent)
        return Suggestion(self._current,
                          f"{why}: predicted P95 {mean[i]:.3f}s vs incumbent {inc_p95:.3f}s, margin LCB "
                          f"{lcb:+.3f}, trust region {self.length:.2f}, {int(safe.sum())}/{len(safe)} safe",
                          {"p95_s": float(mean[i]), "p95_lower_s": float(optimistic[i]),
                           "margin": float(m_mean[i]), "margin_lcb": float(lcb)})

    def _hold(self, incumbent: Config, inc_p95: float, why: str) -> Suggestion:
        self._current = incumbent
        return Suggestion(incumbent, f"{why}: keep the incumbent", {"p95_s": inc_p95})

    def _first_passing(self, order: np.ndarray, cand: np.ndarray, incumbent: Config, context: Context) -> int | None:
        """The best-ranked candidate the twin expects to keep up (the best one, without a screen)."""
        if self.screen is None:
            return int(order[0])
        top = [int(k) for k in order[: self.screen_top]]
        configs = [self.cube.decode(cand[k], base=incumbent) for k in top]
        floor = self.policy.min_throughput_ratio
        verdicts = list(self.parallel_map(lambda c: self.screen.keeps_up(c, context.offered_eps, floor), configs))
        return next((k for k, ok in zip(top, verdicts) if ok), None)

    def _score_chunk(self, features: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        mean = self._predict_p95(features, 0.0)
        optimistic = self._predict_p95(features, self.kappa)
        m_mean, m_std = self._margin_gp.predict(features)
        return mean, optimistic, m_mean, m_std

    def _stage_moves(self, center: np.ndarray, context: Context, per_stage: int = 256) -> np.ndarray:
        """Candidates built stage by stage, as an additive model allows (Add-GP-UCB's idea).

        For each stage, the move of only its own parameters that its model finds most promising; then
        each such move alone, and all of them together.
        """
        lo = np.clip(center - self.length / 2, 0.0, 1.0)
        hi = np.clip(center + self.length / 2, 0.0, 1.0)
        moves = []
        for stage, gp in self._stage_gps.items():
            dims = self.stage_dims[stage]
            if dims.size == 0:
                continue
            trial = np.tile(center, (per_stage, 1))
            trial[:, dims] = self.rng.uniform(lo[dims], hi[dims], size=(per_stage, dims.size))
            features = np.column_stack([trial[:, dims], np.full(per_stage, context_feature(context))])
            mean, std = gp.predict(features)
            best = trial[int(np.argmin(mean - self.kappa * std))]
            moves.append((dims, best[dims]))
        together = center.copy()
        singles = []
        for dims, values in moves:
            single = center.copy()
            single[dims] = values
            singles.append(single)
            together[dims] = values
        return np.array(singles + [together]) if moves else np.empty((0, center.size))

    def _candidates(self, center: np.ndarray) -> np.ndarray:
        """Points in the trust region around `center`, a few dimensions perturbed at a time."""
        d = self.cube.dims
        rng = self.rng
        p = min(1.0, 4.0 / max(d, 1))
        prob = np.where(self.cube.restart_mask(), p * 0.5, p)
        mask = rng.uniform(size=(self.candidates, d)) < prob
        mask[np.arange(self.candidates), rng.integers(0, d, self.candidates)] |= ~mask.any(axis=1)
        lo = np.clip(center - self.length / 2, 0.0, 1.0)
        hi = np.clip(center + self.length / 2, 0.0, 1.0)
        points = np.where(mask, rng.uniform(lo, hi, size=(self.candidates, d)), center)
        return np.vstack([center[None, :], points])
