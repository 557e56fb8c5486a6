"""The latency models: one GP per pipeline stage for its log P95, their sum the end-to-end P95.

The paper decomposes the end-to-end latency into stages (T_E2E ≈ Σ stages), and the learner models it
that way: an additive model, as in Add-GP-UCB, whose parts each see only the parameters that move that
stage (`STAGE_PARAMS`) plus the offered load. Each is a function of two to four inputs, which a few windows
pin down. Without stage figures the whole pipeline is one stage.

Each stage's model learns its log P95 over a prior: log(what the stage takes besides its waits + the waits
its config's timers make an event sit out, `latency_bounds.stage_wait_s`), so that away from what was
measured a shorter wait is still expected to be faster. A prediction stays within what the config's own
waits allow (`latency_bounds`: no less than half its interval, no more than its longest wait), each bound
scaled until no measured window contradicts it, and never below the latency resolution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Mapping, Sequence

import numpy as np

from models.bayes.history import History
from models.bayes.inputs import offered_eps_of
from models.bayes.settings import LearnerSettings
from models.bayes.surrogate import Surrogate, latency_model
from models.latency_bounds import stage_ceiling_s, stage_floor_s, stage_wait_s
from models.learning import WHOLE_PIPELINE, TunedCube
from models.observation import Observation
from models.space import Config


@dataclass(frozen=True)
class BoundScales:
    """How far a stage's latency bounds hold on the measured windows: the floor scaled down and the ceiling up
    until no window contradicts them (a pipeline unlike the components they assume, a window slowed by a
    restart), so neither ever overrules a measurement."""

    floor: float = 1.0
    ceiling: float = 1.0


class StageModels:
    """Per stage, a GP of log P95 over the stage's own parameters and the load, around its wait prior."""

    def __init__(self, cube: TunedCube, stage_params: Mapping[str, Sequence[str]] | None, settings: LearnerSettings,
                 seed: int) -> None:
        self.cube = cube
        self.dims = cube.stage_dims(stage_params)  # stage -> the tuned dimensions that move it
        self.settings = settings
        self.seed = seed
        self.gps: dict[str, Surrogate] = {}  # the stages measured so far, in `dims` order
        self._base_s: dict[str, float] = {}  # what each stage takes besides its waits
        self._bound_scales: dict[str, BoundScales] = {}

    def told(self, observation: Observation, resolution_s: float) -> dict[str, float]:
        """The log P95 of each modelled stage a window reports, none below the resolution; a stage no event passed
        in the window (P95 NaN: a micro-batch sink between two batches) says nothing of its config."""
        if set(self.dims) == {WHOLE_PIPELINE}:
            return {WHOLE_PIPELINE: math.log(max(observation.p95_s, resolution_s))}
        return {stage: math.log(max(observation.stage_p95_s[stage], resolution_s))
                for stage in self.dims if math.isfinite(observation.stage_p95_s.get(stage, math.nan))}

    def fit(self, history: History, x: np.ndarray, start: Config, resolution_s: float, optimize: bool) -> None:
        """Fit each stage that has figures on `history` (model inputs `x`), over its wait prior at `start`."""
        context_col = x.shape[1] - 1
        for stage, dims in self.dims.items():
            rows = [i for i, values in enumerate(history.stage_log_p95) if stage in values]
            if not rows:
                continue
            columns = np.append(dims, context_col)
            log_p95 = np.array([history.stage_log_p95[i][stage] for i in rows])
            waits_s = self.wait_s(stage, x[rows], start)
            self._base_s[stage] = max(float(np.median(np.exp(log_p95) - waits_s)), resolution_s)
            gp = self.gps.setdefault(stage, latency_model(len(columns), self.settings, self.seed))
            gp.fit(x[np.ix_(rows, columns)], log_p95 - np.log(self._base_s[stage] + waits_s), optimize,
                   np.array([history.p95_log_var[i] for i in rows]))
        self._bound_scales = {stage: self._measured_bound_scales(stage, history, resolution_s) for stage in self.gps}

    def _measured_bound_scales(self, stage: str, history: History, resolution_s: float) -> BoundScales:
        """How far `stage`'s bounds (`latency_bounds`) hold on its measured windows."""
        rows = [i for i, values in enumerate(history.stage_log_p95) if stage in values]
        measured_s = np.exp([history.stage_log_p95[i][stage] for i in rows])

        def value_of(name: str) -> np.ndarray:
            return np.array([float(history.configs[i][name]) for i in rows])

        floors_s = np.broadcast_to(stage_floor_s(stage, value_of), measured_s.shape)
        ceilings_s = np.maximum(np.broadcast_to(stage_ceiling_s(stage, value_of), measured_s.shape), resolution_s)
        waits = floors_s > 0
        floor = float(min(1.0, np.min(measured_s[waits] / floors_s[waits]))) if np.any(waits) else 1.0
        return BoundScales(floor=floor, ceiling=float(max(1.0, np.max(measured_s / ceilings_s))))

    def wait_s(self, stage: str, features: np.ndarray, base: Config) -> np.ndarray:
        """What `stage`'s own timers make an event sit out at each row of `features` (`latency_bounds.stage_wait_s`);
        none for the whole pipeline, whose P95 no one wait of its config moves one for one."""
        if stage == WHOLE_PIPELINE:
            return np.zeros(len(features))
        names = [self.cube.names[i] for i in self.dims[stage]]
        value_of = partial(self.cube.values, features[:, :-1], base=base)
        offered_eps = offered_eps_of(features[:, -1], self.settings)
        return np.broadcast_to(stage_wait_s(names, value_of, offered_eps), len(features))

    def log_p95(self, stage: str, features: np.ndarray, base: Config) -> tuple[np.ndarray, np.ndarray]:
        """`stage`'s log P95 at each row of `features`, mean and std: the model's residual over the stage's prior,
        log(what it takes besides its waits + its config's waits)."""
        columns = np.append(self.dims[stage], features.shape[1] - 1)
        mean, std = self.gps[stage].predict(features[:, columns])
        return mean + np.log(self._base_s[stage] + self.wait_s(stage, features, base)), std

    def p95(self, stage: str, features: np.ndarray, kappas: Sequence[float], base: Config,
            resolution_s: float) -> list[np.ndarray]:
        """`stage`'s predicted P95 (κ = 0) or its optimistic bound (κ > 0) at each row of `features` (values the
        cube does not tune from `base`), one array per κ from one prediction of the stage's model, within what the
        config's own waits allow, as far as the measured windows bear that out, and never below the resolution:
        a gain no window could show."""
        mean, std = self.log_p95(stage, features, base)
        value_of = partial(self.cube.values, features[:, :-1], base=base)
        scales = self._bound_scales.get(stage, BoundScales())
        floor_s = np.maximum(np.multiply(stage_floor_s(stage, value_of), scales.floor), resolution_s)
        ceiling_s = np.maximum(np.multiply(stage_ceiling_s(stage, value_of), scales.ceiling), floor_s)
        return [np.clip(np.exp(mean - kappa * std), floor_s, ceiling_s) for kappa in kappas]

    def predict_p95(self, features: np.ndarray, kappas: Sequence[float], base: Config,
                    resolution_s: float) -> list[np.ndarray]:
        """Σ over stages of `p95`: the predicted end-to-end P95 (κ = 0) or its optimistic bound (κ > 0), per κ."""
        totals = [np.zeros(len(features)) for _ in kappas]
        for stage in self.gps:
            for total, stage_p95 in zip(totals, self.p95(stage, features, kappas, base, resolution_s)):
                total += stage_p95
        return totals

    def noise_s(self, features: np.ndarray, base: Config) -> float:
        """A window's P95 noise at the first row of `features` as the models see it: each stage's P95 × its
        log-noise deviation, in quadrature. It takes in what the models do not fit yet, so it overstates."""
        variance = 0.0
        for stage, gp in self.gps.items():
            mean, _ = self.log_p95(stage, features, base)
            variance += float(np.exp(mean[0])) ** 2 * gp.noise_var
        return math.sqrt(variance)

    def best_moves(self, center: np.ndarray, feature: float, length: float, base: Config, rng: np.random.Generator,
                   resolution_s: float) -> np.ndarray:
        """Candidates built stage by stage, as an additive model allows (Add-GP-UCB): for each stage, the move of
        only its own parameters, within the box of side `length` around `center`, that its model finds most
        promising (optimistic bound) among `settings.stage_moves` random ones; then each such move alone, and all
        of them together."""
        per_stage = self.settings.stage_moves
        lo = np.clip(center - length / 2, 0.0, 1.0)
        hi = np.clip(center + length / 2, 0.0, 1.0)
        moves = []
        for stage in self.gps:
            dims = self.dims[stage]
            if dims.size == 0:
                continue
            trial = np.tile(center, (per_stage, 1))
            trial[:, dims] = rng.uniform(lo[dims], hi[dims], size=(per_stage, dims.size))
            features = np.column_stack([trial, np.full(per_stage, feature)])
            best = trial[int(np.argmin(self.p95(stage, features, [self.settings.kappa], base, resolution_s)[0]))]
            moves.append((dims, best[dims]))
        together = center.copy()
        singles = []
        for dims, values in moves:
            single = center.copy()
            single[dims] = values
            singles.append(single)
            together[dims] = values
        return np.array(singles + [together]) if moves else np.empty((0, center.size))
