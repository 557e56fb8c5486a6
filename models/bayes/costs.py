"""What a config costs (a part's CPU, the Produce requests), modelled cost by cost, so the learner proposes
only what the budgets allow.

Each budgeted part the budget limits (`models.budget`) gets a GP over the tuned parameters and the load of its
log share of its budget: log(CPU / the limit at the window's load). The budget follows the load as the starting
config's CPU does, so a config that costs as the start does has one share at every load, and what the model must
learn is how a config departs from that; modelled as log CPU, reverting to its mean away from the loads measured,
the model expected every config cheaper at a load above them and proposed configs over budget as the load rose.
As the margin model is one of the throughput margin: around the mean of what was measured, with a fixed prior
spread (`cost_prior_std`), so a config far from every measured one is not known to be within budget and the
budgeted set grows outward from configs measured within it (SafeOpt, with the cost as a second constraint).

The bound is mean + `cost_beta` × std, one std where the margin's is two: a config over budget costs a
window's CPU and a rollback, which the verdict sees and makes, where one that falls behind delays events. It is
calibrated by the model's own misses, as split conformal prediction calibrates an interval by held-out errors
(Vovk et al. 2005; adaptive, Gibbs & Candès 2021): before a window is fitted, the model's prediction of it is
scored, (measured − mean) / predictive std, and the std is widened by max(`cost_beta`, the worst score of the
last `cost_miss_windows` windows), up to `cost_beta` × `cost_prior_std`, the bound of a config the model knows
nothing of. A GP whose length scales were fitted on a few windows can be sure of a config it knows little of:
fb-kafka's CPU model expected a fast config at −0.23 ± 0.03 of its budget and it used +0.15, and two configs like
it were proposed after it. Widened past that cap, and at two stds, one miss of 3 held every config not yet
measured out of the budget for 20 windows: on the paper near capacity the search stopped at the defaults' 4.6 s,
where 2.6 s is within budget.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Mapping, Sequence

import numpy as np

from models.bayes.history import History
from models.bayes.settings import LearnerSettings
from models.bayes.surrogate import Surrogate, cost_model
from models.budget import BudgetLimits


def log_shares(costs: Mapping[str, float], limits: Mapping[str, float]) -> dict[str, float]:
    """Each limited cost's log share of its budget, log(cost / limit), where it was measured."""
    return {name: math.log(costs[name] / limit) for name, limit in limits.items() if costs.get(name, 0.0) > 0}


class CostModels:
    """One cost GP per part the budget limits and the windows measured."""

    def __init__(self, dims: int, settings: LearnerSettings, seed: int) -> None:
        self.dims = dims
        self.settings = settings
        self.seed = seed
        self.gps: dict[str, Surrogate] = {}
        self.misses: dict[str, deque[float]] = {}  # part -> its model's scores of the latest windows, before told

    def told(self, inputs: np.ndarray, costs: Mapping[str, float], limits: Mapping[str, float]) -> None:
        """Score each model's prediction of a window it has not been fitted on (model input `inputs`, one row):
        (the log share it used − the mean) / the predictive std, measurement noise included."""
        for part, share in log_shares(costs, limits).items():
            if part in self.gps:
                mean, std = self.gps[part].predict(inputs[None, :])
                score = (share - mean[0]) / math.sqrt(std[0]**2 + self.gps[part].noise_var)
                self.misses.setdefault(part, deque(maxlen=self.settings.cost_miss_windows)).append(score)

    def fit(self, history: History, x: np.ndarray, limits: BudgetLimits, optimize: bool) -> None:
        """Fit each limited part's model on the windows that measured its cost (model inputs `x`); a part the budget
        no longer limits is forgotten."""
        shares: dict[str, dict[int, float]] = {}
        for i, (costs, context) in enumerate(zip(history.costs, history.contexts)):
            for part, share in log_shares(costs, limits.at(context.offered_eps)).items():
                shares.setdefault(part, {})[i] = share
        self.gps = {part: self.gps.get(part) or cost_model(self.dims, self.settings, self.seed) for part in shares}
        for part, by_row in shares.items():
            rows, told = list(by_row), np.array(list(by_row.values()))
            # A config far over every budget (a 1 ms scan of 200 files: 20x the others' CPU), told as it is, set the
            # model's noise and mean everywhere, and no candidate near the incumbent was safe any more. Told at
            # `cost_clip_log` above the median, it is still over any budget near what the others use.
            told = np.minimum(told, np.median(told) + self.settings.cost_clip_log)
            self.gps[part].fit(x[rows], told, optimize)

    def within(self, inputs: np.ndarray) -> np.ndarray:
        """Which rows of `inputs` every modelled part is expected within its budget at, with confidence: the upper
        bound of its log share, mean + `bound_std` of what the model knows of the config, at or under 0. A part
        never measured is not held against anything. Not a window's noise on top: held that far from its budget,
        the paper's search went elsewhere and made 18 changes in a diurnal run instead of 7; a window a hair over
        is held instead (`over_by_noise`)."""
        return self.within_and_expected(inputs)[0]

    def within_and_expected(self, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which rows of `inputs` every modelled part is within its budget at with confidence (`within`), and which
        it is expected within at (its mean, no bound: GoOSE's goals), from one prediction per part."""
        within, expected = np.ones(len(inputs), dtype=bool), np.ones(len(inputs), dtype=bool)
        for part, gp in self.gps.items():
            if len(inputs):  # sklearn refuses to predict at no point
                mean, std = gp.predict(inputs)
                within &= mean + self.bound_std(part, std) <= 0.0
                expected &= mean <= 0.0
        return within, expected

    def no_riskier(self, inputs: np.ndarray, incumbent: np.ndarray) -> np.ndarray:
        """Which rows of `inputs` every modelled part is expected within its budget at with confidence, or bounded no
        higher than at `incumbent` (one row): at a load the incumbent was not measured at, the model may know too
        little of any config near it to vouch for one, the incumbent included, and a step that adds no risk there
        is no reason to stay."""
        ok = np.ones(len(inputs), dtype=bool)
        for part, gp in self.gps.items():
            if len(inputs):
                mean, std = gp.predict(np.vstack([incumbent[None, :], inputs]))
                bound = mean + self.bound_std(part, std)
                ok &= bound[1:] <= max(0.0, float(bound[0]))
        return ok

    def no_dearer(self, inputs: np.ndarray, incumbent: np.ndarray) -> np.ndarray:
        """Which rows of `inputs` every modelled part is expected (its mean, no bound) within its budget at, or no
        dearer than at `incumbent` (one row): what a step away from an incumbent that falls behind may cost."""
        ok = np.ones(len(inputs), dtype=bool)
        for gp in self.gps.values():
            if len(inputs):
                mean, _ = gp.predict(inputs)
                ok &= mean <= max(0.0, float(gp.predict(incumbent[None, :])[0][0]))
        return ok

    def over_by_noise(self, inputs: np.ndarray, costs: Mapping[str, float], limits: Mapping[str, float]) -> bool:
        """Whether a window (model input `inputs`, one row; what each part used and its limit) went over budget by
        no more than its noise: every modelled part within `beta` × its model's noise of its limit, and expected
        within it there (the model's mean, told that window)."""
        for part, share in log_shares(costs, limits).items():
            gp = self.gps.get(part)
            if gp is not None and (share > self._noise_allowance(part) or
                                   gp.predict(inputs[None, :])[0][0] > 0):
                return False
        return True

    def within_noise(self, windows: Sequence[Mapping[str, float]]) -> bool:
        """Whether a config's windows (each a `log_shares` of its costs) went over each modelled part's limit by no
        more, on average, than `beta` × the part's model's noise: the allowance `over_by_noise` holds an incumbent
        by. False where no modelled part was measured."""
        told = {part: [w[part] for w in windows if part in w] for part in self.gps}
        measured = {part: shares for part, shares in told.items() if shares}
        return bool(measured) and all(float(np.mean(shares)) <= self._noise_allowance(part)
                                      for part, shares in measured.items())

    def _noise_allowance(self, part: str) -> float:
        """How far over its limit (log share) a part's reading may go and count as noise: `beta` × its model's
        noise."""
        return self.settings.beta * math.sqrt(self.gps[part].noise_var)

    def bound_std(self, part: str, std: np.ndarray) -> np.ndarray:
        """How far above its mean a part's share is bounded, for the std `std` of what the model knows: `cost_beta`
        × std, widened by the worst score of its recent misses (conformal), but never beyond `cost_beta` × the prior
        spread, what it would be knowing nothing of the config (the module's docstring says why)."""
        s = self.settings
        beta = max([s.cost_beta, *self.misses.get(part, ())])
        return np.minimum(beta * std, s.cost_beta * s.cost_prior_std)
