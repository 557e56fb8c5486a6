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

Each model learns its log share over a prior: the work a config makes its part do each second (`models.work`:
events, timer wake-ups, scans), priced by a non-negative ridge fit on the windows measured, on top of a share of
the budget that follows the load as the budget does. A GP alone, told a config at 56 ms of flush timeout within
budget and one at 0.1 ms 23 % over it, drew a line between them in the cube and bounded everything between over
budget: a 5 ms flush (200 flushes a second where 0.1 ms makes 6,600) costs 2 % more than 56 ms, and the search
stopped at 91 ms where 7.5-13 ms was within budget (zoo 4034208113). A price is believed as far as the windows
bear it out beyond `cost_price_prior_windows` windows' worth of doubt; with no config telling work apart, every
price stays 0 and the prior is the measured share, as without it.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from functools import partial
from typing import Mapping, Sequence

import numpy as np
from scipy.optimize import nnls

from models.bayes.history import History
from models.bayes.inputs import offered_eps_of
from models.bayes.settings import LearnerSettings
from models.bayes.surrogate import Surrogate, cost_model
from models.budget import BudgetLimits
from models.components import COMPONENTS, Component
from models.learning import TunedCube
from models.space import Config
from models.work import work_rates

SHARE_FLOOR = 1e-3  # the least share of its budget a prior says a part uses: its log stays finite
PRICED = {component.name: component for component in COMPONENTS}  # the budgeted parts whose work is known


def log_shares(costs: Mapping[str, float], limits: Mapping[str, float]) -> dict[str, float]:
    """Each limited cost's log share of its budget, log(cost / limit), where it was measured."""
    return {name: math.log(costs[name] / limit) for name, limit in limits.items() if costs.get(name, 0.0) > 0}


@dataclass(frozen=True)
class WorkPrior:
    """A part's share of its budget as its work prices it: `base` of the limit (the share that follows the load as the
    budget does) plus each kind of work's rate (`models.work`, after the events) × its price, over the limit."""

    component: Component
    base: float
    prices: np.ndarray  # cores per (work a second), one per kind of work after the events

    def log_share(self, work: np.ndarray, limits: np.ndarray) -> np.ndarray:
        """The prior log share at each row of `work` (`work_rates`' columns) under `limits`."""
        shares = self.base + work[:, 1:] @ self.prices / limits
        return np.log(np.maximum(shares, SHARE_FLOOR))


def fit_prior(component: Component, work: np.ndarray, limits: np.ndarray, shares: np.ndarray,
              doubt_windows: float) -> WorkPrior:
    """The prices that explain the measured `shares` (cost / limit, one per row of `work` and `limits`) best, none
    below 0, each held toward 0 by a ridge worth `doubt_windows` windows of the largest share it could explain here:
    a price no config measured tells apart from the others stays near 0."""
    per_limit = work[:, 1:] / limits[:, None]
    scale = np.max(per_limit, axis=0, initial=0.0)
    scale = np.where(scale > 0, scale, 1.0)
    design = np.column_stack([np.ones(len(shares)), per_limit / scale])
    ridge = np.sqrt(doubt_windows) * np.eye(design.shape[1])[1:]
    solution, _ = nnls(np.vstack([design, ridge]), np.concatenate([shares, np.zeros(len(ridge))]))
    return WorkPrior(component, float(solution[0]), solution[1:] / scale)


class CostModels:
    """One cost GP per part the budget limits and the windows measured, over its work prior where its work is
    known."""

    def __init__(self, cube: TunedCube, settings: LearnerSettings, seed: int) -> None:
        self.cube = cube
        self.dims = cube.dims + 1
        self.settings = settings
        self.seed = seed
        self.gps: dict[str, Surrogate] = {}
        self.priors: dict[str, WorkPrior] = {}
        self.misses: dict[str, deque[float]] = {}  # part -> its model's scores of the latest windows, before told
        self._limits = BudgetLimits()
        self._start: Config | None = None  # the values the cube does not tune

    def told(self, inputs: np.ndarray, costs: Mapping[str, float], limits: Mapping[str, float]) -> None:
        """Score each model's prediction of a window it has not been fitted on (model input `inputs`, one row):
        (the log share it used − the mean) / the predictive std, measurement noise included."""
        for part, share in log_shares(costs, limits).items():
            if part in self.gps:
                mean, std = self.predict(part, inputs[None, :])
                score = (share - mean[0]) / math.sqrt(std[0]**2 + self.gps[part].noise_var)
                self.misses.setdefault(part, deque(maxlen=self.settings.cost_miss_windows)).append(score)

    def fit(self, history: History, x: np.ndarray, limits: BudgetLimits, start: Config, optimize: bool) -> None:
        """Fit each limited part's model on the windows that measured its cost (model inputs `x`), over its work
        prior (values the cube does not tune from `start`); a part the budget no longer limits is forgotten."""
        self._limits, self._start = limits, start
        shares: dict[str, dict[int, float]] = {}
        for i, (costs, context) in enumerate(zip(history.costs, history.contexts)):
            for part, share in log_shares(costs, limits.at(context.offered_eps)).items():
                shares.setdefault(part, {})[i] = share
        self.gps = {part: self.gps.get(part) or cost_model(self.dims, self.settings, self.seed) for part in shares}
        self.priors = {}
        for part, by_row in shares.items():
            rows, told = list(by_row), np.array(list(by_row.values()))
            if part in PRICED:
                loads = np.array([history.contexts[i].offered_eps for i in rows])
                work = work_rates(PRICED[part], partial(_measured, [history.configs[i] for i in rows]), loads)
                part_limits = self._part_limits(part, loads)
                self.priors[part] = fit_prior(PRICED[part], work, part_limits, np.exp(told),
                                              self.settings.cost_price_prior_windows)
                told = told - self.priors[part].log_share(work, part_limits)
            # A config far over every budget (a 1 ms scan of 200 files: 20x the others' CPU), told as it is, set the
            # model's noise and mean everywhere, and no candidate near the incumbent was safe any more. Told at
            # `cost_clip_log` above the median (over its prior, which may explain it), it is still over any budget
            # near what the others use.
            told = np.minimum(told, np.median(told) + self.settings.cost_clip_log)
            self.gps[part].fit(x[rows], told, optimize)

    def predict(self, part: str, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`part`'s log share of its budget at each row of `inputs`, mean and std: its GP over its work prior."""
        mean, std = self.gps[part].predict(inputs)
        prior = self.priors.get(part)
        if prior is None:
            return mean, std
        loads = offered_eps_of(inputs[:, -1], self.settings)
        value_of = partial(self.cube.values, inputs[:, :-1], base=self._start)
        return mean + prior.log_share(work_rates(prior.component, value_of, loads), self._part_limits(part, loads)), std

    def _part_limits(self, part: str, loads: np.ndarray) -> np.ndarray:
        """`part`'s limit at each load of `loads`."""
        at = {eps: self._limits.at(eps)[part] for eps in np.unique(loads)}
        return np.array([at[eps] for eps in loads])

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
        for part in self.gps:
            if len(inputs):  # sklearn refuses to predict at no point
                mean, std = self.predict(part, inputs)
                within &= mean + self.bound_std(part, std) <= 0.0
                expected &= mean <= 0.0
        return within, expected

    def no_riskier(self, inputs: np.ndarray, incumbent: np.ndarray) -> np.ndarray:
        """Which rows of `inputs` every modelled part is expected within its budget at with confidence, or bounded no
        higher than at `incumbent` (one row): at a load the incumbent was not measured at, the model may know too
        little of any config near it to vouch for one, the incumbent included, and a step that adds no risk there
        is no reason to stay."""
        ok = np.ones(len(inputs), dtype=bool)
        for part in self.gps:
            if len(inputs):
                mean, std = self.predict(part, np.vstack([incumbent[None, :], inputs]))
                bound = mean + self.bound_std(part, std)
                ok &= bound[1:] <= max(0.0, float(bound[0]))
        return ok

    def no_dearer(self, inputs: np.ndarray, incumbent: np.ndarray) -> np.ndarray:
        """Which rows of `inputs` every modelled part is expected (its mean, no bound) within its budget at, or no
        dearer than at `incumbent` (one row): what a step away from an incumbent that falls behind may cost."""
        ok = np.ones(len(inputs), dtype=bool)
        for part in self.gps:
            if len(inputs):
                mean, _ = self.predict(part, np.vstack([incumbent[None, :], inputs]))
                ok &= mean[1:] <= max(0.0, float(mean[0]))
        return ok

    def over_by_noise(self, inputs: np.ndarray, costs: Mapping[str, float], limits: Mapping[str, float]) -> bool:
        """Whether a window (model input `inputs`, one row; what each part used and its limit) went over budget by
        no more than its noise: every modelled part within `beta` × its model's noise of its limit, and expected
        within it there (the model's mean, told that window)."""
        for part, share in log_shares(costs, limits).items():
            if part in self.gps and (share > self._noise_allowance(part) or
                                     self.predict(part, inputs[None, :])[0][0] > 0):
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


def _measured(configs: Sequence[Config], name: str) -> np.ndarray:
    """`name`'s value in each of `configs`."""
    return np.array([float(config[name]) for config in configs])
