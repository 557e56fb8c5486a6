"""What `pipetune calibrate` measures on the testbed: a small design of low-latency configs, each run at a
few steady rates, and the calibration file the fit is written to."""

from __future__ import annotations

from dataclasses import asdict
from typing import Callable, Sequence

import yaml

from models.presets import preset
from models.space import PIPELINE_SPACE, Config, Value
from models.twin import Calibration
from models.twin.fit import Measurement
from testbed.harness import measure_live, prime
from testbed.pipeline import PipelineSpec

# The low-latency corner (testbed/configs/low-latency.yaml) and one-change variants of it: each moves
# one coefficient's share of P95 (per-event reading, per-request cost, round trips, consumer work).
# No preset is among them, so the presets stay out-of-sample for bench/calibration.py.
LOW_LATENCY: dict[str, Value] = {"filebeat.backoff": 0.01, "filebeat.max_backoff": 0.05,
                                 "filebeat.queue.mem.flush.min_events": 0, "filebeat.queue.mem.flush.timeout": 0.0,
                                 "kafka.consumer.fetch.max.wait.ms": 10}
DESIGN: dict[str, dict[str, Value]] = {
    "low-latency": LOW_LATENCY,
    "ll-bulk50": {**LOW_LATENCY, "filebeat.output.bulk_max_size": 50},
    "ll-flush100ms": {**LOW_LATENCY, "filebeat.queue.mem.flush.min_events": 4096,
                      "filebeat.queue.mem.flush.timeout": 0.1},
    "ll-backoff250ms": {**LOW_LATENCY, "filebeat.backoff": 0.25, "filebeat.max_backoff": 0.25},
    "ll-sync": {**LOW_LATENCY, "filebeat.output.pipelining": 0, "filebeat.output.bulk_max_size": 200},
}


def design_config(changes: dict[str, Value]) -> Config:
    return PIPELINE_SPACE.config(changes, base=preset("defaults"))


def run_design(spec: PipelineSpec, names: Sequence[str], rates_eps: Sequence[float], duration_s: float,
               warmup_s: float, on_measured: Callable[[str, Measurement], None]) -> list[Measurement]:
    """Measure each named design config at each rate on the running testbed, reporting each as it lands."""
    prime(spec, design_config(DESIGN[names[0]]))
    measurements = []
    for name in names:
        for rate_eps in rates_eps:
            measurement = measure_live(spec, design_config(DESIGN[name]), rate_eps, duration_s, warmup_s)
            on_measured(name, measurement)
            measurements.append(measurement)
    return measurements


def calibration_yaml(calibration: Calibration, fitted: dict[str, float], points: int, loss: float) -> str:
    """The calibration as YAML shaped like `models/calibrations/*.yaml`, with a header naming the fit."""
    header = "".join(f"#   {key.replace('__', '.')} = {value:.4g}\n" for key, value in fitted.items())
    return (f"# Fitted to {points} real runs (`pipetune calibrate` or `scenarios --fit`; mean absolute log error of "
            f"P95 plus throughput {loss:.3f}):\n"
            f"{header}# every other value is the base calibration's.\n"
            + yaml.safe_dump(asdict(calibration), sort_keys=False))
