"""How much a window's P95 varies at the incumbent, and the gain a change must promise because of it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from models.bayes.history import History
from models.bayes.settings import LearnerSettings
from models.learning import load_moved
from models.space import Config


@dataclass(frozen=True)
class Threshold:
    """The gain a change must promise, and what sets it."""

    gain_s: float
    why: str


def threshold(p95_s: float, noise_s: float, s: LearnerSettings) -> Threshold:
    """The gain a change must promise at an incumbent of P95 `p95_s`: `confidence_z` × the noise of a window, or
    `min_gain` of the P95 where that is more (a smaller gain is not worth touching the pipeline)."""
    by_noise, by_size = s.confidence_z * noise_s, s.min_gain * p95_s
    if by_size > by_noise:
        return Threshold(by_size, f"{s.min_gain:.0%} of the P95")
    return Threshold(by_noise, f"{s.confidence_z:g} × noise {noise_s * 1e3:.1f} ms")


def alike_repeats(history: History, offered_eps: float, p95_s: float, s: LearnerSettings) -> list[list[float]]:
    """The log P95 of the feasible windows at about this load, grouped by config, of the configs whose mean P95 is
    within `noise_alike_ratio` of `p95_s`: one that barely keeps up is slower and far noisier."""
    groups: dict[Config, list[float]] = {}
    for c, ctx, p, ok in zip(history.configs, history.contexts, history.p95_s, history.feasible):
        if ok and p > 0 and math.isfinite(p) and not load_moved(ctx.offered_eps, offered_eps):
            groups.setdefault(c, []).append(math.log(p))
    alike = math.log(s.noise_alike_ratio)
    return [g for g in groups.values() if abs(float(np.mean(g)) - math.log(p95_s)) < alike]


def pooled_noise_s(repeats: list[list[float]], p95_s: float, s: LearnerSettings) -> float:
    """A window's P95 noise (s) at a P95 of `p95_s` from the repeats' relative spread, pooled and robust to a stray
    window: each repeat's deviation from its config's median (the median repeat itself left out, scaled so a
    pair's is its deviation from the mean), their median absolute value × `robust_sd`. A standard deviation would
    let one window still carrying a rollback's queue set the noise, and the threshold with it."""
    deviations = [abs(d) * math.sqrt(len(g) / (len(g) - 1))
                  for g in repeats if len(g) > 1
                  for d in sorted(np.array(g) - np.median(g), key=abs)[len(g) % 2:]]
    return p95_s * s.robust_sd * float(np.median(deviations))
