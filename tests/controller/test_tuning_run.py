"""A tuning run assembled once: the twin's workload outlasts the run's windows and their settling."""

import pytest

from controller.daemon import Daemon
from controller.tuning_run import LearnerSetup, tuning_learner, twin_load_s, twin_pipeline
from models.policy import Policy
from models.presets import preset
from models.twin import load
from replay.profiles import Profile, WorkloadSpec


def test_the_twin_load_covers_every_window_twice_over() -> None:
    assert twin_load_s(30, 30.0) > 2 * 30 * 30.0


def test_a_short_run_on_the_twin_goes_to_the_end_with_load_in_every_window() -> None:
    calibration = load("paper-2vcpu")
    policy = Policy()
    setup = LearnerSetup("random", policy, preset("defaults"), calibration.topology, seed=1)
    pipeline = twin_pipeline(preset("defaults"), calibration, WorkloadSpec(Profile.steady, 300.0, seed=1), 3, 10.0)
    daemon = Daemon(pipeline, tuning_learner(setup, remote=False), policy, window_s=10.0)
    decisions = []
    assert daemon.run(3, on_decision=decisions.append) == 3
    assert len(decisions) == 3
    assert all(d.observed["offered_eps"] == pytest.approx(300, rel=0.05) for d in decisions)
