"""The pipeline seam: what the daemon measures, and the twin or a live pipeline alike taking a config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from models.observation import Observation
from models.space import Config
from models.twin import Calibration, Twin


@dataclass(frozen=True)
class ApplyReport:
    """What applying a config did: whether it took, and how long the pipeline paused for it."""

    ok: bool
    config: Config
    pause_s: float = 0.0
    message: str = ""


class PipelineUnavailable(RuntimeError):
    """The pipeline cannot be observed or reached right now; the message says which part."""


class Measured(Protocol):
    """What the daemon reads of a pipeline every window (a single pipeline, or a pool of nodes).

    Each method raises `PipelineUnavailable` when a part it needs (a node's agent, the telemetry) does not
    answer; the daemon then holds until it does.
    """

    def observe(self, seconds: float) -> Observation:
        """Measure the next `seconds`; `PipelineUnavailable` when that window cannot be read."""
        ...

    def current(self) -> Config:
        """The config in force; `PipelineUnavailable` when it cannot be asked."""
        ...


class Pipeline(Measured, Protocol):
    """A pipeline that takes a whole config at once: the twin, or a live one through its agents (its
    realizer, `controller.realizer.Direct`, applies the daemon's configs to it)."""

    def apply(self, config: Config) -> ApplyReport:
        """Put `config` in force; a change the pipeline refuses is `ok=False`, not `PipelineUnavailable`."""
        ...


class TwinPipeline:
    """The simulated pipeline, fed a fixed arrival schedule, advanced window by window."""

    def __init__(self, config: Config, arrivals_s: np.ndarray, calibration: Calibration, *, seed: int = 0,
                 multiline: bool = False) -> None:
        self.twin = Twin(config, arrivals_s, calibration, seed=seed, multiline=multiline)
        self.now_s = 0.0

    def apply(self, config: Config) -> ApplyReport:
        pause_s = self.twin.apply(config)
        what = "restart" if pause_s > 0 else "live change"
        return ApplyReport(True, config, pause_s, f"{what}, paused {pause_s:g}s" if pause_s else what)

    def observe(self, seconds: float) -> Observation:
        start = self.now_s
        self.now_s += seconds
        self.twin.run_until(self.now_s)
        return self.twin.observe(start, self.now_s)

    def current(self) -> Config:
        return self.twin.config
