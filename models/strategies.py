"""Every tuning strategy by name, built on the same cube and start config."""

from __future__ import annotations

from models.baselines import OptunaStudy, OvatSweep, RandomSearch, StaticLearner
from models.bayes import MapFn, SafeBayesLearner
from models.learning import STAGE_PARAMS, Learner, TunedCube
from models.presets import preset
from models.screen import TwinScreen
from models.space import Config

STRATEGIES = ("pipetune", "defaults", "hybrid", "latency", "random", "ovat", "optuna-tpe", "optuna-gp")


def build_learner(name: str, cube: TunedCube, start: Config, *, topology: str = "paper", seed: int = 0,
                  screen: TwinScreen | None = None, parallel_map: MapFn = map) -> Learner:
    """The strategy called `name` (one of `STRATEGIES`) for a pipeline of `topology`; static ones ignore the cube.

    `screen` (pipetune only): a twin on which candidates are pre-screened before they are proposed.
    """
    if name == "pipetune":
        return SafeBayesLearner(cube, start, stage_params=STAGE_PARAMS.get(topology), seed=seed, screen=screen,
                                parallel_map=parallel_map)
    if name in ("defaults", "hybrid", "latency"):
        return StaticLearner(cube.policy.enforce(preset(name)))
    if name == "random":
        return RandomSearch(cube, start, seed=seed)
    if name == "ovat":
        return OvatSweep(cube, start)
    if name in ("optuna-tpe", "optuna-gp"):
        return OptunaStudy(cube, start, sampler=name.removeprefix("optuna-"), seed=seed)
    raise ValueError(f"unknown strategy {name!r}; known: {', '.join(STRATEGIES)}")
