"""The trust region (TuRBO: Eriksson et al. 2019): a box around the incumbent that grows after successes and
shrinks after failures, and the candidates drawn in it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from models.bayes.settings import LearnerSettings


@dataclass
class TrustRegion:
    """A box of side `length` (unit cube) around the incumbent, and the streaks that resize it."""

    length: float
    successes: int = 0
    failures: int = 0
    best_p95_s: float = math.inf  # the best feasible window since the search (re-)opened

    def update(self, feasible: bool, p95_s: float, noise_s: float, s: LearnerSettings) -> bool:
        """Count a window as TuRBO does and resize: `success_streak` improvements in a row double the side (up to
        `length_max`), `failure_streak` failures halve it; an infeasible window counts `infeasible_failures`.
        An improvement is one beyond the window's noise `noise_s` and `improvement_ratio` of the best, not a lucky
        window; the first feasible window is the baseline, not an improvement. Returns whether the region has
        collapsed below `length_min` (it stays at that side): nothing found however close it looked."""
        if feasible and p95_s < min(s.improvement_ratio * self.best_p95_s, self.best_p95_s - noise_s):
            improved = math.isfinite(self.best_p95_s)
            self.best_p95_s = p95_s
            self.successes, self.failures = self.successes + improved, 0
        else:
            self.successes, self.failures = 0, self.failures + (1 if feasible else s.infeasible_failures)
        if self.successes >= s.success_streak:
            self.length, self.successes = min(s.region_factor * self.length, s.length_max), 0
        if self.failures >= s.failure_streak:
            self.length, self.failures = self.length / s.region_factor, 0
            if self.length < s.length_min:
                self.length = s.length_min
                return True
        return False

    def forget_best(self) -> None:
        """The best window was its incumbent's, and the incumbent went over budget since (the verdict's allowance
        for a reading's noise shrinks as readings agree): the next feasible window is the baseline again. Judged
        against the over-budget best, the walk back from a config far within budget counted no success and kept a
        collapsed side: 8 changes from 230 ms to 5.5 ms on fb-kafka steady."""
        self.best_p95_s, self.successes = math.inf, 0

    def narrow(self, s: LearnerSettings) -> None:
        """Halve the side, not below `length_min`: nothing in the box is predicted safe (SafeOpt proposes only
        inside the safe set), so look closer to the incumbent, where the models know more."""
        self.length = max(self.length / s.region_factor, s.length_min)


def candidates(center: np.ndarray, length: float, rng: np.random.Generator, s: LearnerSettings) -> np.ndarray:
    """The centre, `s.candidates` points in the box of side `length` around it (TuRBO's: each perturbs a random few
    dimensions, `perturbed_dims` on average, at least one), and each dimension alone at either edge of the box: a
    uniform draw in a few dimensions at once rarely lands on a cliff at the end of a range."""
    d, count = center.size, s.candidates
    p = min(1.0, s.perturbed_dims / max(d, 1))
    mask = rng.uniform(size=(count, d)) < p
    mask[np.arange(count), rng.integers(0, d, count)] |= ~mask.any(axis=1)
    lo = np.clip(center - length / 2, 0.0, 1.0)
    hi = np.clip(center + length / 2, 0.0, 1.0)
    points = np.where(mask, rng.uniform(lo, hi, size=(count, d)), center)
    edges = np.repeat(center[None, :], 2 * d, axis=0)
    edges[np.arange(d), np.arange(d)] = lo
    edges[d + np.arange(d), np.arange(d)] = hi
    return np.vstack([center[None, :], points, edges])
