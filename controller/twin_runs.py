"""Workloads for twin runs, and measuring a config on fresh windows of the twin."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controller.pipelines import TwinPipeline
from models.space import Config
from models.twin import Calibration
from replay import arrivals

PROFILES = ("steady", "burst", "flash", "diurnal", "mmpp")


def workload(profile: str, rate_eps: float, duration_s: float, seed: int) -> np.ndarray:
    """Arrival times for a tuning run: the burst sits at 40-55 % of the run, ×2, as in the paper's check."""
    if profile == "steady":
        return arrivals.steady(rate_eps, duration_s, seed=seed).times_s
    if profile == "burst":
        return arrivals.step_burst(rate_eps, duration_s, 0.40 * duration_s, 0.55 * duration_s, 2.0, seed=seed).times_s
    if profile == "flash":
        return arrivals.flash_sale(rate_eps, duration_s, 0.40 * duration_s, 0.55 * duration_s, 5.0, seed=seed).times_s
    if profile == "diurnal":
        return arrivals.diurnal(rate_eps, duration_s, duration_s, 0.5, seed=seed).times_s
    if profile == "mmpp":
        return arrivals.mmpp(rate_eps, duration_s, 2.0, duration_s / 10, duration_s / 40, seed=seed).times_s
    raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")


@dataclass(frozen=True)
class FreshMeasurement:
    """A config measured on its own fresh twin run (after a warm-up window)."""

    p95_s: float
    throughput_ratio: float
    p50_s: float

    def to_dict(self) -> dict:
        return {"p95_s": self.p95_s, "throughput_ratio": self.throughput_ratio, "p50_s": self.p50_s}


def measure_fresh(config: Config, calibration: Calibration, rate_eps: float, window_s: float, *, windows: int = 3,
                  seed: int = 1000) -> FreshMeasurement:
    """P95 and throughput of `config` at a steady `rate_eps`, over `windows` windows after one warm-up."""
    total_s = (windows + 1) * window_s
    pipeline = TwinPipeline(config, arrivals.steady(rate_eps, total_s + 60.0, seed=seed).times_s, calibration,
                            seed=seed)
    pipeline.observe(window_s)
    observation = pipeline.observe(windows * window_s)
    return FreshMeasurement(observation.p95_s, observation.throughput_ratio, observation.p50_s)
