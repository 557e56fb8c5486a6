"""Judging a canary against its pool's control nodes over the same window, from latency histograms.

The figure is a difference in differences of P95: (canary after − canary before) − (controls after −
controls before). Load that moves every node of the pool (the diurnal cycle, a burst) moves the controls
as much as the canary and cancels; what remains is the change the new config made (Kayenta judges a canary
against a baseline running at the same time on the same traffic the same way).

The interval is a bootstrap over per-event latencies, drawn from the bucket counts: each of the four
histograms is resampled as a multinomial over its buckets (its own event count, its own bucket shares),
and each resample's P95 is read the way Prometheus' `histogram_quantile` reads it (linear inside the
bucket). A bootstrap, not a Mann–Whitney interval, because the question is about the P95 a user tunes,
not a shift of the median; because four independent samples combine into one difference of differences
by resampling each, which a rank test has no form for; and because it works on the histogram the probe
exports without the events themselves. The bootstrap covers the sampling noise of the events in the
four windows, and nothing else: load that moves one node alone (each host's own traffic), and events that
are not independent (a batch shares its wait), make a node's P95 move more from window to window than it
says. With two controls or more the pool measures that itself, as a placebo: each control judged against
the other controls over the same windows had no change, so its difference in differences is that noise
alone. Their root mean square is the noise's spread, estimated from k placebos, and the interval adds it
as a Student-t term with k degrees of freedom to the bootstrap draws. The placebos hold the events'
sampling noise as well, so that part is counted twice: a little conservative, on purpose, as a promotion
that was noise costs a restart and a wrong incumbent. (On a twin fleet with ±30 % per-node load noise the
bootstrap alone promoted 2 of 32 changes that fresh windows showed worse: `bench.fleet_canary`.)

A difference in differences assumes the canary and the controls started where they usually stand: the
judgement is UNCLEAR when, before the change, the canary's P95 over the controls' was off its usual ratio
(1 for like traffic; in a pool whose nodes carry different rates, what it was while every node ran the
same config) by more than `MAX_BASELINE_GAP`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Iterable, Mapping, Sequence

import numpy as np

QUANTILE = 0.95
# Before the change the canary's P95 stands where it usually stands against the controls', give or take a
# little. Beyond this (relative) gap the canary did not start where it usually does (it still drains a
# previous trial's backlog), and its return to its level would pass for an effect.
MAX_BASELINE_GAP = 0.15
MIN_EVENTS = 200  # a P95 rests on the slowest 5 %: below 10 events there, one event moves it by a bucket
RESAMPLES = 1000  # interval bounds at 95 % move by ~2 % of the interval's width between seeds


@dataclass(frozen=True)
class LatencyHistogram:
    """One node's latencies over one window: non-cumulative event counts per bucket.

    Bucket i holds the events with latency ≤ upper_bounds_s[i] and above the bound before it (Prometheus'
    `le`); the last bound may be math.inf.
    """

    upper_bounds_s: tuple[float, ...]
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        bounds, counts = self.upper_bounds_s, self.counts
        if not bounds:
            raise ValueError("upper_bounds_s: needs at least one bucket")
        if len(counts) != len(bounds):
            raise ValueError(f"counts: {len(counts)} counts for {len(bounds)} buckets (upper_bounds_s)")
        if bounds[0] <= 0 or any(b <= a for a, b in zip(bounds, bounds[1:])):
            raise ValueError(f"upper_bounds_s: must be > 0 and strictly increasing, got {bounds}")
        if any(not isinstance(c, (int, np.integer)) or c < 0 for c in counts):
            raise ValueError(f"counts: must be whole numbers ≥ 0, got {counts}")

    @classmethod
    def of(cls, latencies_s: Sequence[float] | np.ndarray, upper_bounds_s: Sequence[float]) -> "LatencyHistogram":
        """The histogram of per-event `latencies_s` in buckets `upper_bounds_s` (an event above the last
        finite bound goes to an +Inf bucket, added when the bounds lack one)."""
        bounds = tuple(float(b) for b in upper_bounds_s)
        if bounds and math.isfinite(bounds[-1]):
            bounds = (*bounds, math.inf)
        index = np.searchsorted(np.asarray(bounds), np.asarray(latencies_s, dtype=np.float64), side="left")
        return cls(bounds, tuple(int(c) for c in np.bincount(index, minlength=len(bounds))))

    @classmethod
    def merge(cls, histograms: Iterable["LatencyHistogram"]) -> "LatencyHistogram":
        """Several nodes' histograms of one window as one (sum of counts); all must share their buckets."""
        items = list(histograms)
        if not items:
            raise ValueError("histograms: nothing to merge")
        bounds = items[0].upper_bounds_s
        for i, h in enumerate(items):
            if h.upper_bounds_s != bounds:
                raise ValueError(f"histograms.{i}: buckets differ from histograms.0's")
        return cls(bounds, tuple(int(c) for c in np.sum([h.counts for h in items], axis=0)))

    @property
    def total(self) -> int:
        return int(sum(self.counts))

    def quantile_s(self, q: float = QUANTILE) -> float:
        """The `q` quantile as `histogram_quantile` gives it (nan for an empty histogram)."""
        if self.total == 0:
            return math.nan
        return float(_quantiles(np.asarray(self.upper_bounds_s), np.asarray([self.counts]), q)[0])


class CanaryOutcome(StrEnum):
    BETTER = "better"  # the whole interval of the effect lies below 0: the canary's P95 fell
    WORSE = "worse"  # the whole interval lies above 0
    UNCLEAR = "unclear"


@dataclass(frozen=True)
class CanaryJudgement:
    """The effect on P95 of the canary's change, net of what the controls did, with its interval."""

    outcome: CanaryOutcome
    effect_s: float  # (canary after − before) − (controls after − before), of P95
    low_s: float
    high_s: float
    reason: str


def judge_canary(canary_before: LatencyHistogram, canary_after: LatencyHistogram,
                 controls_before: Sequence[LatencyHistogram], controls_after: Sequence[LatencyHistogram], *,
                 confidence: float = 0.95, seed: int = 0, min_events: int = MIN_EVENTS,
                 max_baseline_gap: float = MAX_BASELINE_GAP, usual_ratio: float = 1.0,
                 resamples: int = RESAMPLES) -> CanaryJudgement:
    """BETTER when the `confidence` interval of the difference in differences of P95 lies wholly below 0,
    WORSE when wholly above, else UNCLEAR; UNCLEAR too when a window has fewer than `min_events` events, or
    when before the change the canary's P95 over the controls' was off `usual_ratio` (what it is while both run
    the same config) by more than `max_baseline_gap` (relative).
    The same arguments and `seed` always give the same judgement. `controls_*`: each control node's
    histogram, in the same node order before and after; none in a pool of one node, which has no controls:
    its effect is the canary's own before/after difference, load drift included."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence: {confidence} is outside (0, 1)")
    if max_baseline_gap <= 0:
        raise ValueError(f"max_baseline_gap: {max_baseline_gap} must be > 0")
    if not (usual_ratio > 0 and math.isfinite(usual_ratio)):
        raise ValueError(f"usual_ratio: {usual_ratio} must be a finite ratio > 0")
    if resamples < 100:
        raise ValueError(f"resamples: {resamples} is below 100")
    if len(controls_before) != len(controls_after):
        raise ValueError(f"controls_before, controls_after: {len(controls_before)} and {len(controls_after)} "
                         "nodes; give each control node's histogram in both")
    bounds = canary_before.upper_bounds_s
    named = [("canary_after", canary_after), *((f"controls_before.{i}", h) for i, h in enumerate(controls_before)),
             *((f"controls_after.{i}", h) for i, h in enumerate(controls_after))]
    for name, h in named:
        if h.upper_bounds_s != bounds:
            raise ValueError(f"{name}: buckets differ from canary_before's; every window needs the same buckets")
    windows = {"canary_before": canary_before, "canary_after": canary_after}
    if controls_before:
        windows |= {"controls_before": LatencyHistogram.merge(controls_before),
                    "controls_after": LatencyHistogram.merge(controls_after)}
    p95 = {name: h.quantile_s() for name, h in windows.items()}
    few = [f"{name} has {h.total} events" for name, h in windows.items() if h.total < min_events]
    if few:
        return CanaryJudgement(CanaryOutcome.UNCLEAR, math.nan, math.nan, math.nan,
                               f"too few events for a P95: {', '.join(few)} (< {min_events})")
    if "controls_before" in p95:
        gap = p95["canary_before"] / max(p95["controls_before"] * usual_ratio, 1e-9) - 1.0
        if abs(gap) > max_baseline_gap:
            usual = "" if usual_ratio == 1.0 else f" × its usual {usual_ratio:.2f}"
            return CanaryJudgement(CanaryOutcome.UNCLEAR, math.nan, math.nan, math.nan, (
                f"before the change the canary's P95 ({p95['canary_before'] * 1e3:.1f} ms) was {gap:+.0%} off the "
                f"controls' ({p95['controls_before'] * 1e3:.1f} ms){usual}, beyond ±{max_baseline_gap:.0%}: "
                "no common baseline"))
    rng = np.random.default_rng(seed)
    upper = np.asarray(bounds)
    drawn = [_quantiles(upper, rng.multinomial(h.total, np.asarray(h.counts) / h.total, size=resamples), QUANTILE)
             for h in windows.values()]
    effect, effects = _effect(list(p95.values())), _effect(drawn)
    placebos = _placebos(list(controls_before), list(controls_after))
    spread_s = float(np.sqrt(np.mean(np.square(placebos)))) if placebos else 0.0
    if spread_s > 0:
        effects = effects + spread_s * rng.standard_t(len(placebos), size=resamples)
    tail = (1.0 - confidence) / 2
    low, high = (float(v) for v in np.quantile(effects, [tail, 1.0 - tail]))
    outcome = CanaryOutcome.BETTER if high < 0 else CanaryOutcome.WORSE if low > 0 else CanaryOutcome.UNCLEAR
    ms = {name: f"{v * 1e3:.1f}" for name, v in p95.items()}
    controls = (f"controls {ms['controls_before']} → {ms['controls_after']} ms" if "controls_after" in ms
                else "no controls (load drift not removed)")
    if placebos:
        controls += f" (placebo spread ±{spread_s * 1e3:.1f} ms over {len(placebos)})"
    reason = (f"P95 canary {ms['canary_before']} → {ms['canary_after']} ms, {controls}: effect {effect * 1e3:+.1f} "
              f"ms, {confidence:.0%} interval {low * 1e3:+.1f} .. {high * 1e3:+.1f} ms")
    return CanaryJudgement(outcome, effect, low, high, reason)


def merge_windows(windows: Sequence[Mapping[str, LatencyHistogram]]) -> dict[str, LatencyHistogram]:
    """Several consecutive windows of a pool as one: each node's histograms summed, for the nodes that have
    one in every window (a canary judged again over all its windows together)."""
    if not windows:
        raise ValueError("windows: nothing to merge")
    nodes = [n for n in windows[0] if all(n in w for w in windows[1:])]
    return {n: LatencyHistogram.merge(w[n] for w in windows) for n in nodes}


def judge_step(before: Mapping[str, LatencyHistogram], after: Mapping[str, LatencyHistogram],
               changed: Sequence[str], held: Sequence[str], *, confidence: float = 0.95,
               seed: int = 0) -> dict[str, CanaryJudgement]:
    """Each node of a promotion step, judged as a canary of its own: its P95 change from the window before
    its step (`before`) to the window after (`after`), minus the same change on the `held` nodes, whose
    config did not change between the two windows.

    The held nodes are every other node whose config held: those not promoted yet (the previous config in
    both windows) and those promoted in earlier steps with the canary (the candidate in both). Either kind
    moved only with the load, which is what a control is for, and taking both gives a step more controls,
    so a placebo spread from the first step of a pool of three nodes on, and the last step (nothing left
    unpromoted) the same rule. The baseline gap of `judge_canary` is not checked: a step's node may carry
    traffic of another level than the controls (a flash sale), and on the last step the controls already
    run the better candidate; only the changes are compared. A node without a histogram in both windows
    is UNCLEAR."""
    controls = [n for n in held if n in before and n in after]
    out = {}
    for i, node in enumerate(changed):
        if node not in before or node not in after:
            out[node] = CanaryJudgement(CanaryOutcome.UNCLEAR, math.nan, math.nan, math.nan,
                                        f"no latency of {node} in the windows around its step")
            continue
        out[node] = judge_canary(before[node], after[node], [before[n] for n in controls],
                                 [after[n] for n in controls], confidence=confidence, seed=seed + i,
                                 max_baseline_gap=math.inf)
    return out


def _placebos(before: list[LatencyHistogram], after: list[LatencyHistogram]) -> list[float]:
    """Each control's difference in differences of P95 against the other controls (two controls or more;
    none else): what a canary that changed nothing would show."""
    if len(before) < 2:
        return []
    placebos = []
    for i in range(len(before)):
        others = [LatencyHistogram.merge(ws[:i] + ws[i + 1:]) for ws in (before, after)]
        p95 = [before[i].quantile_s(), after[i].quantile_s(), others[0].quantile_s(), others[1].quantile_s()]
        if all(math.isfinite(v) for v in p95):
            placebos.append(float(_effect(p95)))
    return placebos


def _effect(p95: list) -> float | np.ndarray:
    """(canary after − before) − (controls after − before), from P95s in `windows` order; without controls,
    the canary's own after − before."""
    canary = p95[1] - p95[0]
    return canary - (p95[3] - p95[2]) if len(p95) == 4 else canary


def _quantiles(upper_bounds_s: np.ndarray, counts: np.ndarray, q: float) -> np.ndarray:
    """The `q` quantile of each row of `counts` (rows: histograms over `upper_bounds_s`), interpolated
    linearly inside its bucket from the bound below (0 for the first); a quantile in the +Inf bucket is
    the last finite bound, as in Prometheus."""
    cumulative = np.cumsum(counts, axis=1)
    rank = q * cumulative[:, -1]
    index = np.argmax(cumulative >= rank[:, None], axis=1)
    rows = np.arange(counts.shape[0])
    lower = np.where(index > 0, upper_bounds_s[np.maximum(index - 1, 0)], 0.0)
    upper = upper_bounds_s[index]
    below = np.where(index > 0, cumulative[rows, np.maximum(index - 1, 0)], 0)
    inside = np.maximum(counts[rows, index], 1)
    value = lower + (np.where(np.isfinite(upper), upper, lower) - lower) * (rank - below) / inside
    return value
