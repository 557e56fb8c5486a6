"""One bench.tuners pipetune run (misjudged screen), traced window by window, with each window's backlog: at
its start (its end less its input plus its output), at its end, and what its config buffers."""
import sys
from controller.daemon import Daemon
from controller.tuning_run import LearnerSetup, tuning_learner, twin_pipeline
from controller.fresh_windows import measure_fresh
from models.policy import Policy
from models.presets import preset
from models.twin import load
from replay.profiles import WorkloadSpec
from bench.tuners import misjudged, capacity_eps

cal_name, workload, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
windows = int(sys.argv[4]) if len(sys.argv) > 4 else 30
window_s = 30.0
cal = load(cal_name)
rate = 0.8 * capacity_eps(cal, window_s) if workload == "near-capacity" else 300.0
profile = "burst" if workload == "burst" else "steady"
import os
policy = Policy(pins={"filebeat.max_backoff": 0.001}) if os.environ.get("PIN_MAXB") else Policy(); start = preset("defaults")
setup = LearnerSetup("pipetune", policy, start, cal.topology, seed, screen=misjudged(cal, seed))
learner = tuning_learner(setup, remote=False)
pipeline = twin_pipeline(start, cal, WorkloadSpec(profile, rate, seed=seed), windows, window_s)
daemon = Daemon(pipeline, learner, policy, window_s=window_s)
prev = dict(start)
def show(d):
    p = d.observed.get("p95_s")
    ch = {k.split(".")[-1] if "." in k else k: v for k, v in d.change.items()}
    print(f"w{d.window:3d} p95={p*1e3 if p else float('nan'):9.1f}ms inc={ (d.incumbent_p95_s or 0)*1e3:8.1f} {d.action.value:8s} {d.reason[:150]}")
    o = d.observed
    if o.get("backlog_events") is not None and o.get("offered_eps"):
        from models.verdict import buffered_events
        short = (o["offered_eps"] - o["throughput_eps"]) * o["duration_s"]
        start_b = o["backlog_events"] - short
        buf = buffered_events(d.config, o["offered_eps"])
        print(f"      ratio={o['throughput_ratio']:.4f} backlog_end={o['backlog_events']:.0f} start={start_b:.0f} buffered={buf:.0f} p50={o['p50_s']*1e3:.1f}ms")
    if d.guardrail:
        print("GUARD", d.guardrail)
    if d.change:
        print("      ", {k: [f"{x:.4g}" if isinstance(x,float) else x for x in v] for k, v in d.change.items()})
daemon.run(windows, on_decision=show)
final = daemon.incumbent.config if daemon.incumbent else pipeline.current()
fresh = measure_fresh(final, cal, rate, window_s, seed=seed + 1000)
print("rate", rate, "final fresh p95", fresh.p95_s, "ratio", fresh.throughput_ratio)
import json; print("FINAL", json.dumps({n: final[n] for n in learner.cube.names}))
l = learner
print("margin kernel", l._margin_gp._gp.kernel_)
print("names", l.cube.names)
import numpy as np
print("margins", np.round(l.history.margin, 3).tolist())
for s, gp in l._stage_gps.items():
    print(s, gp._gp.kernel_)
