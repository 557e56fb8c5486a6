"""What every model of the learner takes as input: the tuned parameters in the unit cube, then the offered load.

The load is a context (as in contextual GP bandits, CGP-UCB): the learner does not choose it, but the
models learn how it moves the latency and the margin, so what they learnt at one load carries to another.
"""

from __future__ import annotations

import math

import numpy as np

from models.bayes.settings import LearnerSettings
from models.learning import Context, TunedCube
from models.space import Config


def context_feature(offered_eps: float, settings: LearnerSettings) -> float:
    """The offered load (events/s) on [0, 1], log-scaled over `settings.load_range_eps`."""
    lo, hi = (math.log(eps) for eps in settings.load_range_eps)
    return float(np.clip((math.log(max(offered_eps, 1.0)) - lo) / (hi - lo), 0.0, 1.0))


def offered_eps_of(feature: np.ndarray, settings: LearnerSettings) -> np.ndarray:
    """The offered load (events/s) a context feature stands for: `context_feature`'s inverse."""
    lo, hi = (math.log(eps) for eps in settings.load_range_eps)
    return np.exp(lo + np.asarray(feature, dtype=float) * (hi - lo))


def features(cube: TunedCube, config: Config, context: Context, settings: LearnerSettings) -> np.ndarray:
    """One model input: `config`'s tuned values in the unit cube, then the context feature of its load."""
    return np.append(cube.encode(config), context_feature(context.offered_eps, settings))
