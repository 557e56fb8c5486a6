"""A window's noise at the incumbent and the gain a change must promise (models.bayes.noise)."""

import math

import numpy as np
import pytest

from models.bayes.history import History
from models.bayes.noise import alike_repeats, pooled_noise_s, threshold
from models.bayes.settings import LearnerSettings
from models.learning import Context
from models.observation import Observation
from models.space import PIPELINE_SPACE

S = LearnerSettings()


def test_a_change_must_promise_twice_the_noise_or_a_twentieth_of_the_p95_whichever_is_more():
    by_noise = threshold(1.0, 0.04, S)
    assert by_noise.gain_s == pytest.approx(0.08) and by_noise.why == "2 × noise 40.0 ms"
    by_size = threshold(1.0, 0.01, S)
    assert by_size.gain_s == pytest.approx(0.05) and by_size.why == "5% of the P95"


def _history(windows) -> History:
    """Windows of (config value, offered eps, p95 s, feasible)."""
    h = History()
    for backoff_s, eps, p95_s, ok in windows:
        config = PIPELINE_SPACE.config({"filebeat.backoff": backoff_s})
        h.add(config, Context(eps), np.zeros(2), {}, 0.0, Observation(30, eps, eps, p95_s / 2, p95_s, p95_s, p95_s / 2),
              {}, ok, False, math.nan)
    return h


def test_the_noise_rests_on_repeats_of_configs_like_the_incumbent_at_about_this_load():
    h = _history([(1.0, 300, 1.0, True), (1.0, 300, 1.1, True),  # the incumbent, twice
                  (2.0, 300, 1.2, True), (2.0, 300, 1.3, True),  # alike
                  (3.0, 300, 2.0, True), (3.0, 300, 2.6, True),  # twice as slow: noisier, left out
                  (1.0, 600, 0.5, True),  # another load
                  (4.0, 300, 1.0, False), (4.0, 300, 1.0, False)])  # fell behind
    repeats = alike_repeats(h, 300.0, 1.05, S)
    assert repeats == [[math.log(1.0), math.log(1.1)], [math.log(1.2), math.log(1.3)]]


def test_one_stray_window_hardly_moves_the_pooled_noise():
    steady = [math.log(p) for p in (4.0, 4.08, 3.96, 4.04, 4.0, 3.92, 4.06)]
    quiet = pooled_noise_s([steady], 4.0, S)
    stray = pooled_noise_s([steady + [math.log(6.5)]], 4.0, S)
    assert 0.02 < quiet < 0.1 and stray < 1.5 * quiet  # the standard deviation would be ~0.9 s
