"""The twin of the paper's pipeline fitted to its scenarios' real runs (saved `pipetune scenarios --pipeline --json`
documents): its Spark stage's per-batch commit cost and CPU and the shipper's request round trip, searched by
`models.twin.fit` (bounded Powell over log10) so that the twin's P95 and throughput of each run's config, as the
agents applied it, at its rate come closest to the real window's; with the twin's P95 error per scenario and rate
before and after, and whether the fitted twin picks the same winner and sees the same scenarios fall behind."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from models.components import SPARK_SINK, TOPOLOGIES
from models.scenario_study import keeps_up, real_keeps_up, winners
from models.space import PIPELINE_SPACE, Config
from models.twin import Calibration
from models.twin.fit import Coefficient, FitResult, Measurement, Predictor, fit, twin_predictor

# The Spark stage's costs (models/twin/sink.py): a micro-batch ends `batch_latency_s` (scheduling, Hive insert and
# commit) plus its CPU after it starts. Bounds: a loopback batch to a slow shared machine.
SPARK_COEFFICIENTS: tuple[Coefficient, ...] = (
    Coefficient("spark__batch_latency_s", 0.05, 10.0),
    Coefficient("spark__cpu_per_batch_s", 1e-3, 2.0),
    Coefficient("spark__cpu_per_record_s", 1e-6, 5e-3),
)
# What caps a per-event synchronous send (Zero-Wait) and so where it collapses: one request's round trip to the
# broker and back, beyond the CPU either side charges (a loopback's scheduling on a busy node, not its wire time).
ROUND_TRIP = Coefficient("network__rtt_s", 2e-5, 5e-3)
SCENARIO_COEFFICIENTS: tuple[Coefficient, ...] = SPARK_COEFFICIENTS + (ROUND_TRIP,)


@dataclass(frozen=True)
class SavedRun:
    """A scenario's real run read back from a saved document: the comparison it was run in (the documents' comparisons
    numbered in order: the scenarios run together at one rate), and whether it kept up."""

    scenario: str
    comparison: int
    measurement: Measurement
    keeps_up: bool


@dataclass(frozen=True)
class ScenarioError:
    """One real run against the twin before and after the fit: P95 s, (twin - real) / real, and whether each kept
    up (output at least KEEPS_UP of the offered rate)."""

    run: SavedRun
    base_p95_s: float
    fitted_p95_s: float
    base_keeps_up: bool
    fitted_keeps_up: bool

    @property
    def base_error(self) -> float:
        return (self.base_p95_s - self.run.measurement.p95_s) / self.run.measurement.p95_s

    @property
    def fitted_error(self) -> float:
        return (self.fitted_p95_s - self.run.measurement.p95_s) / self.run.measurement.p95_s


@dataclass(frozen=True)
class Agreement:
    """The scenarios of one comparison: the real runs' winners (lowest P95 among those keeping up, ties included) and
    those that fell behind, beside the twin's."""

    rate_eps: float
    real_winners: list[str]
    twin_winners: list[str]
    real_behind: list[str]
    twin_behind: list[str]

    @property
    def same_winner(self) -> bool:
        return bool(set(self.real_winners) & set(self.twin_winners))

    @property
    def same_collapse(self) -> bool:
        return self.real_behind == self.twin_behind


def applied_configs(doc: Mapping) -> dict[str, Config]:
    """Each scenario's config as the real pipeline ran it, from the document's `scenarios` section."""
    try:
        return {name: PIPELINE_SPACE.config({**s["applied"], **{k: v[1] for k, v in s["moved"].items()}})
                for name, s in doc["scenarios"].items()}
    except KeyError as err:
        raise ValueError(f"the document has no {err} (saved by `pipetune scenarios --pipeline --json`?)") from None


def saved_runs(docs: Sequence[Mapping]) -> list[SavedRun]:
    """Every scenario at every rate of the documents whose figures are finite."""
    out = []
    comparisons = [(applied_configs(doc), compared) for doc in docs for compared in doc["comparisons"]]
    for number, (configs, compared) in enumerate(comparisons):
        for name, row in compared["scenarios"].items():
            real = row["real"]
            if all(isinstance(real.get(k), (int, float)) and math.isfinite(real[k]) and real[k] > 0
                   for k in ("p95_s", "throughput_eps", "offered_eps")):
                point = Measurement(configs[name], compared["rate_eps"], real["p95_s"], real["throughput_eps"])
                out.append(SavedRun(name, number, point, real_keeps_up(real)))
    if not out:
        raise ValueError("the documents hold no real run with a finite P95, throughput and offered rate")
    return out


def fit_scenarios(docs: Sequence[Mapping], base: Calibration, *, max_evals: int = 80,
                  predict: Predictor | None = None) -> tuple[FitResult, list[ScenarioError]]:
    """Fit SCENARIO_COEFFICIENTS of `base` to the documents' real runs; each run's figures before and after."""
    if not TOPOLOGIES[base.topology].passes(SPARK_SINK):
        raise ValueError(f"calibration {base.name!r} has no Spark stage (topology {base.topology!r}; the paper's and "
                         "filebeat-kafka-spark's have)")
    windows = {(float(doc["duration_s"]), float(doc["warmup_s"])) for doc in docs}
    if len(windows) != 1:
        raise ValueError("the documents ran windows of different lengths (" + ", ".join(
            f"{d:g} s after {w:g} s" for d, w in sorted(windows)) + "): fit them apart")
    runs = saved_runs(docs)
    ((duration_s, warmup_s),) = windows
    predict = predict or twin_predictor(duration_s, warmup_s)
    result = fit([r.measurement for r in runs], base, predict, SCENARIO_COEFFICIENTS, max_evals=max_evals)

    def predicted(calibration: Calibration, run: SavedRun) -> tuple[float, bool]:
        p95_s, throughput_eps = predict(calibration, run.measurement.config, run.measurement.rate_eps)
        return p95_s, keeps_up(throughput_eps, run.measurement.rate_eps)

    errors = []
    for run in runs:
        (base_p95_s, base_keeps_up), (fitted_p95_s, fitted_keeps_up) = (predicted(base, run),
                                                                        predicted(result.calibration, run))
        errors.append(ScenarioError(run, base_p95_s, fitted_p95_s, base_keeps_up, fitted_keeps_up))
    return result, errors


def agreements(errors: Sequence[ScenarioError], fitted: bool = True) -> list[Agreement]:
    """Per comparison, the real runs' winners and fallen behind beside the twin's (fitted, or before the fit)."""
    out = []
    for comparison in sorted({e.run.comparison for e in errors}):
        rows = [e for e in errors if e.run.comparison == comparison]
        real = {e.run.scenario: {"p95_s": e.run.measurement.p95_s} for e in rows}
        twin = {e.run.scenario: {"p95_s": e.fitted_p95_s if fitted else e.base_p95_s} for e in rows}
        real_up = {e.run.scenario: e.run.keeps_up for e in rows}
        twin_up = {e.run.scenario: e.fitted_keeps_up if fitted else e.base_keeps_up for e in rows}
        out.append(Agreement(rows[0].run.measurement.rate_eps, winners(real, real_up), winners(twin, twin_up),
                             sorted(n for n, up in real_up.items() if not up),
                             sorted(n for n, up in twin_up.items() if not up)))
    return out


def median_abs(errors: list[float]) -> float:
    finite = [abs(e) for e in errors if math.isfinite(e)]
    return float(np.median(finite)) if finite else math.nan
