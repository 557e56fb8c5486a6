"""Best fresh P95 at the load among configs keeping up at load x h on the true twin (random + local search)."""
import sys, json
import numpy as np
from multiprocessing import Pool
from models.twin import load
from models.screen import TwinScreen
from models.presets import preset
from models.learning import TunedCube, tuned_names
from models.policy import Policy
from controller.fresh_windows import measure_fresh
from bench.tuners import capacity_eps, noise_free
cal_name, samples, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
cal = noise_free(load(cal_name))
cube = TunedCube(tuned_names(Policy(), cal.topology), Policy())
base = preset("defaults")
HS = (1.05, 1.1, 1.2)

def evaluate(u):
    c = cube.decode(u, base=base)
    m = measure_fresh(c, cal, rate, 30.0)
    return [m.p95_s, m.throughput_ratio] + [TwinScreen(cal, headroom=h).ratio(c, rate) for h in HS]

def best(rows, pts, h_index):
    ok = [(r[0], i) for i, r in enumerate(rows) if r[1] >= 0.95 and (h_index is None or r[2 + h_index] >= 0.95)]
    return min(ok) if ok else (float("inf"), 0)

rng = np.random.default_rng(0)
pts = [cube.encode(base)] + [rng.uniform(size=cube.dims) for _ in range(samples)]
with Pool(2) as pool:
    rows = pool.map(evaluate, pts)
    for h_index in (None, 0, 1, 2):
        b, i = best(rows, pts, h_index)
        for scale in (0.1, 0.03):
            local = [np.clip(pts[i] + rng.normal(0, scale, cube.dims), 0, 1) for _ in range(samples // 4)]
            lrows = pool.map(evaluate, local)
            pts += local; rows += lrows
            b, i = best(rows, pts, h_index)
        label = "none" if h_index is None else HS[h_index]
        print(f"{cal_name} rate {rate:.0f} headroom {label}: best P95 {b*1e3:.1f} ms",
              json.dumps({n: round(float(v), 4) for n, v in cube.decode(pts[i], base=base).items() if n in cube.names}), flush=True)
