"""The strategies a user could pick instead of pipetune's learner, behind the same `Learner` interface.

Every one starts from the same running config, searches the same `TunedCube` (the same parameters,
bounds and pins) and judges a window by the same `Verdict` the daemon tells it, so a benchmark compares
them on identical terms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from models.learning import HISTORY_BEST, HISTORY_RECENT, Context, Suggestion, TunedCube, kept_history
from models.observation import Observation
from models.policy import Policy
from models.space import Config
from models.verdict import Verdict


class StaticLearner:
    """Keep one config (the defaults, the paper's Hybrid, Elastic's latency preset...)."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def suggest(self, context: Context) -> Suggestion:
        return Suggestion(self.config, "static config")

    def tell(self, config: Config, context: Context, observation: Observation, verdict: Verdict) -> None:
        """A static config learns nothing."""

    def update_policy(self, policy: Policy) -> None:
        self.config = policy.enforce(self.config)


class RandomSearch:
    """The running config first, then uniform draws in the (log-warped) cube."""

    def __init__(self, cube: TunedCube, start: Config, seed: int = 0) -> None:
        self.cube, self.start = cube, cube.policy.enforce(start)
        self.rng = np.random.default_rng(seed)
        self._asked = 0

    def suggest(self, context: Context) -> Suggestion:
        self._asked += 1
        if self._asked == 1:
            return Suggestion(self.start, "measure the running config first")
        return Suggestion(self.cube.decode(self.rng.uniform(size=self.cube.dims), base=self.start), "random draw")

    def tell(self, config: Config, context: Context, observation: Observation, verdict: Verdict) -> None:
        """Random search ignores what it observes."""

    def update_policy(self, policy: Policy) -> None:
        self.cube, self.start = self.cube.with_policy(policy), policy.enforce(self.start)


class OvatSweep:
    """The paper's method: one variable at a time over a grid, keeping each best value, then the next.

    From the start config, parameter k is tried at `levels` evenly spaced points of its (warped)
    range; the best feasible value is kept and the sweep moves to parameter k+1, cycling.
    """

    def __init__(self, cube: TunedCube, start: Config, levels: int = 4) -> None:
        self.cube, self.best = cube, cube.policy.enforce(start)
        self.grid = np.linspace(0.0, 1.0, levels)
        self._best_p95 = math.inf
        self._dim, self._level = 0, -1  # level -1: measure the current best first

    def suggest(self, context: Context) -> Suggestion:
        if self._level < 0 or self.cube.dims == 0:
            return Suggestion(self.best, "measure the best config so far")
        u = self.cube.encode(self.best)
        u[self._dim] = self.grid[self._level]
        return Suggestion(self.cube.decode(u, base=self.best),
                          f"sweep {self.cube.names[self._dim]}: level {self._level + 1} of {len(self.grid)}")

    def tell(self, config: Config, context: Context, observation: Observation, verdict: Verdict) -> None:
        if verdict.ok and observation.p95_s < self._best_p95:
            self.best, self._best_p95 = config, observation.p95_s
        self._level += 1
        if self._level >= len(self.grid):
            self._dim, self._level = (self._dim + 1) % max(self.cube.dims, 1), 0

    def update_policy(self, policy: Policy) -> None:
        self.cube, self.best = self.cube.with_policy(policy), policy.enforce(self.best)
        self._dim %= max(self.cube.dims, 1)


OPTUNA_SAMPLERS = ("tpe", "gp")


@dataclass(frozen=True)
class _Told:
    """A window told to an Optuna sampler: its config, its objective (log P95) and its constraint (the verdict's
    excess)."""

    config: Config
    value: float
    constraint: float


class OptunaStudy:
    """Optuna's TPE or GP sampler (`sampler`: "tpe" or "gp") through its ask/tell interface, with its constraint
    support.

    Both search the same warped unit cube as every other strategy (so they get the log scales too). The
    daemon measures the running config first; that and any config the sampler did not ask for (a rollback) are
    added as finished trials. The constraint is the verdict's total excess over its limits (`Verdict.excess`:
    0, feasible, when the window broke no rule, a budget included), which TPE and the GP sampler both model
    (`Trial.set_constraint`). A daemon runs for months: once the study holds twice what `kept_history` keeps
    (the recent windows and the best feasible older ones), it is rebuilt from those alone.
    Needs the `bench` extra (optuna; the GP sampler also needs torch).
    """

    def __init__(self, cube: TunedCube, start: Config, sampler: str = "tpe", seed: int = 0,
                 history_recent: int = HISTORY_RECENT, history_best: int = HISTORY_BEST) -> None:
        import optuna

        if sampler not in OPTUNA_SAMPLERS:
            raise ValueError(f"sampler {sampler!r}: one of {', '.join(OPTUNA_SAMPLERS)}")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.cube, self.start, self.sampler, self.seed = cube, cube.policy.enforce(start), sampler, seed
        self.history_recent, self.history_best = history_recent, history_best
        self._told: list[_Told] = []
        self._new_study()

    def _new_study(self) -> None:
        import optuna

        # 5 random trials before the model, as a daemon cannot afford Optuna's default 10 windows of them
        sampler = (optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=5) if self.sampler == "tpe" else
                   optuna.samplers.GPSampler(seed=self.seed, n_startup_trials=5, warn_independent_sampling=False))
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self._trials: dict[Config, object] = {}
        for told in self._told:
            self._add_finished(told.config, told.value, told.constraint)

    def _add_finished(self, config: Config, value: float, constraint: float) -> None:
        import optuna

        params = dict(zip(self.cube.names, self.cube.encode(config).tolist()))
        distributions = {n: optuna.distributions.FloatDistribution(0.0, 1.0) for n in self.cube.names}
        self.study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=value,
                                                       constraints={"throughput": constraint}))

    def update_policy(self, policy: Policy) -> None:
        """New bounds change the sampler's space: start a study over the new cube with every finished trial re-added."""
        self.cube, self.start = self.cube.with_policy(policy), policy.enforce(self.start)
        self._new_study()

    def suggest(self, context: Context) -> Suggestion:
        trial = self.study.ask()
        u = np.array([trial.suggest_float(name, 0.0, 1.0) for name in self.cube.names])
        config = self.cube.decode(u, base=self.start)
        self._trials[config] = trial
        return Suggestion(config, f"{self.sampler.upper()} trial {trial.number}")

    def tell(self, config: Config, context: Context, observation: Observation, verdict: Verdict) -> None:
        constraint = verdict.excess
        value = math.log(max(observation.p95_s, 1e-4))
        self._told.append(_Told(config, value, constraint))
        trial = self._trials.pop(config, None)
        if trial is None:  # a config the sampler did not ask for (the start, a rollback): add it as a finished trial
            self._add_finished(config, value, constraint)
        else:
            trial.set_constraint("throughput", constraint)
            self.study.tell(trial, value)
        if len(self._told) > 2 * (self.history_recent + self.history_best):
            # log P95s rank as the P95s do
            kept = kept_history([t.value for t in self._told], [t.constraint == 0 for t in self._told],
                                self.history_recent, self.history_best)
            self._told = [self._told[i] for i in kept]
            self._new_study()
