"""The strategies a user could pick instead of pipetune's learner, behind the same `Learner` interface.

Every one starts from the same running config and searches the same `Box` (the same parameters,
bounds and pins), so a benchmark compares them on identical terms.
"""

from __future__ import annotations

import math

import numpy as np

from models.learning import Box, Context
from models.observation import Observation
from models.policy import Policy
from models.space import Config


def _feasible(box: Box, observation: Observation) -> bool:
    ceiling = box.policy.p95_ceiling_s
    return (observation.throughput_ratio >= box.policy.min_throughput_ratio
            and (ceiling is None or observation.p95_s <= ceiling))


class StaticLearner:
    """Keep one config (the defaults, the paper's Hybrid, Elastic's latency preset...)."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def suggest(self, context: Context) -> Config:
        return self.config

    def tell(self, config: Config, context: Context, observation: Observation) -> None:
        """A static config learns nothing."""

    def update_policy(self, policy: Policy) -> None:
        self.config = policy.enforce(self.config)


class RandomSearch:
    """The running config first, then uniform draws in the (log-warped) box."""

    def __init__(self, box: Box, start: Config, seed: int = 0) -> None:
        self.box, self.start = box, box.policy.enforce(start)
        self.rng = np.random.default_rng(seed)
        self._asked = 0

    def suggest(self, context: Context) -> Config:
        self._asked += 1
        if self._asked == 1:
            return self.start
        return self.box.decode(self.rng.uniform(size=self.box.dims), base=self.start)

    def tell(self, config: Config, context: Context, observation: Observation) -> None:
        """Random search ignores what it observes."""

    def update_policy(self, policy: Policy) -> None:
        self.box, self.start = self.box.with_policy(policy), policy.enforce(self.start)


class OvatSweep:
    """The paper's method: one variable at a time over a grid, keeping each best value, then the next.

    From the start config, parameter k is tried at `levels` evenly spaced points of its (warped)
    range; the best feasible value is kept and the sweep moves to parameter k+1, cycling.
    """

    def __init__(self, box: Box, start: Config, levels: int = 4) -> None:
        self.box, self.best = box, box.policy.enforce(start)
        self.grid = np.linspace(0.0, 1.0, levels)
        self._best_p95 = math.inf
        self._dim, self._level = 0, -1  # level -1: measure the current best first

    def suggest(self, context: Context) -> Config:
        if self._level < 0 or self.box.dims == 0:
            return self.best
        u = self.box.encode(self.best)
        u[self._dim] = self.grid[self._level]
        return self.box.decode(u, base=self.best)

    def tell(self, config: Config, context: Context, observation: Observation) -> None:
        if _feasible(self.box, observation) and observation.p95_s < self._best_p95:
            self.best, self._best_p95 = config, observation.p95_s
        self._level += 1
        if self._level >= len(self.grid):
            self._dim, self._level = (self._dim + 1) % max(self.box.dims, 1), 0

    def update_policy(self, policy: Policy) -> None:
        self.box, self.best = self.box.with_policy(policy), policy.enforce(self.best)
        self._dim %= max(self.box.dims, 1)


class OptunaTpe:
    """Optuna's TPE sampler through its ask/tell interface, with its constraint support.

    TPE searches the same warped unit box as every other strategy (so it gets the log scales too). The
    daemon measures the running config first; that and any config TPE did not ask for (a rollback) are
    added as finished trials. The constraint is `min ratio − observed ratio`
    (feasible when ≤ 0). Needs the `bench` extra (optuna).
    """

    def __init__(self, box: Box, start: Config, seed: int = 0) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.box, self.start, self.seed = box, box.policy.enforce(start), seed
        self._told: list[tuple[Config, float, float]] = []
        self._new_study()

    def _new_study(self) -> None:
        import optuna

        sampler = optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=5)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self._trials: dict[Config, object] = {}
        for config, value, constraint in self._told:
            self._add_finished(config, value, constraint)

    def _add_finished(self, config: Config, value: float, constraint: float) -> None:
        import optuna

        params = dict(zip(self.box.names, self.box.encode(config).tolist()))
        distributions = {n: optuna.distributions.FloatDistribution(0.0, 1.0) for n in self.box.names}
        self.study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=value,
                                                       constraints={"throughput": constraint}))

    def update_policy(self, policy: Policy) -> None:
        """New bounds change TPE's space: start a study over the new box with every finished trial re-added."""
        self.box, self.start = self.box.with_policy(policy), policy.enforce(self.start)
        self._new_study()

    def suggest(self, context: Context) -> Config:
        trial = self.study.ask()
        u = np.array([trial.suggest_float(name, 0.0, 1.0) for name in self.box.names])
        config = self.box.decode(u, base=self.start)
        self._trials[config] = trial
        return config

    def tell(self, config: Config, context: Context, observation: Observation) -> None:
        constraint = self.box.policy.min_throughput_ratio - observation.throughput_ratio
        value = math.log(max(observation.p95_s, 1e-4))
        self._told.append((config, value, constraint))
        trial = self._trials.pop(config, None)
        if trial is None:  # a config TPE did not ask for (the start, a rollback): add it as a finished trial
            self._add_finished(config, value, constraint)
            return
        trial.set_constraint("throughput", constraint)
        self.study.tell(trial, value)
