"""The paper's study on the twin: its scenarios, the figures it reports, and how to compute them.

Metric definitions (per repetition; the paper's Section V):
Windows scale with the load's duration: the paper's 180 s run gives steady = t >= 40 s and a burst in
[60, 90) s; a 90 s run gives 20 s and [30, 45) s.
- E2E latency of every event written during the load (sink time - write time); an event still in
  the pipeline when the run ends counts with its wait so far (a lower bound), so an overloaded
  configuration cannot hide its backlog.
- mean / P95 over all events; steady mean / P95 over events written at t >= 40 s.
- peak throughput: the highest one-second count of events reaching the sink while load runs;
  sustained throughput: events reaching the sink during [40 s, end of load) per second.
- packets/s: requests' packets over the load (pipeline traffic only; the paper counted the NIC).
- backlog at end: events written during the load but not at the sink when the load stops.
- burst (Table 11, load x2 in [60, 90) s): P95 of events written in the burst and after it
  (recovery); max stage lag = the highest one-second mean of the Kafka -> sink stage.
Across repetitions: mean and sample sd of the per-repetition figures; Welch's t-test on
per-repetition P95 against Baseline, as the paper did.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np
from scipy import stats

from models.presets import preset
from models.twin import Calibration, Twin

STEADY_FROM = 40.0 / 180.0  # of the load's duration
BURST_WINDOW = (60.0 / 180.0, 90.0 / 180.0)
BURST_FACTOR = 2.0
DRAIN_S = 60.0


def burst_window_s(duration_s: float) -> tuple[float, float]:
    return BURST_WINDOW[0] * duration_s, BURST_WINDOW[1] * duration_s


@dataclass(frozen=True)
class Scenario:
    name: str
    multiline: bool  # the paper's log is multi-line JSON; Zero-Wait switched it to single-line
    label: str


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("baseline", True, "Baseline"),
    Scenario("zero-wait", False, "Zero-Wait"),
    Scenario("micro-batching", True, "Micro-Batch"),
    Scenario("io-control", True, "I/O Control"),
    Scenario("hybrid", True, "Hybrid"),
    Scenario("ovat-1", True, "OVAT-1 (scan 1s)"),
    Scenario("ovat-2", True, "OVAT-2 (bulk 2048)"),
    Scenario("ovat-3", True, "OVAT-3 (linger 5ms)"),
)
BURST_SCENARIOS = ("baseline", "micro-batching", "hybrid")

# The paper's own figures (Tables 9, 10, 11). OVAT rows come from Table 10 (5 reps, vs Hybrid).
PAPER: dict[str, dict[str, float]] = {
    "baseline": {"mean_s": 15.19, "p95_s": 31.28, "peak_throughput_eps": 449, "packets_per_s": 8303,
                 "steady_p95_s": 32.57},
    "zero-wait": {"mean_s": 15.13, "p95_s": 30.18, "peak_throughput_eps": 309, "packets_per_s": 9266,
                  "steady_p95_s": 31.41, "p_value": 0.1072},
    "micro-batching": {"mean_s": 65.88, "p95_s": 113.97, "peak_throughput_eps": 2267, "packets_per_s": 7524,
                       "steady_p95_s": 114.54, "p_value": 0.0001},
    "io-control": {"mean_s": 14.17, "p95_s": 30.77, "peak_throughput_eps": 298, "packets_per_s": 8112,
                   "steady_p95_s": 31.51, "p_value": 0.1679},
    "hybrid": {"mean_s": 14.42, "p95_s": 28.45, "peak_throughput_eps": 303, "packets_per_s": 9161,
               "steady_p95_s": 29.81, "p_value": 0.0402},
    "ovat-1": {"mean_s": 5.86, "p95_s": 25.92},
    "ovat-2": {"mean_s": 6.08, "p95_s": 25.14},
    "ovat-3": {"mean_s": 6.42, "p95_s": 27.09},
}
# Table 10 compares the OVAT variants with its own Hybrid runs (P95 29.06 s), not with Table 9's.
PAPER_OVAT_REFERENCE_P95_S = 29.06
PAPER_BURST: dict[str, dict[str, float]] = {
    "baseline": {"burst_p95_s": 39.11, "max_stage_lag_s": 0.05, "recovery_p95_s": 44.66},
    "micro-batching": {"burst_p95_s": 35.73, "max_stage_lag_s": 7.99, "recovery_p95_s": 41.27},
    "hybrid": {"burst_p95_s": 35.58, "max_stage_lag_s": 0.08, "recovery_p95_s": 38.75},
}


@dataclass
class Repetition:
    """One run's figures (see the module docstring for definitions)."""

    p95_s: float
    mean_s: float
    steady_p95_s: float
    steady_mean_s: float
    peak_throughput_eps: float
    sustained_throughput_eps: float
    offered_eps: float
    packets_per_s: float
    backlog_end_events: int
    lost_events: int
    stage_share: dict[str, float] = field(default_factory=dict)


@dataclass
class BurstRepetition:
    burst_p95_s: float
    recovery_p95_s: float
    max_stage_lag_s: float


def latencies(twin: Twin, end_s: float) -> np.ndarray:
    """E2E per event; events not delivered by `end_s` count their wait until then."""
    sink = np.where(twin.stamps.sink <= end_s, twin.stamps.sink, end_s)
    return sink - twin.stamps.write


def run(name: str, arrivals_s: np.ndarray, calibration: Calibration, *, seed: int,
        duration_s: float) -> tuple[Twin, float]:
    """Run scenario `name` on the twin through the load and a drain period; return it and the end time."""
    multiline = {s.name: s.multiline for s in SCENARIOS}[name]
    twin = Twin(preset(name), arrivals_s, calibration, seed=seed, multiline=multiline)
    end_s = duration_s + DRAIN_S
    twin.run_until(end_s)
    return twin, end_s


def repetition(twin: Twin, duration_s: float, end_s: float) -> Repetition:
    write, sink = twin.stamps.write, twin.stamps.sink
    loaded = write < duration_s
    e2e = latencies(twin, end_s)[loaded]
    steady_from = STEADY_FROM * duration_s
    steady = e2e[write[loaded] >= steady_from]
    per_second = np.histogram(sink[np.isfinite(sink)], np.arange(0.0, duration_s + 1e-9, 1.0))[0]
    steady_span = max(duration_s - steady_from, 1e-9)
    delivered_steady = np.count_nonzero((sink >= steady_from) & (sink < duration_s))
    obs = twin.observe(0.0, duration_s)
    shares = {}
    done = loaded & np.isfinite(sink) & (write >= steady_from)
    total = float((sink[done] - write[done]).sum())
    for name, begin, stop in twin.stages:
        spent = getattr(twin.stamps, stop)[done] - getattr(twin.stamps, begin)[done]
        shares[name] = float(spent.sum() / total) if total > 0 else 0.0
    return Repetition(
        p95_s=_pct(e2e), mean_s=float(e2e.mean()) if e2e.size else 0.0,
        steady_p95_s=_pct(steady), steady_mean_s=float(steady.mean()) if steady.size else 0.0,
        peak_throughput_eps=float(per_second.max()) if per_second.size else 0.0,
        sustained_throughput_eps=delivered_steady / steady_span,
        offered_eps=float(np.count_nonzero(loaded)) / duration_s,
        packets_per_s=obs.packets_per_s,
        backlog_end_events=int(np.count_nonzero(loaded & (sink > duration_s))),
        lost_events=obs.lost_events, stage_share=shares)


def burst_repetition(twin: Twin, duration_s: float, end_s: float) -> BurstRepetition:
    write = twin.stamps.write
    e2e = latencies(twin, end_s)
    start, stop = burst_window_s(duration_s)
    series = twin.observe(0.0, end_s).series
    lag = np.asarray(series["kafka->sink_mean_s"], dtype=float)
    return BurstRepetition(
        burst_p95_s=_pct(e2e[(write >= start) & (write < stop)]),
        recovery_p95_s=_pct(e2e[(write >= stop) & (write < duration_s)]),
        max_stage_lag_s=float(np.nanmax(lag)) if np.isfinite(lag).any() else 0.0)


def _pct(values: np.ndarray) -> float:
    return float(np.percentile(values, 95)) if values.size else 0.0


def summarise(reps: Sequence[Repetition | BurstRepetition]) -> dict[str, float]:
    """Mean over repetitions of every figure, plus `<figure>_sd` (sample sd, 0 for one repetition)."""
    out: dict[str, float] = {}
    for key, value in asdict(reps[0]).items():
        if isinstance(value, dict):
            continue
        values = np.array([getattr(r, key) for r in reps], dtype=float)
        out[key] = float(values.mean())
        out[f"{key}_sd"] = float(values.std(ddof=1)) if values.size > 1 else 0.0
    return out


def welch_p(a: Iterable[float], b: Iterable[float]) -> float:
    """Two-sided Welch's t-test p-value; nan when either side has < 2 values or both are constant."""
    x, y = np.asarray(list(a), dtype=float), np.asarray(list(b), dtype=float)
    if x.size < 2 or y.size < 2 or (x.std() == 0 and y.std() == 0):
        return math.nan
    return float(stats.ttest_ind(x, y, equal_var=False).pvalue)


@dataclass
class StudyResult:
    calibration: str
    rate_eps: float
    duration_s: float
    reps: int
    scenarios: dict[str, list[Repetition]] = field(default_factory=dict)
    burst: dict[str, list[BurstRepetition]] = field(default_factory=dict)
    series: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # first repetition's
    burst_series: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def summary(self) -> dict:
        """The `--json` document: per-scenario and per-burst means (+ sd, p-values, paper figures)."""
        out: dict = {"calibration": self.calibration, "rate_eps": self.rate_eps, "duration_s": self.duration_s,
                     "reps": self.reps, "scenarios": {}, "burst": {}}
        base = [r.p95_s for r in self.scenarios.get("baseline", [])]
        for name, reps in self.scenarios.items():
            row = summarise(reps)
            row["p_value_vs_baseline"] = welch_p([r.p95_s for r in reps], base) if name != "baseline" else math.nan
            row["stage_share"] = {k: float(np.mean([r.stage_share[k] for r in reps])) for k in reps[0].stage_share}
            row["paper"] = PAPER.get(name, {})
            out["scenarios"][name] = row
        for name, reps in self.burst.items():
            out["burst"][name] = {**summarise(reps), "paper": PAPER_BURST.get(name, {})}
        return out


def run_study(calibration: Calibration, arrivals: Callable[[str, int], np.ndarray], *, rate_eps: float,
              duration_s: float, reps: int, names: Sequence[str], seed: int = 0) -> StudyResult:
    """Run each named scenario `reps` times (independent seeds) and the burst check where named.

    `arrivals(kind, seed)` returns write times for `kind` "steady" or "burst" (the caller owns the
    workload generator, so the twin and a live run can share it).
    """
    known = {s.name: s for s in SCENARIOS}
    unknown = [n for n in names if n not in known and n != "burst"]
    if unknown:
        raise KeyError(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(known)}, burst")
    result = StudyResult(calibration.name, rate_eps, duration_s, reps)
    for rep in range(reps):
        rep_seed = seed + 1000 * rep
        steady = arrivals("steady", rep_seed)
        for name in (n for n in names if n in known):
            twin, end = run(name, steady, calibration, seed=rep_seed + 1, duration_s=duration_s)
            result.scenarios.setdefault(name, []).append(repetition(twin, duration_s, end))
            if rep == 0:
                result.series[name] = twin.observe(0.0, end).series
        if "burst" in names:
            burst = arrivals("burst", rep_seed)
            for name in BURST_SCENARIOS:
                twin, end = run(name, burst, calibration, seed=rep_seed + 2, duration_s=duration_s)
                result.burst.setdefault(name, []).append(burst_repetition(twin, duration_s, end))
                if rep == 0:
                    result.burst_series[name] = twin.observe(0.0, end).series
    return result
