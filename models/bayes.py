"""The safe Bayesian learner: GP surrogates, a trust region around the incumbent, safe acquisition.

- Two Gaussian processes (scikit-learn; Matérn 5/2 with one length scale per dimension and a noise
  term) over the tuned parameters in the unit box plus the offered load (log-scaled) as a context
  input: one for log P95, one for the throughput margin (output / offered − 1).
- Safety: a candidate is proposed only if the margin GP's lower confidence bound clears the policy's
  floor (margin ≥ min_throughput_ratio − 1) and, with a P95 ceiling, the P95 GP's upper bound stays
  under it. The margin GP's prior mean is 0 with a fixed prior spread, so far from every observation
  the bound fails and the learner expands the safe set outward from the configs it has seen work
  (SafeOpt's idea); the first config is the running one (the component defaults), never a random one.
- Trust region (TuRBO's idea): candidates are drawn in a box of side `length` around the incumbent,
  perturbing a few dimensions at a time; the box doubles after successive improvements and halves
  after successive failures; a window that breached a guardrail counts as a failure at once.
- Acquisition: expected improvement on log P95 against the incumbent's predicted value at the
  current load. A candidate that restarts a component (Filebeat queue/output, the sink) must promise
  more: its EI is multiplied by `restart_discount`, and restart dimensions are perturbed less often.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np
from scipy.stats import norm
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

from models.learning import Box, Context
from models.observation import Observation
from models.policy import Policy
from models.space import Config

MapFn = Callable[[Callable, Iterable], Iterable]
_RATE_LOG_RANGE = (math.log(10.0), math.log(1e6))  # offered load, events/s, mapped onto [0, 1]


def context_feature(context: Context) -> float:
    lo, hi = _RATE_LOG_RANGE
    return float(np.clip((math.log(max(context.offered_eps, 1.0)) - lo) / (hi - lo), 0.0, 1.0))


class Surrogate:
    """A GP with per-dimension length scales and a learned noise term.

    With `prior_std` set, targets are not normalised: the prior mean is 0 and the prior spread fixed,
    which is what makes "unexplored" mean "not known to be safe" for the margin model.
    """

    def __init__(self, dims: int, prior_std: float | None = None, seed: int = 0) -> None:
        self.prior_std = prior_std
        if prior_std:
            # Length scales capped at the box size: a flat run of feasible windows must not make the
            # model vouch for configs far from anything it has seen.
            signal = ConstantKernel(prior_std**2, "fixed") * Matern(np.full(dims, 0.3), (0.05, 1.0), nu=2.5)
            noise = WhiteKernel((prior_std / 10) ** 2, (1e-8, (prior_std / 3) ** 2))
        else:
            signal = ConstantKernel(1.0, (1e-2, 1e2)) * Matern(np.full(dims, 0.3), (1e-2, 1e2), nu=2.5)
            noise = WhiteKernel(1e-2, (1e-6, 1.0))
        self.kernel = signal + noise
        self.seed = seed
        self._gp: GaussianProcessRegressor | None = None

    def fit(self, x: np.ndarray, y: np.ndarray) -> None:
        # Refit from the last fitted hyperparameters: one optimiser run, no restarts, keeps suggest() fast.
        kernel = self._gp.kernel_ if self._gp is not None else self.kernel
        gp = GaussianProcessRegressor(kernel, normalize_y=self.prior_std is None, n_restarts_optimizer=0,
                                      random_state=self.seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            gp.fit(x, y)
        self._gp = gp

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and the std of the latent function (measurement noise taken out)."""
        assert self._gp is not None, "fit before predict"
        mean, std = self._gp.predict(x, return_std=True)
        noise_var = self._gp.kernel_.k2.noise_level * (self._gp._y_train_std**2 if self._gp.normalize_y else 1.0)
        return mean, np.sqrt(np.maximum(std**2 - noise_var, 1e-18))


@dataclass
class _History:
    configs: list[Config] = field(default_factory=list)
    x: list[np.ndarray] = field(default_factory=list)
    log_p95: list[float] = field(default_factory=list)
    margin: list[float] = field(default_factory=list)
    feasible: list[bool] = field(default_factory=list)


class SafeBayesLearner:
    """Minimise P95 subject to throughput keeping up, safely, around the incumbent."""

    def __init__(self, box: Box, start: Config, *, seed: int = 0, beta: float = 2.0, candidates: int = 1024,
                 length_init: float = 0.2, length_min: float = 0.02, length_max: float = 0.8,
                 restart_discount: float = 0.6, margin_prior_std: float = 0.15, parallel_map: MapFn = map) -> None:
        self.box = box
        self.start = box.policy.enforce(start)
        self.rng = np.random.default_rng(seed)
        self.beta = beta
        self.candidates = candidates
        self.length = self.length_init = length_init
        self.length_min, self.length_max = length_min, length_max
        self.restart_discount = restart_discount
        self.parallel_map = parallel_map
        self.history = _History()
        self._p95_gp = Surrogate(box.dims + 1, seed=seed)
        self._margin_gp = Surrogate(box.dims + 1, prior_std=margin_prior_std, seed=seed)
        self._successes = self._failures = 0
        self._best_value = math.inf
        self._current = self.start
        self.last_reason = "start from the running config"
        self.last_prediction: dict[str, float] = {}

    @property
    def policy(self) -> Policy:
        return self.box.policy

    @property
    def margin_floor(self) -> float:
        return self.policy.min_throughput_ratio - 1.0

    def incumbent(self, context: Context | None = None) -> Config:
        """The best feasible config seen (by predicted P95 at `context` once the model exists)."""
        h = self.history
        feasible = [i for i, ok in enumerate(h.feasible) if ok]
        if not feasible:
            return self.start
        if context is None or len(h.x) < 2:
            return h.configs[min(feasible, key=lambda i: h.log_p95[i])]
        x = np.array([self._features(h.configs[i], context) for i in feasible])
        mean, _ = self._p95_gp.predict(x)
        return h.configs[feasible[int(np.argmin(mean))]]

    def _features(self, config: Config, context: Context) -> np.ndarray:
        return np.append(self.box.encode(config), context_feature(context))

    def tell(self, config: Config, context: Context, observation: Observation) -> None:
        h = self.history
        margin = float(np.clip(observation.throughput_ratio - 1.0, -1.0, 0.5))
        ceiling = self.policy.p95_ceiling_s
        feasible = margin >= self.margin_floor and (ceiling is None or observation.p95_s <= ceiling)
        value = math.log(max(observation.p95_s, 1e-4))
        h.configs.append(config)
        h.x.append(self._features(config, context))
        h.log_p95.append(value)
        h.margin.append(margin)
        h.feasible.append(feasible)
        self._current = config
        improved = feasible and value < self._best_value - 0.01
        if improved:
            self._best_value = value
            self._successes, self._failures = self._successes + 1, 0
        else:
            self._successes, self._failures = 0, self._failures + (3 if not feasible else 1)
        if self._successes >= 2:
            self.length, self._successes = min(2 * self.length, self.length_max), 0
        if self._failures >= 3:
            self.length, self._failures = self.length / 2, 0
            if self.length < self.length_min:
                self.length = self.length_init  # converged here: look around afresh
        x, y_p95, y_margin = np.array(h.x), np.array(h.log_p95), np.array(h.margin)
        self._p95_gp.fit(x, y_p95)
        self._margin_gp.fit(x, y_margin)

    def suggest(self, context: Context) -> Config:
        if not self.history.configs:
            self.last_reason = "measure the running config first"
            self._current = self.start
            return self.start
        incumbent = self.incumbent(context)
        center = self.box.encode(incumbent)
        cand = self._candidates(center)
        features = np.column_stack([cand, np.full(len(cand), context_feature(context))])
        chunks = np.array_split(features, max(1, len(features) // 256))
        scored = list(self.parallel_map(self._score_chunk, chunks))
        mean = np.concatenate([s[0] for s in scored])
        std = np.concatenate([s[1] for s in scored])
        m_mean = np.concatenate([s[2] for s in scored])
        m_std = np.concatenate([s[3] for s in scored])
        safe = m_mean - self.beta * m_std >= self.margin_floor
        if self.policy.p95_ceiling_s is not None:
            safe &= mean + self.beta * std <= math.log(self.policy.p95_ceiling_s)
        inc_mean, _ = self._p95_gp.predict(self._features(incumbent, context)[None, :])
        best = float(inc_mean[0])
        z = (best - mean) / std
        ei = (best - mean) * norm.cdf(z) + std * norm.pdf(z)
        current = self.box.encode(self._current)
        restarts = np.any(np.abs(cand - current)[:, self.box.restart_mask()] > 1e-9, axis=1)
        ei = np.where(restarts, ei * self.restart_discount, ei)
        if not np.any(safe):
            self.last_reason = f"no candidate predicted safe within trust region {self.length:.2f}: keep the incumbent"
            self.length = max(self.length / 2, self.length_min)
            self._current = incumbent
            self.last_prediction = {"p95_s": math.exp(best)}
            return incumbent
        i = int(np.argmax(np.where(safe, ei, -np.inf)))
        self.last_prediction = {"p95_s": math.exp(mean[i]), "p95_std_log": float(std[i]),
                                "margin": float(m_mean[i]), "margin_lcb": float(m_mean[i] - self.beta * m_std[i]),
                                "expected_improvement": float(ei[i])}
        self.last_reason = (f"EI {ei[i]:.3f} in trust region {self.length:.2f}, predicted P95 {math.exp(mean[i]):.3f}s "
                            f"vs incumbent {math.exp(best):.3f}s, margin LCB {m_mean[i] - self.beta * m_std[i]:+.3f}, "
                            f"{int(safe.sum())}/{len(safe)} candidates safe")
        self._current = self.box.decode(cand[i], base=incumbent)
        return self._current

    def _score_chunk(self, features: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        mean, std = self._p95_gp.predict(features)
        m_mean, m_std = self._margin_gp.predict(features)
        return mean, std, m_mean, m_std

    def _candidates(self, center: np.ndarray) -> np.ndarray:
        """Points in the trust region around `center`, a few dimensions perturbed at a time."""
        d = self.box.dims
        rng = self.rng
        p = min(1.0, 4.0 / max(d, 1))
        prob = np.where(self.box.restart_mask(), p * 0.5, p)
        mask = rng.uniform(size=(self.candidates, d)) < prob
        mask[np.arange(self.candidates), rng.integers(0, d, self.candidates)] |= ~mask.any(axis=1)
        lo = np.clip(center - self.length / 2, 0.0, 1.0)
        hi = np.clip(center + self.length / 2, 0.0, 1.0)
        points = np.where(mask, rng.uniform(lo, hi, size=(self.candidates, d)), center)
        return np.vstack([center[None, :], points])
