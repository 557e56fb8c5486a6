"""Fit a few of the twin's cost coefficients to measurements of the real pipeline.

Pure maths: given measured (config, rate, P95, throughput) points and a base `Calibration`, find the
coefficients (bounded, searched in log space) whose twin predictions minimise the absolute log error
of P95 plus that of throughput. The twin is seeded, so the objective is deterministic. Absolute, not
squared: a real window near a config's capacity has outliers (the paper testbed's Zero-Wait at 1,000 ev/s
read a P95 of 5.7 s in one session, 14.0 s in another), and squared they set the fit for every other run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy.optimize import minimize

from models.space import Config
from models.twin.calibration import Calibration
from models.twin.twin import Twin, steady_arrivals


@dataclass(frozen=True)
class Measurement:
    """One steady-rate run: what was offered and what the pipeline did."""

    config: Config
    rate_eps: float
    p95_s: float
    throughput_eps: float


@dataclass(frozen=True)
class Coefficient:
    """A fitted coefficient: a `Calibration.scaled` key and its bounds (same unit as the field)."""

    key: str
    low: float
    high: float


# The ones that move P95 and capacity on the filebeat-kafka topology: reading, per-request
# encoding, the loopback round trip and the consumer's per-record work.
DEFAULT_COEFFICIENTS: tuple[Coefficient, ...] = (
    Coefficient("filebeat__cpu_per_event_s", 1e-6, 3e-4),
    Coefficient("filebeat__cpu_per_batch_s", 1e-5, 5e-3),
    Coefficient("network__rtt_s", 2e-5, 5e-3),
    Coefficient("consumer__cpu_per_record_s", 1e-6, 2e-4),
)

Predictor = Callable[[Calibration, Config, float], tuple[float, float]]


def twin_predictor(duration_s: float, warmup_s: float, seed: int = 1) -> Predictor:
    """Predicts (P95 s, throughput ev/s) as a live run measures them: P95 of the events that arrive
    after the warm-up (the tail drains for 10 s), throughput over the replay after the warm-up."""

    def predict(calibration: Calibration, config: Config, rate_eps: float) -> tuple[float, float]:
        twin = Twin(config, steady_arrivals(rate_eps, duration_s), calibration, seed=seed)
        twin.run_until(duration_s + 10.0)
        p95_s = twin.observe(warmup_s, duration_s + 10.0).p95_s
        return p95_s, twin.observe(warmup_s, duration_s).throughput_eps

    return predict


def log_error(predicted: float, measured: float) -> float:
    """|ln(predicted / measured)|, finite even for a zero or missing prediction."""
    floor = 1e-4
    p = predicted if math.isfinite(predicted) else 1e3
    return abs(math.log(max(p, floor) / max(measured, floor)))


def loss(calibration: Calibration, measurements: Sequence[Measurement], predict: Predictor) -> float:
    """Mean absolute log error of P95 plus that of throughput over the measurements."""
    total = 0.0
    for m in measurements:
        p95_s, throughput_eps = predict(calibration, m.config, m.rate_eps)
        total += log_error(p95_s, m.p95_s) + log_error(throughput_eps, m.throughput_eps)
    return total / len(measurements)


@dataclass(frozen=True)
class FitResult:
    calibration: Calibration
    values: dict[str, float]
    loss: float
    evaluations: int


def fit(measurements: Sequence[Measurement], base: Calibration, predict: Predictor,
        coefficients: Sequence[Coefficient] = DEFAULT_COEFFICIENTS, *, max_evals: int = 80) -> FitResult:
    """Bounded Powell search over log10 of `coefficients`, starting from `base` (clipped into bounds)."""
    if not measurements:
        raise ValueError("fit needs at least one measurement")
    low = np.log10([c.low for c in coefficients])
    high = np.log10([c.high for c in coefficients])

    def calibrated(x: np.ndarray) -> Calibration:
        return base.scaled(**{c.key: float(10 ** v) for c, v in zip(coefficients, x)})

    start = np.clip(np.log10([_field(base, c.key) for c in coefficients]), low, high)
    result = minimize(lambda x: loss(calibrated(x), measurements, predict), start, method="Powell",
                      bounds=list(zip(low, high)), options={"maxfev": max_evals, "xtol": 0.02, "ftol": 1e-3})
    values = {c.key: float(10 ** v) for c, v in zip(coefficients, result.x)}
    return FitResult(calibrated(result.x), values, float(result.fun), int(result.nfev))


def _field(calibration: Calibration, key: str) -> float:
    section, name = key.split("__", 1)
    return float(getattr(getattr(calibration, section), name))
