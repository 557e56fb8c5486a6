"""Pre-screening candidates on a twin: does a config keep up with the load, with headroom to spare?

A guardrail can only roll back a config after a window has shown it falling behind; the twin can
say so before the config touches the pipeline. The learner asks the screen about its best few
candidates and proposes only one the twin expects to keep up with `headroom` × the offered load.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.space import Config
from models.twin import Calibration, Twin, steady_arrivals


@dataclass(frozen=True)
class TwinScreen:
    """Simulate a candidate for a warm-up and a measured window at the offered load × `headroom`."""

    calibration: Calibration
    headroom: float = 1.2
    window_s: float = 20.0

    def keeps_up(self, config: Config, offered_eps: float, min_throughput_ratio: float) -> bool:
        arrivals = steady_arrivals(max(offered_eps, 1.0) * self.headroom, 2 * self.window_s)
        twin = Twin(config, arrivals, self.calibration, seed=0)
        twin.run_until(2 * self.window_s)
        return twin.observe(self.window_s, 2 * self.window_s).throughput_ratio >= min_throughput_ratio
