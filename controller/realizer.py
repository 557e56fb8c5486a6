"""The realizer seam: how the daemon's decision reaches the pipeline, and what came of it.

The daemon decides; a realizer acts and says, as a typed `Outcome`, where the config it was given stands
(the Flink Kubernetes operator's autoscaler splits its scaling decision from its `ScalingRealizer` the same
way). A single pipeline's realizer (`Direct`) applies the config at once and has nothing to add to the window
after it. A pool's (`controller.rollout.CanaryPool`) puts it on its canary nodes, and `conclude` judges the
canary on the windows that follow: promoted, reverted or taken back, with the measured effect the learner is
told instead of the raw window, or, while the effect is unclear, extended by one more window (the daemon records
that window and decides nothing until the trial ends).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Callable, NamedTuple, Protocol

from controller.pipelines import Measured, Pipeline
from controller.state import OutcomeReport, RolloutReport
from models.canary import CanaryJudgement
from models.observation import Observation
from models.space import Config

NodeVersions = dict[str, dict[str, int] | None]  # node -> each component's config version (None: did not answer)


class OutcomeKind(StrEnum):
    APPLIED = "applied"  # in force on the whole pipeline (a pool: on every node, as its promoted config)
    CANARY = "canary"  # on the pool's canary nodes, to be judged against the others
    REFUSED = "refused"  # not put in force: the pipeline (a canary node) refused it
    PROMOTED = "promoted"  # judged better on the canary, then put on every node
    EXTENDED = "extended"  # unclear on the canary so far: it runs one more window, then is judged over all of them
    REVERTED = "reverted"  # judged worse on the canary, or still unclear after its windows: the canary is back
    TAKEN_BACK = "taken_back"  # promoted until a step showed a node clearly worse: every node is back


@dataclass(frozen=True)
class Outcome:
    """Where a config the realizer was given stands; for a candidate judged on a canary, what it measured."""

    kind: OutcomeKind
    config: Config  # the config realized, or the candidate judged
    message: str = ""
    pause_s: float = 0.0  # how long putting it in force paused the pipeline (a restart)
    observation: Observation | None = None  # judged: the candidate's window as the learner is told it
    judgement: CanaryJudgement | None = None  # judged: its effect on P95 net of the controls, with the interval
    windows: int = 0  # judged: how many of the canary's windows the judgement rests on
    rollout: RolloutReport | None = None  # a pool: each node's version and state as the outcome left them

    @property
    def in_force(self) -> bool:
        """Whether the config runs on the whole pipeline: put there at once, or promoted after its judgement."""
        return self.kind in (OutcomeKind.APPLIED, OutcomeKind.PROMOTED)

    def report(self) -> OutcomeReport:
        judged = self.judgement

        def finite(value: float | None) -> float | None:
            return value if value is not None and math.isfinite(value) else None
        return OutcomeReport(kind=str(self.kind), message=self.message, windows=self.windows,
                             effect_s=finite(judged.effect_s) if judged else None,
                             low_s=finite(judged.low_s) if judged else None,
                             high_s=finite(judged.high_s) if judged else None,
                             p95_sd_s=self.observation.p95_sd_s if self.observation else None)


@dataclass(frozen=True)
class NodesReport:
    """What the status shows of a pipeline's nodes: each one's config versions, and a pool's rollout."""

    versions: NodeVersions = field(default_factory=dict)
    rollout: RolloutReport | None = None


class Realizer(Protocol):
    """How the daemon's decided config is put in force, and what came of it."""

    def realize(self, config: Config) -> Outcome:
        """Put `config` in force, or begin to (a pool: on its canary nodes); `PipelineUnavailable` when a part
        it needs does not answer."""
        ...

    def conclude(self, seconds: float) -> Outcome | None:
        """What the window the pipeline has just measured makes of the config in force: a change on trial judged
        (reading the further windows of `seconds` that promoting it takes) or extended, or where it stands; None
        when the window's own figures are the config's (a single pipeline)."""
        ...

    def report(self) -> NodesReport:
        """Each node's components and the config version each runs, and a pool's rollout (empty on the twin)."""
        ...


class Direct:
    """A single pipeline's realizer: the config goes in force at once, and the window after it is its own."""

    def __init__(self, pipeline: Pipeline, node_versions: Callable[[], NodeVersions] = dict) -> None:
        self.pipeline = pipeline
        self.node_versions = node_versions  # a live pipeline's agents say; the twin has no nodes

    def realize(self, config: Config) -> Outcome:
        report = self.pipeline.apply(config)
        return Outcome(OutcomeKind.APPLIED if report.ok else OutcomeKind.REFUSED, config, report.message,
                       report.pause_s)

    def conclude(self, seconds: float) -> None:
        return None

    def report(self) -> NodesReport:
        return NodesReport(self.node_versions())


class Driven(NamedTuple):
    """What a daemon drives: the pipeline it measures, and the realizer that changes it."""

    pipeline: Measured
    realizer: Realizer

    @classmethod
    def direct(cls, pipeline: Pipeline, node_versions: Callable[[], NodeVersions] = dict) -> Driven:
        """A single pipeline, changed directly (`node_versions`: what its agents say each node runs)."""
        return cls(pipeline, Direct(pipeline, node_versions))
