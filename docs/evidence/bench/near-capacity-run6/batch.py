import sys, time
from bench.convergence import drive, convergence
from replay.profiles import WorkloadSpec
cal, profile, rate, windows = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
seeds = [int(s) for s in sys.argv[5].split(",")]
kw = {"period_s": windows * 30.0} if profile == "diurnal" else {}
for seed in seeds:
    t = time.time()
    run = drive(cal, WorkloadSpec(profile, rate, seed=seed, **kw), windows, 30.0, seed)
    f = convergence(run["decisions"], run["final_p95_s"])
    print(f"{cal} {profile} {rate:.0f} seed {seed}: final {f['final_p95_s']:.4f} near {f['near_window']} after {f['changes_after_near']} conv {f['first_converged_window']} changes {f['changes']} ({time.time()-t:.0f}s)", flush=True)
