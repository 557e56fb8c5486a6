"""Small builders shared by the twin tests."""

from __future__ import annotations

import numpy as np

from models.presets import preset
from models.space import PIPELINE_SPACE, Config
from models.twin import Calibration, Twin, load

CAL = load("paper-2vcpu")
QUIET = CAL.scaled(jitter_cv=0.0)  # exact service times, for checks to the millisecond


def config(name: str = "baseline", **changes: object) -> Config:
    """A preset with `changes` (keys use '__' for '.', e.g. filebeat__backoff=0.01)."""
    return PIPELINE_SPACE.config({k.replace("__", "."): v for k, v in changes.items()}, base=preset(name))


def run(cfg: Config, arrivals: list[float] | np.ndarray, until_s: float, *, cal: Calibration = QUIET,
        seed: int = 0, multiline: bool = False, rotations_s: list[float] | None = None) -> Twin:
    twin = Twin(cfg, np.asarray(arrivals, dtype=float), cal, seed=seed, multiline=multiline,
                rotations_s=None if rotations_s is None else np.asarray(rotations_s))
    twin.run_until(until_s)
    return twin


def poisson(rate_eps: float, duration_s: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.sort(rng.uniform(0.0, duration_s, rng.poisson(rate_eps * duration_s)))
