"""Where the search stands: its phase, why it (re-)opened, its trust region, the windows it has measured."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from models.bayes.noise import Threshold
from models.bayes.settings import LearnerSettings
from models.bayes.trust_region import TrustRegion
from models.space import Config


class Phase(Enum):
    """The search's phase."""

    SEARCHING = "searching"  # optimistic gains (GP-UCB) in the trust region count
    EXHAUSTED = "exhausted"  # the trust region collapsed: only the gains the models expect count (κ = 0)
    CONVERGED = "converged"  # nothing safe promises more than the threshold: the incumbent is held


class Reopened(Enum):
    """Why a converged (or exhausted) search opened again: each is something the held models did not see."""

    LOAD_MOVED = "load moved"  # beyond `LOAD_SHIFT`: the load is a model input, so the ground is known
    GUARDRAIL = "guardrail"  # a window of the incumbent breached the policy
    OVER_BUDGET = "over budget"  # a window of the incumbent went over a budget, and broke no other rule
    DRIFT = "drift"  # the incumbent's P95 moved beyond the noise
    POLICY_CHANGED = "policy changed"  # people changed bounds or pins
    INCUMBENT_CHANGED = "incumbent changed"  # the daemon holds another config
    OVERLOAD = "overload"  # the incumbent fell behind, and the learner stepped toward capacity on the twin's word


@dataclass(frozen=True)
class Reopening:
    """A cause and what to tell of it with the next proposal (figures included)."""

    cause: Reopened
    why: str


@dataclass(frozen=True)
class Converged:
    """Where the search stopped: the incumbent, its load and mean P95, the window noise, the best gain then left,
    the gain a change had to promise and what set it; and the incumbent's P95 in the windows since."""

    config: Config
    offered_eps: float
    p95_s: float
    noise_s: float
    gain_s: float
    limit: Threshold
    since: list[float] = field(default_factory=list)

    def drift(self, s: LearnerSettings) -> Reopening | None:
        """A re-opening if the incumbent drifted: the mean P95 of the last `drift_windows` windows left that of the
        windows since convergence before them by more than `drift_z` × the noise of such a difference and by more
        than `drift_min` of the P95.

        Only windows since convergence count: the window that made a config the incumbent was its best,
        so it is biased low. Those earlier windows are repeats of the incumbent, so their own spread is a
        noise estimate too, and the larger one counts: the noise at convergence rests on few repeats.
        """
        earlier, recent = self.since[:-s.drift_windows], self.since[-s.drift_windows:]
        if len(earlier) < s.drift_windows:
            return None
        before, now = float(np.mean(earlier)), float(np.mean(recent))
        noise_s = max(self.noise_s, float(np.std(earlier, ddof=1)))
        spread = noise_s * math.sqrt(1 / s.drift_windows + 1 / len(earlier))
        if abs(now - before) <= max(s.drift_z * spread, s.drift_min * before):
            return None
        return Reopening(Reopened.DRIFT, f"the incumbent's P95 drifted {before * 1e3:.1f} → {now * 1e3:.1f} ms, "
                                         f"beyond the noise of {noise_s * 1e3:.1f} ms")

    @property
    def reason(self) -> str:
        return (f"converged: best predicted gain {self.gain_s * 1e3:.1f} ms < {self.limit.gain_s * 1e3:.1f} ms "
                f"({self.limit.why})")


@dataclass
class SearchState:
    """One search, from when it (re-)opened: a fresh trust region, its phase, the windows it measured."""

    region: TrustRegion
    phase: Phase = Phase.SEARCHING
    reopening: Reopening | None = None  # why it re-opened (None: the first search)
    announced: bool = False  # whether a proposal has told the re-opening yet
    windows: int = 0  # windows measured since it (re-)opened
    converged: Converged | None = None  # set in the CONVERGED phase, its record

    @property
    def known_ground(self) -> bool:
        """Whether the search re-opened on ground its models searched: on a load move (the load is an input of every
        model, so the configs around the incumbent are ground the models searched at another load: their optimism at
        the new load is only the load's novelty), or the incumbent over a budget at its load (the cost models, told
        that window, know the ground; searched young again after 30-50 windows held, fb-kafka steady spent 5-7
        changes growing a safe set it knew, in traces with a fallback change not kept, docs/learner.md). Such a
        search counts only the gains the models expect, and it is never young (it spends no window growing the safe
        set); it may stop at once."""
        return self.reopening is not None and self.reopening.cause in (Reopened.LOAD_MOVED, Reopened.OVER_BUDGET)

    def collapse(self) -> None:
        """The trust region collapsed: a search goes by expected gains from now on (a held one stays held)."""
        if self.phase is Phase.SEARCHING:
            self.phase = Phase.EXHAUSTED

    def widen(self, s: LearnerSettings) -> None:
        """Something safe beyond the trust region promises more: search again from a region of the initial side."""
        self.region.length, self.phase = s.length_init, Phase.SEARCHING

    def converge(self, held: Converged) -> None:
        """Nothing safe anywhere promises more than the threshold: hold the incumbent."""
        self.phase, self.converged = Phase.CONVERGED, held


def fresh_search(s: LearnerSettings, reopening: Reopening | None = None) -> SearchState:
    """A search from a fresh trust region of the initial side, opened for `reopening` (None: the first)."""
    return SearchState(TrustRegion(s.length_init), reopening=reopening)
