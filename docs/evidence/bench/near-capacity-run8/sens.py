import sys, numpy as np
from bench.tuners import noise_free
from controller.fresh_windows import measure_fresh
from models.learning import TunedCube, tuned_names
from models.policy import Policy
from models.presets import preset
from models.twin import load
cal = load("paper-2vcpu"); rate = 843.2564172389104
cube = TunedCube(tuned_names(Policy(), cal.topology), Policy())
d = preset("defaults"); nf = noise_free(cal)
base = measure_fresh(d, nf, rate, 30.0)
print("defaults", base.p95_s, base.throughput_ratio, flush=True)
u0 = cube.encode(d)
names = tuned_names(Policy(), cal.topology)
print(len(names), names)
for i, n in enumerate(names):
    row = []
    for v in (0.0, 0.25, 0.5, 0.75, 1.0):
        u = u0.copy(); u[i] = v
        c = cube.decode(u, d)
        m = measure_fresh(c, nf, rate, 30.0)
        row.append(f"{c[n]}:{m.p95_s:.2f}/{m.throughput_ratio:.2f}")
    print(n, f"(def {d[n]} u={u0[i]:.2f})", " ".join(row), flush=True)
