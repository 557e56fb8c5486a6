"""Where the learner's search stands (models.bayes.phase): its phases, what re-opens it, drift of a held incumbent."""

import pytest

from models.bayes.noise import Threshold
from models.bayes.phase import Converged, Phase, Reopened, Reopening, fresh_search
from models.bayes.settings import LearnerSettings
from models.space import PIPELINE_SPACE

S = LearnerSettings()


def _held(noise_s: float = 0.01, since=()) -> Converged:
    return Converged(PIPELINE_SPACE.defaults(), 300.0, 1.0, noise_s, 0.0, Threshold(0.05, "5% of the P95"), list(since))


def test_the_reason_a_converged_search_gives_states_the_gain_left_and_the_threshold():
    held = Converged(PIPELINE_SPACE.defaults(), 300.0, 1.0, 0.003, 0.0008, Threshold(0.006, "2 × noise 3.0 ms"))
    assert held.reason == "converged: best predicted gain 0.8 ms < 6.0 ms (2 × noise 3.0 ms)"


def test_a_held_incumbent_drifts_only_when_its_last_windows_leave_the_earlier_ones_beyond_noise_and_share():
    assert _held(since=[1.0, 1.0, 2.0]).drift(S) is None  # too few windows before the last two to compare with
    assert _held(since=[1.0, 1.02, 0.98, 1.05, 1.04]).drift(S) is None  # within the noise and 10 %
    assert _held(noise_s=0.001, since=[1.0, 1.001, 1.05, 1.06]).drift(S) is None  # beyond the noise, not 10 %
    drift = _held(since=[1.0, 1.01, 1.5, 1.5]).drift(S)
    assert drift.cause is Reopened.DRIFT
    assert drift.why == "the incumbent's P95 drifted 1005.0 → 1500.0 ms, beyond the noise of 10.0 ms"


def test_a_search_starts_searching_with_a_fresh_trust_region_and_only_a_load_move_or_a_budget_makes_its_ground_known():
    first = fresh_search(S)
    assert first.phase is Phase.SEARCHING and first.region.length == S.length_init and first.windows == 0
    assert not first.known_ground and first.reopening is None
    for cause in Reopened:
        assert fresh_search(S, Reopening(cause, "why")).known_ground is (
            cause in (Reopened.LOAD_MOVED, Reopened.OVER_BUDGET))


def test_a_collapsed_region_exhausts_a_search_but_a_held_one_stays_held():
    search = fresh_search(S)
    search.collapse()
    assert search.phase is Phase.EXHAUSTED
    search.converge(_held())
    search.collapse()
    assert search.phase is Phase.CONVERGED and search.converged is not None


@pytest.mark.parametrize("phase", [Phase.SEARCHING, Phase.EXHAUSTED])
def test_widening_searches_again_from_a_region_of_the_initial_side(phase):
    search = fresh_search(S)
    search.phase, search.region.length, search.windows = phase, S.length_min, 7
    search.widen(S)
    assert search.phase is Phase.SEARCHING and search.region.length == S.length_init and search.windows == 7
