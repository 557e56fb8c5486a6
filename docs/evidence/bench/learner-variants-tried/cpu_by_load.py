from controller.fresh_windows import build_schedule, WorkloadSpec, Profile, SPARE_LOAD_S, TwinPipeline
from models.twin import load
from models.presets import preset
import sys
cal = load(sys.argv[1])
print(cal.node)
for name in ("defaults",):
    for rate in [float(r) for r in sys.argv[2:]]:
        cfg = preset(name)
        sched = build_schedule(WorkloadSpec(Profile.steady, rate, 60 + SPARE_LOAD_S, 1)).schedule
        p = TwinPipeline(cfg, sched.times_s, cal, seed=1)
        p.observe(30.0); o = p.observe(30.0)
        print(name, rate, f"p95 {o.p95_s:.3f} ratio {o.throughput_ratio:.3f}", {k: round(v, 2) for k, v in o.cpu_cores.items()}, round(sum(o.cpu_cores.values()), 2))
