"""bench.tuners' oracle, the yardstick every tuner is judged by: the best config it finds is feasible at the rate it
is judged at, and within the CPU budget at the other loads it is told to hold it at."""

import pytest
import ray

import bench.tuners
from bench.tuners import oracle, run_cube
from controller.fresh_windows import FreshMeasurement
from models.latency_bounds import LULL_WAITS
from models.learning import TunedCube, tuned_names
from models.policy import Policy
from models.presets import preset
from models.twin import load

pytestmark = pytest.mark.slow  # Ray


@ray.remote
def _polling(config, calibration, rate_eps: float, window_s: float) -> FreshMeasurement:
    """A Filebeat whose P95 is its scan interval and whose CPU per event grows as the interval shrinks."""
    scan_s = float(config["filebeat.scan_frequency"])
    return FreshMeasurement(scan_s, 1.0, scan_s / 2, {"filebeat": 1e-5 * rate_eps * (1 + 1 / scan_s)})


def test_an_oracle_held_to_the_budget_at_a_crest_gives_up_the_configs_over_it_there(ray_session, monkeypatch):
    # The budget (the defaults' CPU per event at 100 ev/s, +25 %, +0.05 core) lets a 20 ms scan through at 100 ev/s,
    # where its CPU per event is 51x; at 10,000 ev/s a scan under 1.14 s is over it.
    monkeypatch.setattr(bench.tuners, "_fresh", _polling)
    cal = load("local-filebeat-kafka")
    cube = TunedCube(tuned_names(Policy(), cal.topology), Policy())

    def best(*crests: float) -> float:
        return oracle(cube, cal, 100.0, 10.0, samples=16, seed=3, budget_at_eps=crests).p95_s
    base_only = best()
    assert 0.0198 <= base_only < 1.14
    assert best(100.0) == base_only  # the base rate's own budget again: the same configs pass
    assert best(10_000.0) >= 1.14


@ray.remote
def _slower_with_backoff(config, calibration, rate_eps: float, window_s: float) -> FreshMeasurement:
    """A pipeline whose P95 falls as `filebeat.backoff` rises: the best config is the highest backoff allowed."""
    return FreshMeasurement(1.0 / float(config["filebeat.backoff"]), 1.0, 0.1, {"filebeat": 0.01})


def test_the_oracle_stays_under_the_cubes_ceilings_as_every_tuner_does(ray_session, monkeypatch):
    monkeypatch.setattr(bench.tuners, "_fresh", _slower_with_backoff)
    cal = load("local-filebeat-kafka")
    names = tuned_names(Policy(), cal.topology)
    capped = oracle(TunedCube(names, Policy(), ceilings={"filebeat.backoff": 0.5}), cal, 100.0, 10.0, 16, seed=3)
    free = oracle(TunedCube(names, Policy()), cal, 100.0, 10.0, 16, seed=3)
    assert capped.config["filebeat.backoff"] <= 0.5 < free.config["filebeat.backoff"]
    assert capped.p95_s == pytest.approx(1.0 / capped.config["filebeat.backoff"]) and capped.p95_s > free.p95_s
    # the free oracle's best, moved under the ceiling, is the best the ceiling allows
    moved = oracle(TunedCube(names, Policy(), ceilings={"filebeat.backoff": 0.5}), cal, 100.0, 10.0, 16, seed=3,
                   also=[free.config])
    assert moved.config["filebeat.backoff"] == 0.5 and moved.p95_s == pytest.approx(2.0)


def test_a_bench_runs_tuners_under_the_lull_ceilings_of_the_defaults_they_start_on():
    cube = run_cube(Policy(), load("local-filebeat-kafka"))
    held = [n for n in cube.names if n in LULL_WAITS]
    assert held and cube.ceilings == {n: float(preset("defaults")[n]) for n in LULL_WAITS}


def test_the_learners_own_latency_is_timed_on_windows_it_was_told():
    timed = bench.tuners.learner_latency(load("paper-2vcpu"), observations=3, repeats=1)
    assert timed["observations"] == 3 and timed["suggest_s_median"] > 0 and timed["tell_s_median"] > 0
