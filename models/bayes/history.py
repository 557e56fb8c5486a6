"""The windows the learner was told, column by column, bounded however long the run."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from models.learning import Context, kept_history
from models.observation import Observation
from models.space import Config


def log_var(observation: Observation) -> float:
    """The variance of a window's log P95 its measurement states (`p95_sd_s`, e.g. a canary judgement's interval),
    0 where it states none. A canary judges the end-to-end P95 only; its relative spread stands for every stage's
    figure of that window too."""
    sd_s = observation.p95_sd_s
    if sd_s is None or not math.isfinite(sd_s) or observation.p95_s <= 0:
        return 0.0
    return (sd_s / observation.p95_s) ** 2


@dataclass
class History:
    """One entry a window in each column."""

    configs: list[Config] = field(default_factory=list)
    contexts: list[Context] = field(default_factory=list)
    x: list[np.ndarray] = field(default_factory=list)  # unit-cube coordinates, then the context feature
    stage_log_p95: list[dict[str, float]] = field(default_factory=list)
    margin: list[float] = field(default_factory=list)  # `output_margin`, or below the floor where a rule broke
    cpu_share: list[float] = field(default_factory=list)  # `Observation.busiest_cpu_share` (nan: unknown)
    costs: list[dict[str, float]] = field(default_factory=list)  # `budgeted_costs`; none off `Verdict.own_load`
    p95_s: list[float] = field(default_factory=list)
    p95_log_var: list[float] = field(default_factory=list)  # the window's own variance of log P95 (0: not told)
    feasible: list[bool] = field(default_factory=list)
    shipped_behind_eps: list[float] = field(default_factory=list)  # events/s shipped in a window behind (nan: kept up)
    twin_ratio: list[float] = field(default_factory=list)  # what the screen expected of the config (nan: not asked)

    def add(self, config: Config, context: Context, x: np.ndarray, stage_log_p95: dict[str, float], margin: float,
            observation: Observation, costs: dict[str, float], feasible: bool, behind: bool,
            twin_ratio: float) -> None:
        """Append one window: its config and load, their model input, its stage figures, margin and costs as told."""
        self.configs.append(config)
        self.contexts.append(context)
        self.x.append(x)
        self.stage_log_p95.append(stage_log_p95)
        self.margin.append(margin)
        share = observation.busiest_cpu_share
        self.cpu_share.append(math.nan if share is None else share)
        self.costs.append(costs)
        self.p95_s.append(observation.p95_s)
        self.p95_log_var.append(log_var(observation))
        self.feasible.append(feasible)
        self.shipped_behind_eps.append(observation.throughput_eps if behind else math.nan)
        self.twin_ratio.append(twin_ratio)

    def keep(self, recent: int, best: int) -> None:
        """Forget all but what `kept_history` keeps, so fits and memory stay bounded however long the run."""
        kept = kept_history(self.p95_s, self.feasible, recent, best)
        if len(kept) < len(self.p95_s):
            for name in ("configs", "contexts", "x", "stage_log_p95", "margin", "cpu_share", "costs", "p95_s",
                         "p95_log_var", "feasible", "shipped_behind_eps", "twin_ratio"):
                values = getattr(self, name)
                setattr(self, name, [values[i] for i in kept])
