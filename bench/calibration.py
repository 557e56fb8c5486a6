"""The twin against reality: twin-predicted vs measured P95 and throughput on configs the fit never saw.

Measures each check config at each rate on the running testbed (`pipetune testbed up`), predicts the
same runs with the twin under a calibration (normally one `pipetune calibrate` wrote), and prints a
row per run with its errors, then the median P95 error (goal <= 25 %) and the Spearman rank
correlation of predicted vs measured P95 (goal >= 0.8).

    python -m bench.calibration --calibration FITTED.yaml [--pipeline FILE] [--rates 1000,5000]
                                [--duration 30] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from scipy.stats import spearmanr

from bench.live import in_components_order
from bench.result import BenchResult
from models.space import Config, Value
from models.twin import load
from models.twin.fit import twin_predictor
from testbed.calibration_design import LOW_LATENCY, design_config
from testbed.harness import measure_live, prime
from testbed.pipeline import DEFAULT_PIPELINE, load_pipeline

# Presets and low-latency corners, none of them in testbed/calibration_design.DESIGN.
CORNERS: dict[str, dict[str, Value]] = {
    "ll-fast-poll": {**LOW_LATENCY, "filebeat.backoff": 0.002, "filebeat.max_backoff": 0.01,
                     "kafka.consumer.fetch.max.wait.ms": 1},
    "ll-2-workers": {**LOW_LATENCY, "filebeat.output.worker": 2, "filebeat.output.bulk_max_size": 500},
    "ll-flush10ms": {**LOW_LATENCY, "filebeat.queue.mem.flush.min_events": 512,
                     "filebeat.queue.mem.flush.timeout": 0.01},
    "ll-fetch50ms": {**LOW_LATENCY, "kafka.consumer.fetch.max.wait.ms": 50, "kafka.consumer.fetch.min.bytes": 65536},
}
PRESET_NAMES = ("defaults", "hybrid", "latency", "balanced", "throughput")


def check_configs() -> dict[str, Config]:
    """The presets as an agent takes them (the paper's Hybrid with its backoffs lowered to its scan_frequency:
    as written, the agent refuses it and the run stopped there), and the low-latency corners."""
    return {**{name: in_components_order(name)[0] for name in PRESET_NAMES},
            **{name: design_config(changes) for name, changes in CORNERS.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", required=True, help="calibration name or YAML file (pipetune calibrate --out)")
    parser.add_argument("--pipeline", type=Path, default=DEFAULT_PIPELINE)
    parser.add_argument("--rates", default="1000,5000")
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--json", type=Path, help="write the result (bench/result.py), every row, here")
    args = parser.parse_args()
    result = BenchResult.start("bench.calibration")
    calibration = load(args.calibration)
    spec = load_pipeline(args.pipeline)
    rates = [float(r) for r in args.rates.split(",")]
    predict = twin_predictor(args.duration, args.warmup)
    configs = check_configs()
    prime(spec, next(iter(configs.values())))
    rows = []
    print(f"{'config':>14} {'rate':>6} | {'P95 meas':>9} {'P95 twin':>9} {'err':>6} | "
          f"{'thr meas':>8} {'thr twin':>8} {'err':>6}", flush=True)
    for name, config in configs.items():
        for rate in rates:
            measured = measure_live(spec, config, rate, args.duration, args.warmup)
            p95_s, throughput_eps = predict(calibration, config, rate)
            row = {"config": name, "rate_eps": rate, "p95_measured_s": measured.p95_s, "p95_twin_s": p95_s,
                   "p95_error": abs(p95_s - measured.p95_s) / measured.p95_s,
                   "throughput_measured_eps": measured.throughput_eps, "throughput_twin_eps": throughput_eps,
                   "throughput_error": abs(throughput_eps - measured.throughput_eps) / measured.throughput_eps}
            rows.append(row)
            print(f"{name:>14} {rate:>6g} | {measured.p95_s:>9.4g} {p95_s:>9.4g} {row['p95_error']:>6.0%} | "
                  f"{measured.throughput_eps:>8.5g} {throughput_eps:>8.5g} {row['throughput_error']:>6.1%}", flush=True)
    median_p95 = statistics.median(r["p95_error"] for r in rows)
    rho = float(spearmanr([r["p95_measured_s"] for r in rows], [r["p95_twin_s"] for r in rows]).statistic)
    print(f"median P95 error {median_p95:.0%} (goal <= 25 %), Spearman rho {rho:.2f} (goal >= 0.8), "
          f"median throughput error {statistics.median(r['throughput_error'] for r in rows):.1%}")
    if args.json:
        result.finish(rows, {"calibration": args.calibration, "median_p95_error": median_p95,
                             "spearman_p95": rho}).write(args.json)


if __name__ == "__main__":
    main()
