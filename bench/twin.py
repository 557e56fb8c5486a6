"""Twin speed: simulated seconds per wall second at 300, 3000 and 30000 ev/s.

Run: `python -m bench.twin [--json PATH] [--presets baseline,hybrid,zero-wait,small-batches]
[--calibration paper-2vcpu] [--rates 300,3000,30000]`. Each figure runs a Poisson load through the
twin in one process and divides the simulated time (load plus a 20 s drain) by the wall time. At 3000
and 30000 ev/s the paper's node is overloaded in most presets, so the twin simulates a pipeline running
flat out with backpressure to the log file; that is the realistic case.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.result import BenchResult
from models.presets import preset
from models.space import PIPELINE_SPACE, Config
from models.twin import Twin, load

RATES_EPS = (300, 3000, 30000)
DRAIN_S = 20.0
# the learner's small-batch filebeat-kafka config (the live run's incumbent, rounded): every event its
# own flush buffer, read a few lines per 1 ms poll, so each request carries one or two events
SMALL_BATCHES = {"filebeat.queue.mem.flush.min_events": 2, "filebeat.queue.mem.flush.timeout": 1.6e-5,
                 "filebeat.backoff": 0.001, "filebeat.max_backoff": 0.008}


def config_named(name: str) -> Config:
    """A preset, or `small-batches`."""
    return PIPELINE_SPACE.config(SMALL_BATCHES, base=preset("defaults")) if name == "small-batches" else preset(name)


def speed(preset_name: str, rate_eps: float, duration_s: float, seed: int = 0, calibration: str = "paper-2vcpu"
          ) -> float:
    """Simulated seconds per wall second for one run."""
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.uniform(0.0, duration_s, rng.poisson(rate_eps * duration_s)))
    started = time.perf_counter()
    twin = Twin(config_named(preset_name), arrivals, load(calibration), seed=seed, multiline=preset_name != "zero-wait")
    twin.run_until(duration_s + DRAIN_S)
    twin.observe(0.0, duration_s + DRAIN_S)
    return (duration_s + DRAIN_S) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="baseline,hybrid,zero-wait", help="presets, or small-batches")
    parser.add_argument("--duration", type=float, default=180.0, help="seconds of load per run")
    parser.add_argument("--calibration", default="paper-2vcpu")
    parser.add_argument("--rates", default=",".join(str(r) for r in RATES_EPS), help="offered loads, ev/s")
    parser.add_argument("--json", type=Path, help="also write the result (bench/result.py) here")
    args = parser.parse_args()
    result = BenchResult.start("bench.twin")
    names = [n.strip() for n in args.presets.split(",") if n.strip()]
    rates = [float(r) for r in args.rates.split(",")]
    figures = {name: {f"{rate:g}": speed(name, rate, args.duration, calibration=args.calibration) for rate in rates}
               for name in names}
    table = Table(title=f"twin ({args.calibration}): simulated s per wall s ({args.duration:g} s load + "
                        f"{DRAIN_S:g} s drain, one process)")
    table.add_column("preset")
    for rate in rates:
        table.add_column(f"{rate:g} ev/s", justify="right")
    for name, row in figures.items():
        table.add_row(name, *(f"{row[f'{rate:g}']:,.0f}x" for rate in rates))
    Console().print(table)
    if args.json:
        rows = [{"preset": name} | {f"{rate} ev/s, simulated s per wall s": speed for rate, speed in row.items()}
                for name, row in figures.items()]
        result.finish(rows, {"calibration": args.calibration, "by_preset": figures}).write(args.json)


if __name__ == "__main__":
    main()
