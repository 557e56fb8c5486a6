"""Pre-screening candidates on a twin: does a config keep up with the load, with headroom to spare?

A guardrail can only roll back a config after a window has shown it falling behind; the twin can
say so before the config touches the pipeline. The learner asks the screen about its best few
candidates and proposes only one the twin expects to keep up with `headroom` × the offered load.
The twin is a calibration fitted to imperfect measurements: near capacity it may expect configs the
pipeline has shown keeping up to fall behind. Then its absolute verdict says nothing, only its ranking
does, and `screen_bar` places the bar by what the pipeline measured of configs the twin ranked before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from models.space import Config
from models.twin import Calibration, Twin, steady_arrivals

SCREEN_STEP = 0.95  # how far below the weakest config seen keeping up a doubting twin may rank a candidate


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


def screen_bar(kept_up: Sequence[float], fell_behind: Sequence[float], min_throughput_ratio: float,
               step: float = SCREEN_STEP) -> float:
    """The twin ratio a candidate must exceed, given the twin ratios of configs the pipeline was measured on at
    about this load: those that kept up (the incumbent at least) and those that fell behind.

    Where the twin expects each config that kept up to keep up with the headroom, the policy's floor. Where it
    expects one of them to fall behind, its absolute verdict says nothing, only its ranking does: a candidate
    must come within `SCREEN_STEP` of the weakest that kept up. Either way, it must rank above every config that
    fell behind, where the twin ranks that one below the weakest that kept up: where it ranks one that fell behind
    as high or higher, its ranking is wrong there too, and barring all below it held the pipeline on its
    incumbent for the rest of the run.
    """
    weakest = min(kept_up)
    bar = min_throughput_ratio if weakest >= min_throughput_ratio else step * weakest
    return max([bar, *(r + 1e-9 for r in fell_behind if r < weakest)])
