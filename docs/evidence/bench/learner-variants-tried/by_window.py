"""One paper-2vcpu steady run of pipetune (as bench.convergence drives it), then every measured window: its config's
tuned values (`configs`), or its stages' measured / predicted P95 and whether it is the final incumbent (`stages`).

    python by_window.py configs|stages SEED WINDOWS
"""
import sys

import numpy as np

from bench.tuners import misjudged
from controller.daemon import Daemon
from controller.tuning_run import LearnerSetup, tuning_learner, twin_pipeline
from models.learning import Context
from models.policy import Policy
from models.presets import preset
from models.twin import load
from replay.profiles import Profile, WorkloadSpec

view, seed, windows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cal, policy, start = load("paper-2vcpu"), Policy(), preset("defaults")
learner = tuning_learner(LearnerSetup("pipetune", policy, start, cal.topology, seed, screen=misjudged(cal, seed)),
                         remote=False)
pipeline = twin_pipeline(start, cal, WorkloadSpec(Profile("steady"), 300.0, seed=seed), windows, 30.0)
daemon = Daemon(pipeline, learner, policy, window_s=30.0)
daemon.run(windows)
h = learner.history
if view == "configs":
    names = learner.cube.names
    print(" ".join(n.split(".")[-1][:9] for n in names))
    for i, (c, p) in enumerate(zip(h.configs, h.p95_s)):
        print(i, f"{p:.3f}", " ".join(c[n] if isinstance(c[n], str) else f"{float(c[n]):.4g}" for n in names))
else:
    inc = daemon.incumbent.config
    ctx = Context(offered_eps=300.0, incumbent=inc)
    for i, (c, v) in enumerate(zip(h.configs, h.stage_log_p95)):
        f = learner._features(c, ctx)[None, :]
        pred = {s: float(learner._stage_p95(s, f, [0.0], c)[0][0]) for s in learner._stage_gps}
        meas = {k: float(np.exp(x)) for k, x in v.items()}
        print(i, "inc" if c == inc else "   ",
              f"e2e {h.p95_s[i]:.3f} sum {sum(meas.values()):.3f} pred {sum(pred.values()):.3f} |",
              " ".join(f"{k[:8]} {meas[k]:.3f}/{pred[k]:.3f}" for k in meas))
