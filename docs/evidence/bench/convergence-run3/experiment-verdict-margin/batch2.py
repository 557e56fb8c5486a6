import sys, time
from bench.convergence import drive, convergence
from replay.profiles import WorkloadSpec
cal, rate, windows = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
for seed in [int(s) for s in sys.argv[4].split(",")]:
    t = time.time()
    run = drive(cal, WorkloadSpec("steady", rate, seed=seed), windows, 30.0, seed)
    f = convergence(run["decisions"], run["final_p95_s"])
    breached = sum(1 for d in run["decisions"] if d.guardrail)
    print(f"{cal} steady {rate} seed {seed}: final {f['final_p95_s']:.4f} conv {f['first_converged_window']} "
          f"changes {f['changes']} breached windows {breached} ({time.time()-t:.0f}s)", flush=True)
