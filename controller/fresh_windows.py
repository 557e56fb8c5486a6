"""Measuring a config on fresh windows of the twin: the yardstick that compares a tuning run's final
config with the defaults and the paper's Hybrid, away from the run's own history."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.pipelines import TwinPipeline
from models.space import Config
from models.twin import Calibration
from replay.profiles import Profile, WorkloadSpec, build_schedule

# Arrivals go on past the last window, so that no window sees the load stop before it ends.
SPARE_LOAD_S = 60.0


@dataclass(frozen=True)
class FreshMeasurement:
    """A config measured on its own fresh twin run (after a warm-up window), and what it cost there."""

    p95_s: float
    throughput_ratio: float
    p50_s: float
    cpu_cores: dict[str, float] = field(default_factory=dict)  # CPU seconds per second by part
    produce_requests_per_s: float | None = None  # Produce requests into Kafka

    def to_dict(self) -> dict:
        return {"p95_s": self.p95_s, "throughput_ratio": self.throughput_ratio, "p50_s": self.p50_s,
                "cpu_cores": self.cpu_cores, "produce_requests_per_s": self.produce_requests_per_s}


def measure_fresh(config: Config, calibration: Calibration, rate_eps: float, window_s: float, *, windows: int = 3,
                  seed: int = 1000) -> FreshMeasurement:
    """P95 and throughput of `config` at a steady `rate_eps`, over `windows` windows after one warm-up."""
    total_s = (windows + 1) * window_s
    load = build_schedule(WorkloadSpec(Profile.steady, rate_eps, total_s + SPARE_LOAD_S, seed)).schedule
    pipeline = TwinPipeline(config, load.times_s, calibration, seed=seed)
    pipeline.observe(window_s)
    observation = pipeline.observe(windows * window_s)
    return FreshMeasurement(observation.p95_s, observation.throughput_ratio, observation.p50_s, observation.cpu_cores,
                            observation.produce_requests_per_s)
