"""The strategies beside pipetune's learner."""

import math

import numpy as np

from models.baselines import OptunaTpe
from models.learning import Context, TunedCube
from models.observation import Observation
from models.policy import Policy
from models.space import PIPELINE_SPACE
from models.verdict import judge

NAMES = ("filebeat.scan_frequency", "logstash.pipeline.batch.delay", "filebeat.queue.mem.flush.timeout")


def _window(p95_s: float) -> Observation:
    return Observation(duration_s=30, offered_eps=300, throughput_eps=300, p50_s=p95_s / 2, p95_s=p95_s,
                       p99_s=p95_s * 1.2, mean_s=p95_s / 2)


def test_a_long_running_optuna_study_stays_bounded_and_keeps_its_best_trial():
    # A daemon on `--strategy optuna-tpe` runs for months: every window used to stay in the study for good.
    policy = Policy()
    cube = TunedCube(NAMES, policy)
    learner = OptunaTpe(cube, PIPELINE_SPACE.defaults(), seed=0, history_recent=10, history_best=3)
    rng = np.random.default_rng(0)
    told = []
    for _ in range(80):
        config = learner.suggest(Context(300.0)).config
        observation = _window(float(rng.uniform(0.5, 2.0)))
        learner.tell(config, Context(300.0), observation, judge(observation, policy, config))
        told.append(math.log(observation.p95_s))
        assert len(learner.study.trials) <= 2 * (10 + 3)
    assert min(t.value for t in learner.study.trials) == min(told)
