"""The models' inputs (models.bayes.inputs): the offered load as a context feature."""

import numpy as np
import pytest

from models.bayes.inputs import context_feature, offered_eps_of
from models.bayes.settings import LearnerSettings

S = LearnerSettings()


@pytest.mark.parametrize("offered_eps", [10.0, 300.0, 4_500.0, 1e6])
def test_the_load_feature_maps_back_to_the_load(offered_eps):
    assert offered_eps_of(np.array([context_feature(offered_eps, S)]), S)[0] == pytest.approx(offered_eps)


def test_the_load_feature_is_log_scaled_and_clipped_to_the_unit_interval():
    lo, hi = S.load_range_eps
    assert context_feature(lo, S) == 0.0 and context_feature(hi, S) == 1.0
    assert context_feature(0.0, S) == 0.0 and context_feature(1e9, S) == 1.0
    assert context_feature(1_000.0, S) - context_feature(100.0, S) == pytest.approx(
        context_feature(10_000.0, S) - context_feature(1_000.0, S))
