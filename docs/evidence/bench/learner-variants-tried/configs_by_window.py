import sys
from bench.tuners import misjudged
from controller.daemon import Daemon
from controller.tuning_run import LearnerSetup, tuning_learner, twin_pipeline
from models.policy import Policy
from models.presets import preset
from models.twin import load
from replay.profiles import WorkloadSpec, Profile
cal_name, seed, upto = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cal = load(cal_name); policy, start = Policy(), preset("defaults")
setup = LearnerSetup("pipetune", policy, start, cal.topology, seed, screen=misjudged(cal, seed))
learner = tuning_learner(setup, remote=False)
pipeline = twin_pipeline(start, cal, WorkloadSpec(Profile("steady"), 300.0, seed=seed), upto, 30.0)
daemon = Daemon(pipeline, learner, policy, window_s=30.0)
decs = []
daemon.run(upto, on_decision=decs.append)
names = learner.cube.names
print(" ".join(n.split(".")[-1][:9] for n in names))
h = learner.history
for i, (c, p) in enumerate(zip(h.configs, h.p95_s)):
    print(i, f"{p:.3f}", " ".join(f"{float(c[n]):.4g}" if not isinstance(c[n], str) else c[n] for n in names))
