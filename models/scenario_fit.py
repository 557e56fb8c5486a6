"""The twin's Spark stage fitted to the paper scenarios' real runs (a saved `pipetune scenarios --pipeline --json`
document): its per-batch commit cost and CPU, searched by `models.twin.fit` (bounded Powell over log10) so that the
twin's P95 and throughput of each run's config, as the agents applied it, at its rate come closest to the real window's;
with the twin's P95 error per scenario and rate before and after."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from models.components import SPARK_SINK, TOPOLOGIES
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


@dataclass(frozen=True)
class ScenarioError:
    """One real run against the twin before and after the fit: P95 s, and (twin - real) / real."""

    scenario: str
    rate_eps: float
    real_p95_s: float
    base_p95_s: float
    fitted_p95_s: float

    @property
    def base_error(self) -> float:
        return (self.base_p95_s - self.real_p95_s) / self.real_p95_s

    @property
    def fitted_error(self) -> float:
        return (self.fitted_p95_s - self.real_p95_s) / self.real_p95_s


def applied_configs(doc: Mapping) -> dict[str, Config]:
    """Each scenario's config as the real pipeline ran it, from the document's `scenarios` section."""
    try:
        return {name: PIPELINE_SPACE.config({**s["applied"], **{k: v[1] for k, v in s["moved"].items()}})
                for name, s in doc["scenarios"].items()}
    except KeyError as err:
        raise ValueError(f"the document has no {err} (saved by `pipetune scenarios --pipeline --json`?)") from None


def measurements(doc: Mapping) -> list[tuple[str, Measurement]]:
    """(scenario, its real run) for every scenario at every rate of the document whose figures are finite."""
    configs = applied_configs(doc)
    out = []
    for comparison in doc["comparisons"]:
        for name, row in comparison["scenarios"].items():
            real = row["real"]
            if all(isinstance(real.get(k), (int, float)) and math.isfinite(real[k]) and real[k] > 0
                   for k in ("p95_s", "throughput_eps")):
                out.append((name, Measurement(configs[name], comparison["rate_eps"], real["p95_s"],
                                              real["throughput_eps"])))
    if not out:
        raise ValueError("the document holds no real run with a finite P95 and throughput")
    return out


def fit_spark(doc: Mapping, base: Calibration, *, max_evals: int = 40,
              predict: Predictor | None = None) -> tuple[FitResult, list[ScenarioError]]:
    """Fit the Spark stage's coefficients of `base` to the document's real runs; each run's error before and after."""
    if not TOPOLOGIES[base.topology].passes(SPARK_SINK):
        raise ValueError(f"calibration {base.name!r} has no Spark stage (topology {base.topology!r}; the paper's and "
                         "filebeat-kafka-spark's have)")
    points = measurements(doc)
    predict = predict or twin_predictor(float(doc["duration_s"]), float(doc["warmup_s"]))
    result = fit([m for _, m in points], base, predict, SPARK_COEFFICIENTS, max_evals=max_evals)
    errors = [ScenarioError(name, m.rate_eps, m.p95_s, predict(base, m.config, m.rate_eps)[0],
                            predict(result.calibration, m.config, m.rate_eps)[0]) for name, m in points]
    return result, errors


def median_abs(errors: list[float]) -> float:
    finite = [abs(e) for e in errors if math.isfinite(e)]
    return float(np.median(finite)) if finite else math.nan
