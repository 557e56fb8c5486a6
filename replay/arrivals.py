"""Arrival processes: when each event of a run is due, as a plain sorted array of seconds from start.

Every profile is a rate function λ(t) (events per second) sampled on a fine grid; send times are the
inverse of the cumulative intensity Λ(t) = ∫λ. With `poisson=True` the k-th arrival sits at
Λ⁻¹(E₁+…+E_k), Eᵢ ~ Exp(1) (the time-rescaling theorem), otherwise at Λ⁻¹(k − ½) (even spacing in
operational time, the paper's constant-rate generator). One mechanism serves every profile, so the
twin and a real run are fed the very same arrays. Deterministic for a seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

RateFn = Callable[[np.ndarray], np.ndarray]
_MAX_GRID_POINTS = 2_000_000


@dataclass(frozen=True)
class Phase:
    """A stretch of the run and the rate it is meant to have (the mean of λ over it)."""

    start_s: float
    end_s: float
    target_eps: float


@dataclass(frozen=True)
class Stage:
    """A k6-style stage: ramp linearly from the previous target to `target_eps` over `duration_s`."""

    duration_s: float
    target_eps: float


@dataclass
class Schedule:
    """The send times of one run, and the phases its summary reports against."""

    profile: str
    seed: int
    duration_s: float
    times_s: np.ndarray
    phases: list[Phase] = field(default_factory=list)

    @property
    def events(self) -> int:
        return int(self.times_s.size)


def _grid(duration_s: float) -> np.ndarray:
    step = max(0.001, duration_s / _MAX_GRID_POINTS)
    return np.linspace(0.0, duration_s, int(round(duration_s / step)) + 1)


def _from_rate(rate: RateFn, duration_s: float, poisson: bool, rng: np.random.Generator) -> np.ndarray:
    grid = _grid(duration_s)
    lam = np.maximum(rate(grid), 0.0)
    cumulative = np.concatenate(([0.0], np.cumsum((lam[1:] + lam[:-1]) * np.diff(grid) / 2.0)))
    total = cumulative[-1]
    if poisson:
        n = rng.poisson(total)
        marks = np.sort(rng.uniform(0.0, total, n))  # order statistics of uniforms ≡ Poisson process
    else:
        marks = np.arange(int(round(total))) + 0.5
    return np.interp(marks, cumulative, grid)


def _phase(rate: RateFn, start_s: float, end_s: float) -> Phase:
    grid = start_s + (np.arange(1000) + 0.5) * (end_s - start_s) / 1000  # cell midpoints: no edge bias
    return Phase(start_s, end_s, float(np.mean(np.maximum(rate(grid), 0.0))))


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value}")


def steady(rate_eps: float, duration_s: float, *, poisson: bool = False, seed: int = 0) -> Schedule:
    """Constant rate, evenly spaced or Poisson."""
    _check_positive(rate_eps=rate_eps, duration_s=duration_s)
    rate: RateFn = lambda t: np.full_like(t, rate_eps)
    times = _from_rate(rate, duration_s, poisson, np.random.default_rng(seed))
    return Schedule("steady", seed, duration_s, times, [_phase(rate, 0.0, duration_s)])


def step_burst(rate_eps: float, duration_s: float = 180.0, burst_start_s: float = 60.0, burst_end_s: float = 90.0,
               factor: float = 2.0, *, poisson: bool = False, seed: int = 0) -> Schedule:
    """The paper's robustness check: normal rate, ×`factor` in [start, end), then recovery."""
    _check_positive(rate_eps=rate_eps, duration_s=duration_s, factor=factor)
    if not 0 <= burst_start_s < burst_end_s <= duration_s:
        raise ValueError(f"burst window {burst_start_s}:{burst_end_s} must lie within 0:{duration_s}")
    rate: RateFn = lambda t: np.where((t >= burst_start_s) & (t < burst_end_s), rate_eps * factor, rate_eps)
    times = _from_rate(rate, duration_s, poisson, np.random.default_rng(seed))
    bounds = [0.0, burst_start_s, burst_end_s, duration_s]
    phases = [_phase(rate, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
    return Schedule("burst", seed, duration_s, times, phases)


def flash_sale(rate_eps: float, duration_s: float, spike_at_s: float, spike_end_s: float, factor: float = 8.0,
               *, poisson: bool = True, seed: int = 0) -> Schedule:
    """A sharp jump to ×`factor` at `spike_at_s`, decaying exponentially to within 5 % of normal by `spike_end_s`."""
    _check_positive(rate_eps=rate_eps, duration_s=duration_s, factor=factor)
    if not 0 <= spike_at_s < spike_end_s <= duration_s:
        raise ValueError(f"flash window {spike_at_s}:{spike_end_s} must lie within 0:{duration_s}")
    tau_s = (spike_end_s - spike_at_s) / np.log((factor - 1) / 0.05) if factor > 1.05 else spike_end_s - spike_at_s

    def rate(t: np.ndarray) -> np.ndarray:
        after = np.clip(t - spike_at_s, 0.0, None)
        return np.where(t >= spike_at_s, rate_eps * (1 + (factor - 1) * np.exp(-after / tau_s)), rate_eps)

    times = _from_rate(rate, duration_s, poisson, np.random.default_rng(seed))
    bounds = [0.0, spike_at_s, spike_end_s, duration_s]
    phases = [_phase(rate, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
    return Schedule("flash", seed, duration_s, times, phases)


def diurnal(rate_eps: float, duration_s: float, period_s: float, depth: float = 0.5, *, poisson: bool = True,
            seed: int = 0) -> Schedule:
    """Sinusoidal day/night cycle around `rate_eps`, starting at the trough: λ = r·(1 − depth·cos 2πt/P)."""
    _check_positive(rate_eps=rate_eps, duration_s=duration_s, period_s=period_s)
    if not 0 <= depth <= 1:
        raise ValueError(f"depth must be in [0, 1], got {depth}")
    rate: RateFn = lambda t: rate_eps * (1 - depth * np.cos(2 * np.pi * t / period_s))
    times = _from_rate(rate, duration_s, poisson, np.random.default_rng(seed))
    quarter = period_s / 4
    bounds = list(np.arange(0.0, duration_s, quarter)) + [duration_s]
    phases = [_phase(rate, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
    return Schedule("diurnal", seed, duration_s, times, phases)


def stages(plan: Sequence[Stage], *, start_eps: float = 0.0, poisson: bool = False, seed: int = 0) -> Schedule:
    """k6-style stages: linear ramps between rate targets, starting from `start_eps`."""
    if not plan:
        raise ValueError("stages must list at least one {duration, target}")
    for i, stage in enumerate(plan):
        if not stage.duration_s >= 0 or stage.target_eps < 0:
            raise ValueError(f"stage {i}: duration must be >= 0 and target >= 0, got {stage}")
    knots_t = np.concatenate(([0.0], np.cumsum([s.duration_s for s in plan])))
    if not knots_t[-1] > 0:
        raise ValueError("stages must last more than 0 s")
    knots_r = np.array([start_eps] + [s.target_eps for s in plan])
    # A 0 s stage is a step, as in k6: np.interp takes the later of two knots at the same time from there on.
    rate: RateFn = lambda t: np.interp(t, knots_t, knots_r)
    duration_s = float(knots_t[-1])
    times = _from_rate(rate, duration_s, poisson, np.random.default_rng(seed))
    phases = [_phase(rate, float(a), float(b)) for a, b in zip(knots_t, knots_t[1:]) if b > a]
    return Schedule("stages", seed, duration_s, times, phases)


def mmpp(rate_eps: float, duration_s: float, factor: float = 4.0, mean_normal_s: float = 20.0,
         mean_burst_s: float = 5.0, *, seed: int = 0) -> Schedule:
    """A two-state Markov-modulated Poisson process: normal rate, and bursts of ×`factor`.

    State sojourns are exponential with the given means; within a state arrivals are Poisson.
    """
    _check_positive(rate_eps=rate_eps, duration_s=duration_s, factor=factor, mean_normal_s=mean_normal_s,
                    mean_burst_s=mean_burst_s)
    rng = np.random.default_rng(seed)
    switches, bursting, t = [0.0], [False], 0.0
    while t < duration_s:
        t += rng.exponential(mean_burst_s if bursting[-1] else mean_normal_s)
        switches.append(min(t, duration_s))
        bursting.append(not bursting[-1])
    edges = np.array(switches)
    levels = np.where(np.array(bursting[:-1]), rate_eps * factor, rate_eps)
    rate: RateFn = lambda x: levels[np.clip(np.searchsorted(edges, x, side="right") - 1, 0, levels.size - 1)]
    times = _from_rate(rate, duration_s, True, rng)
    phases = [Phase(float(a), float(b), float(r)) for a, b, r in zip(edges, edges[1:], levels) if b > a]
    return Schedule("mmpp", seed, duration_s, times, phases)


def trace(timestamps_s: np.ndarray, *, time_scale: float = 1.0, amplify: float = 1.0,
          duration_s: float | None = None, seed: int = 0) -> Schedule:
    """Replay the inter-arrival pattern of a real log: `time_scale`× faster, `amplify`× the events.

    Timestamps of whole seconds (combined logs) are spread uniformly within their second so a
    second's requests are not sent as one burst. Each original arrival yields ⌊M⌋ events plus one
    more with probability M − ⌊M⌋; copies fall uniformly in the gap before the next arrival, so the
    amplified trace keeps the original rate shape.
    """
    _check_positive(time_scale=time_scale, amplify=amplify)
    rng = np.random.default_rng(seed)
    ts = np.sort(np.asarray(timestamps_s, dtype=float))
    if ts.size == 0:
        raise ValueError("the trace has no timestamps")
    rel = ts - ts[0]
    if np.all(rel == np.round(rel)):
        rel = rel + rng.uniform(0.0, 1.0, rel.size)
        rel.sort()
        rel -= rel[0]
    gaps = np.diff(rel, append=rel[-1] + (np.mean(np.diff(rel)) if rel.size > 1 else 1.0))
    copies = np.floor(amplify).astype(int) + (rng.uniform(size=rel.size) < amplify - np.floor(amplify))
    origin = np.repeat(rel, copies)
    offsets = np.repeat(gaps, copies) * rng.uniform(size=origin.size)
    first = np.concatenate(([0], np.cumsum(copies)[:-1]))[copies > 0]
    offsets[first] = 0.0  # the original arrival itself keeps its time
    times = np.sort(origin + offsets) / time_scale
    span_s = float(rel[-1] + gaps[-1]) / time_scale
    total_s = span_s if duration_s is None else duration_s
    times = times[times < total_s]
    return Schedule("trace", seed, total_s, times, [Phase(0.0, total_s, times.size / total_s)])
