"""Assembling a tuning run: the learner (with its twin screen) and the twin pipeline fed a workload, which
the daemon then drives. `pipetune autotune` and `bench.tuners` both build their runs here, so the benchmark
measures the daemon users run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from controller.pipelines import TwinPipeline
from controller.state import DEFAULT_POOL
from controller.tuned_space import Managers, TunedSpace, tuned_space
from models.latency_bounds import lull_ceilings
from models.learning import Learner, TunedCube, tuned_names
from models.policy import Policy
from models.screen import TwinScreen
from models.space import Config
from models.strategies import build_learner
from models.twin import Calibration
from replay.profiles import WorkloadSpec, build_schedule

# The twin's schedule must outlast settling after restarts and rollbacks: each change can add up to a window
# of settling to the windows asked for (2×), with 10 % and two minutes spare so the last window never sees
# the load run out.
SETTLING_ALLOWANCE = 2.2
SPARE_LOAD_S = 120.0


def twin_load_s(windows: int, window_s: float) -> float:
    """Seconds of workload a twin needs for `windows` windows of `window_s`, settling included."""
    return windows * window_s * SETTLING_ALLOWANCE + SPARE_LOAD_S


@dataclass(frozen=True)
class LearnerSetup:
    """Which strategy learns what, from where, and on which twin it pre-screens candidates (None: none); what the
    pool's agents apply (None: the twin, which takes every parameter); how high it may take each wait a lull sits
    out (None: where `start` has it; a resumed run passes the ones its first start set, from its state)."""

    strategy: str
    policy: Policy
    start: Config
    topology: str
    seed: int = 0
    screen: Calibration | None = None
    managers: Managers | None = None
    pool: str = DEFAULT_POOL
    ceilings: Mapping[str, float] | None = None

    def space(self) -> TunedSpace:
        """What the learner searches: the policy's (else the topology's) parameters that some agent of the pool
        applies, under their ceilings; `NothingToTune` when there is none."""
        ceilings = lull_ceilings(self.start) if self.ceilings is None else self.ceilings
        return tuned_space(tuned_names(self.policy, self.topology), self.managers, self.pool, ceilings)


def tuning_learner(setup: LearnerSetup, *, remote: bool, node_id: str | None = None) -> Learner:
    """The learner of `setup`: a Ray actor (`remote`, the daemon's; on Ray node `node_id` when given) or in this
    process (inside a Ray task)."""
    space = setup.space()
    cube = TunedCube(space.tuned, setup.policy, ceilings=space.ceilings)
    screen = TwinScreen(setup.screen) if setup.screen is not None else None
    if remote:
        # Ray is imported only here: it takes seconds, and commands that never tune should start at once.
        from controller.ray_learner import RemoteLearner

        return RemoteLearner(setup.strategy, cube, setup.start, setup.topology, setup.seed, screen=screen,
                             node_id=node_id)
    return build_learner(setup.strategy, cube, setup.start, topology=setup.topology, seed=setup.seed, screen=screen)


def twin_pipeline(start: Config, calibration: Calibration, workload: WorkloadSpec, windows: int,
                  window_s: float) -> TwinPipeline:
    """The twin under `calibration`, starting on `start`, fed `workload` for as long as `windows` need."""
    spec = replace(workload, duration_s=twin_load_s(windows, window_s))
    return TwinPipeline(start, build_schedule(spec).schedule.times_s, calibration, seed=workload.seed)

