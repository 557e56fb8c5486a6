"""What a config costs in CPU, modelled part by part, so the learner proposes only what the budget allows.

Each budgeted part (`models.budget.BUDGETED_PARTS`) gets a GP of its log CPU (cores) over the tuned parameters
and the load, as the margin model is one of the throughput margin: around the mean of what was measured, with a
fixed prior spread (`cost_prior_std`), so a config far from every measured one is not known to be within budget
and the budgeted set grows outward from configs measured within it (SafeOpt, with the cost as a second
constraint).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from models.bayes.history import History
from models.bayes.settings import LearnerSettings
from models.bayes.surrogate import Surrogate, cost_model


class CostModels:
    """One cost GP per budgeted part the windows measured."""

    def __init__(self, dims: int, settings: LearnerSettings, seed: int) -> None:
        self.dims = dims
        self.settings = settings
        self.seed = seed
        self.gps: dict[str, Surrogate] = {}

    def fit(self, history: History, x: np.ndarray, optimize: bool) -> None:
        """Fit each part's model on the windows that measured its CPU (model inputs `x`)."""
        for part in dict.fromkeys(p for cores in history.cpu_cores for p in cores):
            rows = [i for i, cores in enumerate(history.cpu_cores) if cores.get(part, 0.0) > 0]
            if rows:
                log_cores = np.log([history.cpu_cores[i][part] for i in rows])
                # A config far over every budget (a 1 ms scan of 200 files: 20x the others' CPU), told as it is, set
                # the model's noise and mean everywhere, and no candidate near the incumbent was safe any more.
                # Told at `cost_clip_log` above the median, it is still over any budget near what the others use.
                log_cores = np.minimum(log_cores, np.median(log_cores) + self.settings.cost_clip_log)
                gp = self.gps.setdefault(part, cost_model(self.dims, self.settings, self.seed))
                gp.fit(x[rows], log_cores, optimize)

    def within(self, inputs: np.ndarray, limits_cores: Mapping[str, float]) -> np.ndarray:
        """Which rows of `inputs` every modelled part is expected within its limit at, with confidence: the upper
        bound of its CPU (mean + `beta` std, log cores) at or under the limit. A part never measured is not held
        against anything."""
        ok = np.ones(len(inputs), dtype=bool)
        for part, limit in limits_cores.items():
            if part in self.gps and len(inputs):  # sklearn refuses to predict at no point
                mean, std = self.gps[part].predict(inputs)
                ok &= mean + self.settings.beta * std <= np.log(limit)
        return ok
