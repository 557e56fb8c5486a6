"""Record the twin's observations on a fixed set of cases, to check a speed-up changes none of them.

Run from the repo root: `python docs/evidence/bench/twin-speed-run2/record.py OUT.json`, then
`python docs/evidence/bench/twin-speed-run2/record.py --compare BEFORE.json AFTER.json`.
Cases: both calibrations x presets baseline/hybrid/zero-wait and a tuned small-batch config
(defaults with flush.min_events 2, flush.timeout 1.6e-5) and the live run's incumbent (that plus a
1 ms backoff) x 300/3000/6900 ev/s; 15 s of Poisson load
plus 5 s of drain, seeded. Per case: P95, P50, mean, events out, per-stage means, and wall seconds.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from models.presets import preset
from models.space import PIPELINE_SPACE
from models.twin import Twin, load

LOAD_S, DRAIN_S = 15.0, 5.0
TUNED = {"filebeat.queue.mem.flush.min_events": 2, "filebeat.queue.mem.flush.timeout": 1.6e-5}
# the live run's incumbent (docs/evidence/live/state/incumbent.json): the same flush settings with a
# 1 ms harvester backoff, so Filebeat reads a few lines per poll and sends each on its own
LIVE_INCUMBENT = {**TUNED, "filebeat.scan_frequency": 0.079983, "filebeat.backoff": 0.001001,
                  "filebeat.max_backoff": 0.008277, "filebeat.output.bulk_max_size": 1742,
                  "kafka.consumer.fetch.max.wait.ms": 299.66295}


def configs():
    for name in ("baseline", "hybrid", "zero-wait"):
        yield name, preset(name)
    yield "tuned", PIPELINE_SPACE.config(TUNED, base=preset("defaults"))
    yield "live-incumbent", PIPELINE_SPACE.config(LIVE_INCUMBENT, base=preset("defaults"))


def record() -> dict:
    out = {}
    for cal_name in ("paper-2vcpu", "local-filebeat-kafka"):
        cal = load(cal_name)
        for name, cfg in configs():
            for rate in (300, 3000, 6900):
                rng = np.random.default_rng(7)
                arrivals = np.sort(rng.uniform(0.0, LOAD_S, rng.poisson(rate * LOAD_S)))
                started = time.perf_counter()
                twin = Twin(cfg, arrivals, cal, seed=3, multiline=name != "zero-wait")
                twin.run_until(LOAD_S + DRAIN_S)
                obs = twin.observe(0.0, LOAD_S + DRAIN_S)
                wall = time.perf_counter() - started
                key = f"{cal_name}/{name}/{rate}"
                out[key] = {"p95_s": obs.p95_s, "p50_s": obs.p50_s, "mean_s": obs.mean_s,
                            "events_out": obs.events_out, "stage_mean_s": obs.stage_mean_s, "wall_s": wall}
                print(f"{key:40s} p95 {obs.p95_s:.6f} out {obs.events_out:6d} wall {wall:6.2f} s", flush=True)
    return out


def compare(before_path: str, after_path: str) -> int:
    before, after = (json.load(open(p)) for p in (before_path, after_path))
    worst = 0.0
    print(f"{'case':40s} {'wall before':>11s} {'after':>7s}  max rel diff")
    for key, b in before.items():
        a = after[key]
        diffs = [abs(a[f] - b[f]) / max(abs(b[f]), 1e-12) for f in ("p95_s", "p50_s", "mean_s", "events_out")]
        diffs += [abs(a["stage_mean_s"][s] - v) / max(abs(v), 1e-12) for s, v in b["stage_mean_s"].items()]
        worst = max(worst, max(diffs))
        print(f"{key:40s} {b['wall_s']:10.2f}s {a['wall_s']:6.2f}s  {max(diffs):.2e}")
    print(f"worst relative difference: {worst:.2e}")
    return 0 if worst <= 0.01 else 1


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    json.dump(record(), open(sys.argv[1], "w"), indent=1)
