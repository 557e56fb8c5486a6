import sys, numpy as np
from bench.tuners import misjudged
from controller.daemon import Daemon
from controller.tuning_run import LearnerSetup, tuning_learner, twin_pipeline
from models.policy import Policy
from models.presets import preset
from models.twin import load
from models.learning import Context
from replay.profiles import WorkloadSpec, Profile
seed, upto = int(sys.argv[1]), int(sys.argv[2])
cal = load("paper-2vcpu"); policy, start = Policy(), preset("defaults")
setup = LearnerSetup("pipetune", policy, start, cal.topology, seed, screen=misjudged(cal, seed))
learner = tuning_learner(setup, remote=False)
pipeline = twin_pipeline(start, cal, WorkloadSpec(Profile("steady"), 300.0, seed=seed), upto, 30.0)
daemon = Daemon(pipeline, learner, policy, window_s=30.0)
decs = []
daemon.run(upto, on_decision=decs.append)
h = learner.history
inc = daemon.incumbent.config
ctx = Context(offered_eps=300.0, incumbent=inc)
for i, (c, v) in enumerate(zip(h.configs, h.stage_log_p95)):
    f = learner._features(c, ctx)[None, :]
    pred = {s: float(learner._stage_p95(s, f, [0.0], c)[0][0]) for s in learner._stage_gps}
    meas = {k: float(np.exp(x)) for k, x in v.items()}
    print(i, "inc" if c == inc else "   ", f"e2e {h.p95_s[i]:.3f} sum {sum(meas.values()):.3f} pred {sum(pred.values()):.3f} |",
          " ".join(f"{k[:8]} {meas[k]:.3f}/{pred[k]:.3f}" for k in meas))
