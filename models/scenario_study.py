"""The paper's scenarios on a real pipeline beside the twin and the paper: the pure part of `pipetune scenarios
--pipeline` (what each scenario sets on a given pipeline, the rate at which Zero-Wait collapses on the twin, the
winner and the collapse of a set of runs). The runs themselves are `testbed.scenarios`.

A real run's figures are one window per run, read as the daemon reads its windows (`PrometheusTelemetry.window`,
the deployment's latency stage: for the paper pipeline, each request's nginx `$msec` -> its micro-batch committed
to the table); throughput is rows committed to the table per second, offered what nginx appended to its log.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Collection, Mapping, Sequence

import numpy as np

from models.paper_scenarios import DRAIN_S, PAPER, PAPER_OVAT_REFERENCE_P95_S, repetition, run, summarise
from models.presets import PRESETS, preset_as_taken
from models.space import NOT_ABOVE, PIPELINE_SPACE, Config, Value
from models.twin import Calibration, Twin

# The five scenarios of Table 4; the OVATs are one change from Hybrid each and left to the twin.
REAL_SCENARIOS: tuple[str, ...] = ("baseline", "zero-wait", "micro-batching", "io-control", "hybrid")
KEEPS_UP = 0.95  # output / offered at or above which a run keeps up (autotune's default guardrail)
TIED_WITHIN = 0.03  # relative P95 within which two scenarios tie for the lowest
# Up to the rates where Filebeat shipping straight to Kafka (paper-testbed) falls behind with per-event sends.
COLLAPSE_RATES_EPS: tuple[float, ...] = (300.0, 350.0, 400.0, 500.0, 600.0, 800.0, 1000.0, 1500.0, 2000.0, 3000.0)


@dataclass(frozen=True)
class ScenarioConfig:
    """What one scenario is on one pipeline: the config applied, the scenario's keys no component takes (skipped),
    and keys it does not set that were moved so the agents take it (a component's order rule), with why."""

    name: str
    config: Config
    applied: dict[str, Value]
    skipped: dict[str, Value]
    moved: dict[str, tuple[Value, Value]]  # key -> (default, value applied)

    def as_applied(self) -> Config:
        """What the pipeline ran: the defaults with the applied and moved keys (skipped keys at their defaults)."""
        return PIPELINE_SPACE.config({**self.applied, **{k: v for k, (_, v) in self.moved.items()}})

    def said(self) -> str:
        parts = [f"{self.name}: " + (", ".join(f"{k}={v}" for k, v in self.applied.items()) or "component defaults")]
        if self.skipped:
            parts.append("skipped (no component takes them): " + ", ".join(f"{k}={v}" for k, v in self.skipped.items()))
        if self.moved:
            parts.append("moved to keep backoff <= max_backoff <= scan_frequency, which the agent requires: "
                         + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in self.moved.items()))
        return "; ".join(parts)


def scenario_config(name: str, taken: Collection[str]) -> ScenarioConfig:
    """Scenario `name` for a pipeline whose components take the keys `taken`. The paper's I/O Control and Hybrid set
    scan_frequency 10 ms beside the default max_backoff 10 s, which an agent refuses: a key the scenario does not set
    is lowered to the one it must not exceed (the nearest config the agent takes)."""
    if name not in PRESETS:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(REAL_SCENARIOS)}")
    changes = dict(PRESETS[name])
    config, moved = preset_as_taken(name)
    applied = {k: v for k, v in changes.items() if k in taken}
    skipped = {k: v for k, v in changes.items() if k not in taken}
    return ScenarioConfig(name, config, applied, skipped, {k: v for k, v in moved.items() if k in taken})


@dataclass(frozen=True)
class RealRun:
    """One scenario's window on the real pipeline (see the module docstring)."""

    p95_s: float
    mean_s: float
    offered_eps: float  # lines nginx appended per second in the window
    throughput_eps: float  # rows committed to the table per second in the window
    behind_end_events: int  # requests not in the table when the drain wait ended
    window_s: float
    # Its backlog before the table grew over the window past what the tuning run's verdict tolerates (the BACKLOG
    # rule of models.verdict): a queue building upstream, which the output over a window shifted by the median
    # latency cannot show (Zero-Wait at 1,750 ev/s: out/in 100 %, P95 32 s, its queue in Filebeat).
    backlog_grew: bool = False

    @property
    def out_in(self) -> float:
        return self.throughput_eps / self.offered_eps if self.offered_eps > 0 else math.nan

    @property
    def keeps_up(self) -> bool:
        return real_keeps_up(asdict(self))


def summarise_real(runs: Sequence[RealRun]) -> dict[str, float]:
    """Median over repetitions of every figure (a real window's noise has outliers), the share of them whose backlog
    grew, with out/in and keeps_up."""
    out = {key: float(np.median([getattr(r, key) for r in runs])) for key in asdict(runs[0])}
    out["backlog_grew"] = float(np.mean([r.backlog_grew for r in runs]))
    out["out_in"] = out["throughput_eps"] / out["offered_eps"] if out["offered_eps"] > 0 else math.nan
    out["keeps_up"] = real_keeps_up(out)
    out["reps"] = len(runs)
    return out


def keeps_up(output_eps: float, offered_eps: float) -> bool:
    """A run keeps up when its output is at least KEEPS_UP of what was offered."""
    return output_eps >= KEEPS_UP * offered_eps


def real_keeps_up(figures: Mapping[str, float]) -> bool:
    """Whether a real scenario's figures (one run's, or `summarise_real`'s over its repetitions) keep up: output at
    least KEEPS_UP of the offered, and a backlog that grew in at most half the repetitions. A document saved before the
    backlog was read has no `backlog_grew`: its output alone says."""
    return keeps_up(figures["throughput_eps"], figures["offered_eps"]) and float(figures.get("backlog_grew", 0.0)) <= 0.5


def winners(rows: Mapping[str, Mapping[str, float]], keeps_up: Mapping[str, bool]) -> list[str]:
    """The scenarios with the lowest P95 among those that keep up, ties (within TIED_WITHIN of the lowest: on the twin,
    two scenarios the pipeline runs alike give one figure) included; empty when none keeps up."""
    kept = [name for name in rows if keeps_up[name] and math.isfinite(rows[name]["p95_s"])]
    if not kept:
        return []
    best = min(rows[name]["p95_s"] for name in kept)
    return [name for name in kept if rows[name]["p95_s"] <= best * (1 + TIED_WITHIN)]


def paper_winner() -> str:
    """The paper's lowest P95 among the five scenarios (all kept up with its 300 ev/s)."""
    return min(REAL_SCENARIOS, key=lambda name: PAPER[name]["p95_s"])


@dataclass
class Collapse:
    """Zero-Wait's collapse on the twin: the lowest rate of those tried at which it falls behind while Baseline
    keeps up, and what each rate gave (rate -> scenario -> sustained output / offered)."""

    rate_eps: float | None
    tried: dict[float, dict[str, float]] = field(default_factory=dict)

    def why(self) -> str:
        if self.rate_eps is None:
            return f"Zero-Wait kept up on the twin at every rate tried ({', '.join(f'{r:g}' for r in self.tried)})"
        ratios = self.tried[self.rate_eps]
        return (f"{self.rate_eps:g} ev/s: the lowest rate tried at which the twin's Zero-Wait falls behind (output "
                f"{ratios['zero-wait']:.0%} of offered: one event per request, each waiting for the one before, caps "
                f"what Filebeat ships) while Baseline keeps up ({ratios['baseline']:.0%})")


def collapse_rate(calibration: Calibration, arrivals, rates_eps: Sequence[float] = COLLAPSE_RATES_EPS,
                  duration_s: float = 60.0, seed: int = 0) -> Collapse:
    """Run Baseline and Zero-Wait on the twin at each rate (ascending) until Zero-Wait falls behind while Baseline
    keeps up. `arrivals(rate_eps, seed)` returns write times over `duration_s`."""
    found = Collapse(None)
    for rate in sorted(rates_eps):
        times = arrivals(rate, seed)
        ratios = {}
        for name in ("baseline", "zero-wait"):
            twin, end = run(name, times, calibration, seed=seed + 1, duration_s=duration_s)
            figures = repetition(twin, duration_s, end)
            ratios[name] = figures.sustained_throughput_eps / figures.offered_eps if figures.offered_eps else math.nan
        found.tried[rate] = ratios
        if ratios["zero-wait"] < KEEPS_UP <= ratios["baseline"]:
            found.rate_eps = rate
            return found
    return found


def relative_error(twin: float, real: float) -> float:
    """(twin - real) / real; nan when the real figure is 0 or not finite."""
    return (twin - real) / real if real and math.isfinite(real) and math.isfinite(twin) else math.nan


def twin_figures(row: Mapping[str, float]) -> dict[str, float]:
    """A twin scenario row (`StudyResult.summary()`) in the real run's terms: throughput is its sustained output."""
    out_in = row["sustained_throughput_eps"] / row["offered_eps"] if row["offered_eps"] else math.nan
    return {"p95_s": row["p95_s"], "mean_s": row["mean_s"], "offered_eps": row["offered_eps"],
            "throughput_eps": row["sustained_throughput_eps"], "out_in": out_in, "keeps_up": out_in >= KEEPS_UP}


def compare(rate_eps: float, kind: str, real: Mapping[str, Sequence[RealRun]], twin_summary: Mapping) -> dict:
    """One rate's comparison: per scenario the real figures (median of reps), the twin's, the paper's (at its own
    rate only), the twin's P95 error against the real one; the winner of each (lowest P95 among those that keep
    up) and the scenarios each saw fall behind."""
    rows: dict[str, dict] = {}
    for name, runs in real.items():
        mine = summarise_real(runs)
        twin = twin_figures(twin_summary["scenarios"][name])
        rows[name] = {"real": mine, "twin": twin, "paper": PAPER.get(name, {}) if kind == "paper" else {},
                      "twin_p95_error": relative_error(twin["p95_s"], mine["p95_s"])}
    return {"rate_eps": rate_eps, "kind": kind, "scenarios": rows, **verdicts(rows, kind)}


def verdicts(rows: Mapping[str, Mapping], kind: str) -> dict:
    """Each side's winners (`winners`) and the scenarios it saw fall behind; the paper's winner at its own rate."""
    out: dict = {"winner": {}, "behind": {}}
    for side in ("real", "twin"):
        figures = {name: row[side] for name, row in rows.items()}
        out["winner"][side] = winners(figures, {name: bool(f["keeps_up"]) for name, f in figures.items()})
        out["behind"][side] = sorted(name for name, f in figures.items() if not f["keeps_up"])
    if kind == "paper" and set(REAL_SCENARIOS) <= set(rows):
        out["winner"]["paper"] = [paper_winner()]
    out["ovat_vs_hybrid"] = ovat_vs_hybrid(rows, kind)
    return out


def ovat_vs_hybrid(rows: Mapping[str, Mapping], kind: str) -> dict[str, dict[str, float]]:
    """The paper's sensitivity analysis: each OVAT variant's P95 relative to Hybrid's (P95 / Hybrid's - 1), real and
    twin, run beside it; and the paper's against its own Hybrid runs of Table 10, at its own rate."""
    if "hybrid" not in rows:
        return {}
    out = {}
    for name in (n for n in rows if n.startswith("ovat")):
        out[name] = {side: _relative(rows[name][side]["p95_s"], rows["hybrid"][side]["p95_s"])
                     for side in ("real", "twin")}
        if kind == "paper":
            out[name]["paper"] = _relative(PAPER[name]["p95_s"], PAPER_OVAT_REFERENCE_P95_S)
    return out


def _relative(value: float | None, reference: float | None) -> float:
    """value / reference - 1; nan unless both are finite and the reference positive (a saved NaN reads as None)."""
    finite = all(isinstance(v, (int, float)) and math.isfinite(v) for v in (value, reference))
    return value / reference - 1 if finite and reference > 0 else math.nan


def median_abs_error(comparisons: Sequence[Mapping]) -> float:
    """The median over every scenario at every rate of |twin P95 - real P95| / real P95."""
    errors = [abs(row["twin_p95_error"]) for c in comparisons for row in c["scenarios"].values()
              if math.isfinite(row["twin_p95_error"])]
    return float(np.median(errors)) if errors else math.nan


def twin_beside_real(calibration: Calibration, configs: Mapping[str, ScenarioConfig], arrivals, *, rate_eps: float,
                     duration_s: float, reps: int, seed: int = 0) -> dict:
    """The twin's run of each scenario as the real pipeline ran it (`ScenarioConfig.as_applied`: Hybrid's backoffs
    lowered as on the real one, the keys no real component took at their defaults), a single-line log as nginx
    writes (the paper's was multi-line). The twin's topology keeps a Logstash stage, at its defaults, which the real
    pipeline has not. `arrivals(rate_eps, seed)` as for `collapse_rate`; the document has `StudyResult.summary()`'s
    shape."""
    out: dict = {"scenarios": {}}
    for name, scenario in configs.items():
        runs = []
        for rep in range(reps):
            twin = Twin(scenario.as_applied(), arrivals(rate_eps, seed + 1000 * rep), calibration, seed=seed + 1000 * rep + 1,
                        multiline=False)
            end_s = duration_s + DRAIN_S
            twin.run_until(end_s)
            runs.append(repetition(twin, duration_s, end_s))
        out["scenarios"][name] = summarise(runs)
    return out
