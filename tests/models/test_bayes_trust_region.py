"""The trust region (models.bayes.trust_region): how windows resize it, and the candidates drawn in it."""

import numpy as np

from models.bayes.settings import LearnerSettings
from models.bayes.trust_region import TrustRegion, candidates

S = LearnerSettings()


def test_a_streak_of_improvements_beyond_the_noise_doubles_the_region_up_to_its_largest_side():
    region = TrustRegion(0.8)
    assert not region.update(True, 1.0, 0.01, S)  # the first feasible window is the baseline, not a success
    assert region.successes == 0
    for p95_s in (0.9, 0.8):
        region.update(True, p95_s, 0.01, S)
    assert region.length == 1.6
    for p95_s in (0.7, 0.6):
        region.update(True, p95_s, 0.01, S)
    assert region.length == S.length_max


def test_a_window_within_the_noise_of_the_best_is_no_improvement():
    region = TrustRegion(0.8)
    region.update(True, 1.0, 0.05, S)
    region.update(True, 0.96, 0.05, S)  # 4 % better, but the noise is 5 %
    assert region.successes == 0 and region.failures == 1 and region.best_p95_s == 1.0


def test_a_streak_of_failures_halves_the_region_and_one_infeasible_window_does_at_once():
    region = TrustRegion(0.8)
    region.update(True, 1.0, 0.01, S)  # the baseline
    for _ in range(S.failure_streak):
        region.update(True, 1.0, 0.01, S)
    assert region.length == 0.4 and region.failures == 0
    region.update(False, 0.5, 0.01, S)  # infeasible: however fast, a failure worth a streak
    assert region.length == 0.2


def test_once_the_best_window_s_config_went_over_budget_the_walk_back_counts_its_improvements_again():
    region = TrustRegion(S.length_min)
    region.update(True, 0.003, 0.0001, S)  # the best: a config later found over its budget
    for p95_s in (0.23, 0.15, 0.09):  # the walk back from a config far within it: slower than that best
        region.update(True, p95_s, 0.0001, S)
    assert region.length == S.length_min and region.successes == 0
    region.forget_best()
    for p95_s in (0.23, 0.15, 0.09):  # the baseline, then two improvements
        region.update(True, p95_s, 0.0001, S)
    assert region.length == 2 * S.length_min


def test_a_region_halved_below_its_least_side_has_collapsed_and_stays_at_that_side():
    region = TrustRegion(S.length_min * 1.5)
    assert region.update(False, 1.0, 0.01, S)
    assert region.length == S.length_min


def test_with_nothing_safe_in_it_the_region_narrows_to_no_less_than_its_least_side():
    region = TrustRegion(0.8)
    region.narrow(S)
    assert region.length == 0.4
    region.length = S.length_min * 1.5
    region.narrow(S)
    assert region.length == S.length_min


def test_candidates_stay_in_the_box_and_reach_each_dimension_alone_at_either_edge():
    center = np.array([0.5, 0.05, 0.9])
    points = candidates(center, 0.4, np.random.default_rng(0), S)
    d = center.size
    assert points.shape == (1 + S.candidates + 2 * d, d)
    np.testing.assert_array_equal(points[0], center)
    lo, hi = np.clip(center - 0.2, 0, 1), np.clip(center + 0.2, 0, 1)
    assert np.all(points >= lo) and np.all(points <= hi)
    moved = np.sum(points[1:1 + S.candidates] != center, axis=1)
    assert moved.min() >= 1  # every candidate moves something
    edges = points[1 + S.candidates:]
    for i in range(d):
        alone = np.delete(np.arange(d), i)
        assert np.any((edges[:, i] == lo[i]) & np.all(edges[:, alone] == center[alone], axis=1))
        assert np.any((edges[:, i] == hi[i]) & np.all(edges[:, alone] == center[alone], axis=1))


def test_candidates_take_three_draws_from_the_learners_generator_in_a_fixed_order():
    # the learner's one random stream feeds these draws and then the stage moves': any other order changes every run
    n, d = S.candidates, 4
    rng = np.random.default_rng(7)
    candidates(np.full(d, 0.5), 0.8, rng, S)
    reference = np.random.default_rng(7)
    reference.uniform(size=(n, d))  # which dimensions each candidate perturbs
    reference.integers(0, d, n)  # the one it perturbs where the first draw chose none
    reference.uniform(0.1, 0.9, size=(n, d))  # the values
    assert rng.bit_generator.state == reference.bit_generator.state
