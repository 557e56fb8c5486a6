import sys, numpy as np
import models.bayes as B
from bench.convergence import drive, convergence
from replay.profiles import WorkloadSpec
from models.learning import Context
from models.presets import preset
rate = float(sys.argv[1]); seed = int(sys.argv[2]); windows = int(sys.argv[3]) if len(sys.argv) > 3 else 30
probes = {"bo.01": {"filebeat.backoff": 0.01}, "bo.3": {"filebeat.backoff": 0.3}, "fme31": {"filebeat.queue.mem.flush.min_events": 31},
          "ft.01": {"filebeat.queue.mem.flush.timeout": 0.01}, "bo+fme": {"filebeat.backoff": 0.01, "filebeat.queue.mem.flush.min_events": 31}}
orig = B.SafeBayesLearner.suggest
def suggest(self, context):
    s = orig(self, context)
    if self.history.configs:
        inc = context.incumbent or self.start
        rows = []
        X = np.array([self._features({**inc, **p}, context) for p in probes.values()] + [self._features(inc, context)])
        mean, opt, mm, ms = self._score_chunk(X)
        ls = self._margin_gp._gp.kernel_
        out = " ".join(f"{k}:lcb{mm[i]-2*ms[i]:+.3f}(m{mm[i]:+.3f},s{ms[i]:.3f}) p{mean[i]:.2f}/o{opt[i]:.2f}" for i, k in enumerate(list(probes) + ["inc"]))
        print("   PROBE", out, flush=True)
        print("   KERNEL", ls, flush=True)
    return s
B.SafeBayesLearner.suggest = suggest
def show(d):
    o = d.observed
    print(f"{d.window:3d} p95={o['p95_s']:.3f} r={o.get('throughput_ratio') or 0:.3f} {d.action}{'*' if d.change else ''} {d.reason[:150]} {d.change}", flush=True)
run = drive("paper-2vcpu", WorkloadSpec("steady", rate, seed=seed), windows, 30.0, seed, show)
print("final", run["final_p95_s"])
