"""The one interface every tuning strategy implements, and the unit cube strategies search in.

`Learner` is ask/tell: `suggest(context)` proposes the config for the next window as a `Suggestion`
(with why, and what it expects), `tell(config, context, observation, verdict)` reports what that window
measured and whether it was feasible (`models.verdict`: the one rule every strategy follows). The context
is the offered load, so a strategy that can use it learns across rates, and the daemon's incumbent, so a
strategy that searches around the best known config searches around the one the daemon holds.
`TunedCube` maps the tuned parameters of a config to [0, 1]^d and back: log-warped for parameters whose
range spans orders of magnitude (sizes, times), linear otherwise, clipped to the policy's bounds, on each
parameter's resolution, with pins and untuned parameters taken from a base config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Protocol

import numpy as np

from models.budget import BudgetLimits
from models.components import TOPOLOGIES
from models.observation import Observation
from models.policy import Policy
from models.space import NOT_ABOVE, PIPELINE_SPACE, ChangeCost, Config, Param, SearchSpace, kept_in_order
from models.verdict import Verdict

# Parameters each topology's learner tunes by default: the ones that move a latency stage (`Topology.tuned`).
# Categoricals (acks, compression) and thread counts move none: they stay with the operator.
TUNED_BY_TOPOLOGY: dict[str, tuple[str, ...]] = {name: topology.tuned() for name, topology in TOPOLOGIES.items()}
# Which tuned parameters move each stage's latency (the paper's Table 3 stages). A stage's latency
# model sees only these, so each is a low-dimensional function the learner pins down in a few windows.
STAGE_PARAMS: dict[str, dict[str, tuple[str, ...]]] = {name: topology.stage_params()
                                                       for name, topology in TOPOLOGIES.items()}
_RESOLUTION = {"s": 1e-3, "ms": 1.0, "events": 1.0, "bytes": 1.0}  # smallest step worth telling apart
# A daemon that runs for months must not remember every window: a GP fit costs O(n³) and its memory O(n²).
# The most recent windows describe the pipeline as it is now (its load, its software); 200 of them fit in
# tens of milliseconds. The best feasible ones are kept beyond that, so the learner never forgets where
# the good region was while recent windows explore elsewhere.
HISTORY_RECENT = 200
HISTORY_BEST = 20
WHOLE_PIPELINE = "e2e"  # the one stage a learner models when it has no stage figures
LOAD_SHIFT = 0.25  # a change of offered load beyond this fraction is a new situation: re-measure, search again


def load_moved(reference_eps: float, offered_eps: float) -> bool:
    """Whether the offered load moved clearly (beyond `LOAD_SHIFT`) from `reference_eps`."""
    return abs(offered_eps - reference_eps) > LOAD_SHIFT * max(reference_eps, 1.0)


def at_or_below(load_eps: float, offered_eps: float) -> bool:
    """Whether `load_eps` is about `offered_eps` (within `LOAD_SHIFT`) or lower: a config that fell behind there
    cannot carry `offered_eps` either."""
    return load_eps <= offered_eps or not load_moved(load_eps, offered_eps)


@dataclass(frozen=True)
class Context:
    """What the pipeline faces in a window that the config does not decide.

    `incumbent`: the best config the daemon knows to be safe (None before one is known); a strategy that
    searches around the best known config centres on it. `restart_pauses_s` price a change that restarts a
    component (`models.bayes.rules.restart_price_s`); `limits` are the policy's budgets (CPU, requests) as the load sets
    them (`models.budget`), which a strategy that models cost proposes within.
    """

    offered_eps: float
    incumbent: Config | None = None
    # component -> how long its latest restart paused the pipeline, as measured (none yet: not there)
    restart_pauses_s: Mapping[str, float] = field(default_factory=dict, hash=False)
    limits: BudgetLimits = field(default_factory=BudgetLimits, hash=False)


@dataclass(frozen=True)
class Suggestion:
    """A strategy's proposal: the config, why, and what it expects of it (figure name -> value)."""

    config: Config
    reason: str
    predicted: dict[str, float] = field(default_factory=dict)


class Learner(Protocol):
    """A tuning strategy: ask for a config, tell what it did and how it was judged, follow the people's policy."""

    def suggest(self, context: Context) -> Suggestion: ...

    def tell(self, config: Config, context: Context, observation: Observation, verdict: Verdict) -> None: ...

    def update_policy(self, policy: Policy) -> None: ...


def kept_history(p95_s: list[float], feasible: list[bool], recent: int = HISTORY_RECENT,
                 best: int = HISTORY_BEST) -> list[int]:
    """Indices (in order) of the windows a bounded history keeps: the last `recent`, and the `best` feasible
    ones with the lowest P95 among the older ones."""
    older = len(p95_s) - recent
    if older <= 0:
        return list(range(len(p95_s)))
    candidates = [i for i in range(older) if feasible[i] and math.isfinite(p95_s[i])]
    kept = sorted(candidates, key=lambda i: p95_s[i])[:best]
    return sorted(kept) + list(range(older, len(p95_s)))


def _warp_shift(param: Param) -> float | None:
    """Offset of the log warp for `param`, or None when it is searched linearly."""
    if param.log_scale and (param.low or 0) > 0:
        return 0.0
    resolution = _RESOLUTION.get(param.unit)
    if resolution and param.low == 0 and (param.high or 0) >= 100 * resolution:
        return resolution  # 0 stays reachable, yet 1 ms and 10 ms are as far apart as 1 s and 10 s
    return None


class TunedCube:
    """The tuned parameters as a unit hypercube, within the policy's bounds.

    `ceilings` (parameter -> value) lower a parameter's highest value without rescaling its dimension: a row above
    one stands for a config the run may not go to (`under_ceilings`), and decodes at the ceiling."""

    def __init__(self, names: tuple[str, ...] | list[str], policy: Policy, space: SearchSpace = PIPELINE_SPACE,
                 ceilings: Mapping[str, float] | None = None) -> None:
        self.space = space
        self.policy = policy
        self.tuned = tuple(names)
        self.names = tuple(n for n in names if n not in policy.pins)
        self.params = [space[n] for n in self.names]
        self._shift = [_warp_shift(p) for p in self.params]
        self.ceilings = dict(ceilings or {})
        self._ranges = {n: policy.range_of(n, space) for n in self.names}
        lows, highs = zip(*self._ranges.values()) if self.names else ((), ())
        # Where decoding may put each value: its range, under its ceiling.
        self._allowed = {n: (low, min(high, max(self.ceilings.get(n, high), low)))
                         for n, (low, high) in self._ranges.items()}
        # The parameters a component's rule names: reading one reads them all, to keep them in order.
        self._ruled = tuple(dict.fromkeys(n for pair in NOT_ABOVE for n in pair if n in space))
        self._lo = np.array([self._warp(i, v) for i, v in enumerate(lows)])
        self._hi = np.array([self._warp(i, v) for i, v in enumerate(highs)])
        self._top = np.array([self._unit(i, self._allowed[n][1]) if n in self.ceilings else 1.0
                              for i, n in enumerate(self.names)], dtype=float)

    @property
    def dims(self) -> int:
        return len(self.names)

    def _warp(self, i: int, value: float) -> float:
        shift = self._shift[i]
        return float(value) if shift is None else math.log(float(value) + shift)

    def _unit(self, i: int, value: float | np.ndarray) -> float | np.ndarray:
        """Dimension `i`'s `value` on [0, 1] (clipped into the policy's bounds)."""
        shift = self._shift[i]
        warped = value if shift is None else np.log(np.asarray(value, dtype=float) + shift)
        width = self._hi[i] - self._lo[i] if self._hi[i] > self._lo[i] else 1.0
        return np.clip((warped - self._lo[i]) / width, 0.0, 1.0)

    def _unwarp(self, i: int, value: float | np.ndarray) -> float | np.ndarray:
        shift = self._shift[i]
        return value if shift is None else np.exp(value) - shift

    def encode(self, config: Config) -> np.ndarray:
        """The tuned values of `config` in [0, 1]^d (clipped into the policy's bounds)."""
        return np.array([self._unit(i, float(config[n])) for i, n in enumerate(self.names)], dtype=float)

    def decode(self, u: np.ndarray, base: Config) -> Config:
        """A config with the tuned values from `u`, the rest from `base`, pins and bounds enforced."""
        raw = self._lo + np.clip(u, 0.0, 1.0) * (self._hi - self._lo)
        changes: dict[str, float | int] = {}
        for i, (name, param) in enumerate(zip(self.names, self.params)):
            value = param.snap(self._unwarp(i, float(raw[i])), *self._allowed[name])
            changes[name] = int(round(value)) if param.kind == "int" else round(value, 6)
        config = self.policy.enforce(self.space.config(changes, base=base), self.space)
        # Never propose what a component refuses or its reference forbids: a tuned value out of order with another
        # moves (`kept_in_order`).
        return self.space.in_order(config, self.names, self._allowed)

    def kept_in_order(self, u: np.ndarray, base: Config) -> np.ndarray:
        """The rows of `u` moved to where decoding them lands (`kept_in_order`): the models must score a candidate
        at the config it stands for, or an out-of-order corner they can never measure stays uncertain for ever."""
        ruled = [i for i, n in enumerate(self.names) if n in self._ruled]
        if not ruled:
            return u
        kept = np.array(u, dtype=float, copy=True)
        for i in ruled:
            kept[:, i] = self._unit(i, self.values(u, self.names[i], base=base))
        return kept

    def top(self) -> np.ndarray:
        """Each dimension's highest allowed point on [0, 1]: its ceiling's, else 1."""
        return self._top

    def under_ceilings(self, u: np.ndarray) -> np.ndarray:
        """Which rows of `u` stay at or under every ceiling. Excluded, not moved to the ceiling: moved, the rows
        above one piled onto it and the search's candidates were no longer the trust region's draw."""
        return np.all(np.asarray(u) <= self._top + 1e-9, axis=1)

    def values(self, u: np.ndarray, name: str, *, base: Config) -> np.ndarray:
        """`name`'s value at each row of `u` (before snapping to its resolution), `base`'s where the cube does not
        tune it (pinned or untuned), kept in order with the others as decoding each row keeps it."""
        if name not in self._ruled:
            return self._raw(u, name, base)
        rows = {n: self._raw(u, n, base) for n in self._ruled}
        return np.broadcast_to(kept_in_order(rows, set(self.names) & set(self._ruled), self._ranges)[name], len(u))

    def _raw(self, u: np.ndarray, name: str, base: Config) -> np.ndarray:
        if name not in self.names:
            return np.full(len(u), float(base[name]))
        i = self.names.index(name)
        return self._unwarp(i, self._lo[i] + np.clip(u[:, i], 0.0, 1.0) * (self._hi[i] - self._lo[i]))

    def stage_dims(self, stage_params: dict[str, tuple[str, ...]] | None) -> dict[str, np.ndarray]:
        """For each stage, the indices of the tuned dimensions that move it.

        A tuned parameter no stage claims is given to every stage; with no stage map the whole
        pipeline is one stage, `e2e`, over every dimension.
        """
        if not stage_params:
            return {WHOLE_PIPELINE: np.arange(self.dims)}
        claimed = {n for names in stage_params.values() for n in names}
        unclaimed = [i for i, n in enumerate(self.names) if n not in claimed]
        return {stage: np.array(sorted({i for i, n in enumerate(self.names) if n in names} | set(unclaimed)), dtype=int)
                for stage, names in stage_params.items()}

    def with_policy(self, policy: Policy) -> "TunedCube":
        """The same tuned parameters and ceilings under another policy's bounds and pins."""
        return TunedCube(self.tuned, policy, self.space, self.ceilings)

    def restart_dims(self) -> dict[str, np.ndarray]:
        """For each component a change restarts, which tuned dimensions restart it when changed."""
        restarting = [p.component if p.cost is ChangeCost.RESTART else None for p in self.params]
        return {c: np.array([r == c for r in restarting]) for c in dict.fromkeys(restarting) if c is not None}


def tuned_names(policy: Policy, topology: str) -> tuple[str, ...]:
    """The parameters to tune: the policy's list, else the topology's default set."""
    return tuple(policy.tuned) if policy.tuned is not None else TUNED_BY_TOPOLOGY[topology]
