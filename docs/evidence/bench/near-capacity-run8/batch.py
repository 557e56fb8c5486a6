import sys, time
from bench.convergence import drive, convergence
from replay.profiles import WorkloadSpec
cal, profile, rate, windows = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
seeds = [int(s) for s in sys.argv[5].split(",")]
verbose = len(sys.argv) > 6
kw = {"period_s": windows * 30.0} if profile == "diurnal" else {}
def show(d):
    o = d.observed
    ch = {k: v for k, v in d.change.items()}
    print(f"{d.window:3d} {o['offered_eps']:6.0f} p95={o['p95_s']:.4f} r={o.get('throughput_ratio') or 0:.3f} {d.action}{'*' if d.change else ''} {'G' if d.guardrail else ''} {d.reason[:260]} {ch}", flush=True)
for seed in seeds:
    t = time.time()
    run = drive(cal, WorkloadSpec(profile, rate, seed=seed, **kw), windows, 30.0, seed, show if verbose else None)
    f = convergence(run["decisions"], run["final_p95_s"])
    g = sum(bool(d.guardrail) for d in run["decisions"])
    print(f"{cal} {profile} {rate:.2f} seed {seed}: final {f['final_p95_s']:.4f} near {f['near_window']} after {f['changes_after_near']} conv {f['first_converged_window']} afterconv {f['changes_after_converged']} changes {f['changes']} guard {g} ({time.time()-t:.0f}s)", flush=True)
