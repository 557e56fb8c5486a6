"""The rules of one window's decision (models.bayes.rules), each on its own, on hand-made candidate pools."""

import math
from dataclasses import replace

import numpy as np
import pytest

from models.bayes import rules
from models.bayes.noise import Threshold
from models.bayes.phase import Converged, Phase, Reopened, Reopening, fresh_search
from models.bayes.rules import Pool
from models.bayes.settings import LearnerSettings
from models.screen import SCREEN_STEP
from models.space import PIPELINE_SPACE

S = LearnerSettings()
A = PIPELINE_SPACE.defaults()
B = PIPELINE_SPACE.config({"filebeat.backoff": 0.5})


def _pool(mean, optimistic, safe, m_std=None, hoped=None) -> Pool:
    """Candidates 0..n-1 along one axis with predicted P95s `mean`, their optimistic bounds and safety."""
    n = len(mean)
    return Pool(cand=np.linspace(0, 1, n)[:, None], mean=np.array(mean, float), optimistic=np.array(optimistic, float),
                m_mean=np.zeros(n), m_std=np.array(m_std if m_std is not None else [0.01] * n, float),
                safe=np.array(safe, bool), hoped=np.array(hoped if hoped is not None else [False] * n, bool))


def _search(phase=Phase.SEARCHING, windows=0, cause=None):
    search = fresh_search(S, Reopening(cause, "why") if cause else None)
    return replace(search, phase=phase, windows=windows)


def test_a_converged_search_holds_until_the_load_moves_or_the_daemon_holds_another_incumbent():
    held = Converged(A, 300.0, 1.0, 0.01, 0.0, Threshold(0.05, "5% of the P95"))
    assert rules.reopening(held, A, 330.0) is None  # within LOAD_SHIFT
    moved = rules.reopening(held, B, 600.0)  # a load move counts first: it is known ground
    assert moved == Reopening(Reopened.LOAD_MOVED, "load moved 300 → 600 ev/s")
    assert rules.reopening(held, B, 300.0).cause is Reopened.INCUMBENT_CHANGED


@pytest.mark.parametrize("phase, cause, far, windows, expected", [
    (Phase.SEARCHING, None, False, 50, False),  # near capacity a search hopes however long it runs
    (Phase.SEARCHING, None, True, S.min_search - 1, False),  # far from it, while the search looks around
    (Phase.SEARCHING, None, True, S.min_search, True),  # ... and not after
    (Phase.EXHAUSTED, None, False, 0, True),  # the trust region collapsed
    (Phase.SEARCHING, Reopened.LOAD_MOVED, False, 0, True),  # known ground
    (Phase.SEARCHING, Reopened.GUARDRAIL, False, 0, False),  # a breach is news the models never saw
    (Phase.SEARCHING, Reopened.OVER_BUDGET, False, 0, True),  # the cost models were told the window over budget
])
def test_only_the_expected_gain_counts_once_the_region_collapsed_on_known_ground_or_far_from_capacity_later(
        phase, cause, far, windows, expected):
    assert rules.expects_only(_search(phase, windows, cause), far, S) is expected


def test_a_gain_is_over_the_incumbents_p95_discounted_and_less_a_restarts_price_and_none_where_unsafe():
    pool = _pool(mean=[0.8, 0.8, 0.5], optimistic=[0.6, 0.6, 0.4], safe=[True, True, False])
    prices_s = np.array([0.0, 0.05, 0.0])
    np.testing.assert_allclose(rules.gains(pool, 1.0, True, prices_s, S)[:2], [0.2, 0.2 * S.restart_discount - 0.05])
    optimistic = rules.gains(pool, 1.0, False, prices_s, S)
    np.testing.assert_allclose(optimistic[:2], [0.4, 0.4 * S.restart_discount - 0.05])
    assert optimistic[2] == -np.inf


@pytest.mark.parametrize("pause_s, horizon_s, rate_eps", [(3.0, 3600.0, 200.0), (1.0, 600.0, 5000.0)])
def test_a_restarts_price_is_the_gain_that_repays_its_pauses_delay_within_the_horizon_at_any_load(
        pause_s, horizon_s, rate_eps):
    price_s = rules.restart_price_s(pause_s, horizon_s)
    # the delay it puts on the events, in event-seconds: those arriving in the pause wait half of it on average
    delay_event_s = rate_eps * pause_s * pause_s / 2
    assert price_s * rate_eps * horizon_s == pytest.approx(delay_event_s)  # the gain at the price just repays it
    assert rules.restart_price_s(pause_s, 2 * horizon_s) == pytest.approx(price_s / 2)  # a longer horizon: less


def test_a_candidate_restarts_a_component_only_where_it_moves_a_restart_dimension():
    current = np.array([0.5, 0.5])
    cand = np.array([[0.5, 0.9], [0.5 + S.moved_tolerance / 2, 0.9], [0.6, 0.5]])
    mask = np.array([True, False])  # the first dimension restarts a component
    assert rules.restarting(cand, current, mask, S).tolist() == [False, False, True]


def test_a_candidate_pays_for_the_longest_pause_of_the_components_it_restarts_measured_or_the_prior():
    current = np.array([0.5, 0.5, 0.5])
    cand = np.array([[0.5, 0.5, 0.9], [0.9, 0.5, 0.5], [0.5, 0.9, 0.5], [0.9, 0.9, 0.5]])
    dims = {"filebeat": np.array([True, False, False]), "spark": np.array([False, True, False])}  # dim 2: live
    prices = rules.restart_prices_s(cand, current, dims, {"spark": 10.0}, 3600.0, S)
    filebeat, spark = rules.restart_price_s(S.restart_pause_prior_s, 3600.0), rules.restart_price_s(10.0, 3600.0)
    np.testing.assert_allclose(prices, [0.0, filebeat, spark, spark])


def test_far_from_capacity_a_search_past_its_free_windows_steps_only_where_no_loss_is_expected():
    pool = _pool(mean=[0.9, 1.2], optimistic=[0.5, 0.3], safe=[True, True])
    gain = np.array([0.5, 0.7])  # the second hopes for more, but is expected slower than the incumbent (1.0 s)
    barred = rules.no_loss(gain, pool, 1.0, far_from_capacity=True, expected=False, windows=S.free_hope, s=S)
    assert barred.tolist() == [0.5, -np.inf]
    for far, expected, windows in ((True, False, S.free_hope - 1), (False, False, 50), (True, True, 50)):
        assert rules.no_loss(gain, pool, 1.0, far, expected, windows, S) is gain


def test_a_search_first_knows_the_noise_from_repeated_windows():
    assert rules.noise_unknown(S.noise_dof - 1, S) and not rules.noise_unknown(S.noise_dof, S)


@pytest.mark.parametrize("phase, cause, windows, safe_share, is_young", [
    (Phase.SEARCHING, None, 0, 0.0, True),
    (Phase.SEARCHING, None, S.min_search - 1, S.safe_share_settled - 0.01, True),
    (Phase.SEARCHING, None, S.min_search, 0.0, False),  # old
    (Phase.SEARCHING, None, 0, S.safe_share_settled, False),  # the region is largely known safe
    (Phase.EXHAUSTED, None, 0, 0.0, False),  # collapsed
    (Phase.SEARCHING, Reopened.LOAD_MOVED, 0, 0.0, False),  # known ground is never young
    (Phase.SEARCHING, Reopened.DRIFT, 0, 0.0, True),
])
def test_a_young_search_that_knows_little_safe_spends_windows_growing_the_safe_set(
        phase, cause, windows, safe_share, is_young):
    assert rules.young(_search(phase, windows, cause), safe_share, S) is is_young


def test_expanders_are_the_safe_candidates_that_could_be_faster_most_uncertain_first():
    pool = _pool(mean=[1.1, 1.2, 1.0, 0.9], optimistic=[0.9, 0.8, 1.1, 0.5], safe=[True, True, True, False],
                 m_std=[0.0, 0.0, 0.5, 0.5])
    # candidate 2 cannot be faster even optimistically, 3 is not safe; 1 is the less sure of 0 and 1
    assert rules.expanders(pool, 1.0).tolist() == [1, 0]
    assert rules.expanders(pool, 0.7) is None


def test_a_goal_the_budget_keeps_out_is_approached_through_the_safe_configs_nearer_to_it_than_any_measured():
    # candidates at 0, 0.25, 0.5, 0.75, 1: 0 and 0.25 known within budget, 0.75 and 1 only expected within it
    pool = _pool(mean=[1.0, 0.9, 0.95, 0.5, 0.3], optimistic=[1.0] * 5, safe=[True, True, True, False, False],
                 hoped=[False, False, False, True, True])
    goal_gains = np.array([-np.inf, -np.inf, -np.inf, 0.5, 0.7])  # gains as if safe
    order, goal = rules.budget_expander(pool, goal_gains, 0.1, 1.0, np.array([[0.0]]), S.expand_step)
    assert goal == 4 and order.tolist() == [2, 1]  # the best goal, nearest safe first
    # measured at 0.5 already: no safe candidate is nearer the goal, the expansion ends
    assert rules.budget_expander(pool, goal_gains, 0.1, 1.0, np.array([[0.0], [0.5]]), S.expand_step) is None
    # a goal that does not beat the threshold is no goal
    assert rules.budget_expander(pool, goal_gains, 0.8, 1.0, np.array([[0.0]]), S.expand_step) is None
    # an expander the models expect slower than the incumbent (0.92) is not taken: 2 (0.95)
    order, _ = rules.budget_expander(pool, goal_gains, 0.1, 0.92, np.array([[0.0]]), S.expand_step)
    assert order.tolist() == [1]


@pytest.mark.parametrize("cause, far, expected", [(None, False, False), (None, True, True),
                                                  (Reopened.LOAD_MOVED, False, True)])
def test_beyond_the_trust_region_only_expected_gains_count_on_known_ground_or_far_from_capacity(cause, far, expected):
    assert rules.beyond_expects_only(_search(cause=cause), far) is expected


def test_candidates_are_ranked_best_first_and_only_those_beating_the_threshold():
    assert rules.ranked(np.array([0.1, 0.5, -np.inf, 0.3, 0.2]), 0.2).tolist() == [1, 3]
    assert rules.ranked(np.array([0.1, 0.2]), 0.2).size == 0  # converge: nothing beats it


def test_the_screen_lets_through_the_best_candidate_the_twin_expects_to_keep_up_as_well_as_the_incumbent():
    floor = 0.95
    # the twin expects the incumbent to keep up: a candidate must reach the policy's floor
    assert rules.screen_pick([7, 3, 5], [0.90, 0.97, 0.99], 1.0, [], [], floor) == 3
    # it doubts the incumbent (0.80): first as well as the incumbent, then within a step of it
    assert rules.screen_pick([7, 3], [0.78, 0.81], 0.80, [], [], floor) == 3
    assert rules.screen_pick([7, 3], [0.70, 0.79], 0.80, [], [], floor) == 3
    assert rules.screen_pick([7, 3], [0.70, 0.75], 0.80, [], [], floor) is None  # below SCREEN_STEP × 0.80
    assert 0.75 < SCREEN_STEP * 0.80 <= 0.79
    # a config that fell behind where the twin ranked it 0.795 bars every candidate it ranks as low
    assert rules.screen_pick([7, 3], [0.79, 0.795], 0.80, [], [0.795], floor) is None


def test_the_incumbent_breached_only_when_it_broke_a_rule_itself_at_about_this_load():
    assert rules.incumbent_breached((A, 1000.0), A, 1100.0)
    assert not rules.incumbent_breached((B, 1000.0), A, 1000.0)  # a candidate fell behind: the rollback's business
    assert not rules.incumbent_breached((A, 1000.0), A, 2000.0)  # the load moved on
    assert not rules.incumbent_breached(None, A, 1000.0)


def test_the_most_capable_config_must_beat_the_incumbents_margin_by_the_gain():
    assert rules.most_capable(np.array([-0.02, 0.10, 0.04]), -0.06, 0.006) == 1
    assert rules.most_capable(np.array([-0.057]), -0.06, 0.006) is None  # within the noise
    assert rules.most_capable(np.array([]), -0.06, 0.006) is None


def test_an_overload_is_the_loads_where_a_config_fell_behind_before_at_this_load_or_below_shipping_no_more():
    loads, shipped = [1000.0, 6000.0, 9000.0], [math.nan, 5000.0, 5500.0]  # the first kept up at 1000 ev/s
    assert rules.overload_shared(7000.0, 5200.0, loads, shipped)  # behind at 6000 ev/s, shipping 5000
    assert not rules.overload_shared(7000.0, 4900.0, loads, shipped)  # it shipped less than the one behind before
    assert rules.overload_shared(8000.0, 5600.0, [9000.0], [5500.0])  # at about this load: 9000 is within 25 %
    assert not rules.overload_shared(4000.0, 3900.0, [9000.0], [3000.0])  # behind only at a load far above
    assert not rules.overload_shared(1200.0, 900.0, [1000.0], [math.nan])  # only ever kept up: the config's fault


def test_a_candidate_carries_the_peak_above_the_floor_or_as_well_as_an_incumbent_below_it():
    floor = -0.05
    assert list(rules.carries_peak(np.array([-0.04, -0.06]), 0.2, floor)) == [True, False]
    assert list(rules.carries_peak(np.array([-0.08, -0.12]), -0.10, floor)) == [True, False]


def test_a_step_toward_capacity_goes_to_the_fastest_config_the_twin_expects_to_keep_up():
    ratios, p95_s = np.array([0.70, 0.97, 0.99, 0.96]), np.array([0.5, 2.0, 3.0, 1.5])
    assert rules.capacity_pick(ratios, 0.60, p95_s, 0.95, 0.006) == 3  # 1.5 s, of those at the floor or above


def test_where_the_twin_expects_none_to_keep_up_the_step_goes_to_the_most_capable_if_it_beats_the_incumbent():
    p95_s = np.array([1.0, 1.0])
    assert rules.capacity_pick(np.array([0.70, 0.80]), 0.60, p95_s, 0.95, 0.006) == 1
    assert rules.capacity_pick(np.array([0.55, 0.603]), 0.60, p95_s, 0.95, 0.006) is None  # within the noise
    assert rules.capacity_pick(np.array([]), 0.60, np.array([]), 0.95, 0.006) is None


def test_the_twin_is_trusted_for_a_step_only_above_the_configs_it_ranked_that_fell_behind():
    ratios, p95_s = np.array([0.97, 1.05, 0.90]), np.array([1.0, 3.0, 0.5])
    # it vouched for one at 1.0 that fell behind: of those it expects to keep up, only the one above that
    assert rules.capacity_pick(ratios, 0.60, p95_s, 0.95, 0.006, fell_behind=[1.0]) == 1
    assert rules.capacity_pick(ratios, 0.60, p95_s, 0.95, 0.006, fell_behind=[1.1]) is None
