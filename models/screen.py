"""Pre-screening candidates on a twin: does a config keep up with the load, with headroom to spare?

A guardrail can only roll back a config after a window has shown it falling behind; the twin can
say so before the config touches the pipeline. The learner asks the screen about its best few
candidates and proposes only one the twin expects to keep up with `headroom` × the offered load.
The twin is a calibration fitted to imperfect measurements: near capacity it may expect even the
incumbent, which the pipeline has shown to keep up, to fall behind. Then its absolute verdict says
nothing, and a candidate passes when the twin expects it to keep up at least as well as the incumbent.
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

    def ratio(self, config: Config, offered_eps: float) -> float:
        """The throughput ratio (output / input) the twin expects of `config` at the offered load × headroom."""
        arrivals = steady_arrivals(max(offered_eps, 1.0) * self.headroom, 2 * self.window_s)
        twin = Twin(config, arrivals, self.calibration, seed=0)
        twin.run_until(2 * self.window_s)
        return twin.observe(self.window_s, 2 * self.window_s).throughput_ratio


def screen_bar(incumbent_ratio: float, min_throughput_ratio: float) -> float:
    """The twin ratio a candidate must reach: the policy's floor, or the incumbent's own where the twin expects
    even the incumbent (known to keep up) below the floor."""
    return min(min_throughput_ratio, incumbent_ratio)
