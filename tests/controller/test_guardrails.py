"""Guardrails on live-like windows: batching and latency are not falling behind; a real deficit is."""

import math

from controller.guardrails import output_behind
from models.observation import Observation


def _window(out_eps: float, p50_s: float, offered_eps: float = 1000.0) -> Observation:
    return Observation(duration_s=30, offered_eps=offered_eps, throughput_eps=out_eps, p50_s=p50_s, p95_s=2 * p50_s,
                       p99_s=3 * p50_s, mean_s=p50_s)


def test_a_flush_batch_cut_off_by_the_window_end_is_not_falling_behind():
    # 1 s flushes at 1000 ev/s: a window can end just before a batch; 8 % short with a 1.5 s median
    # latency is within the 5 % share plus what is in flight (capped at another 5 %): still keeping up.
    assert output_behind(_window(out_eps=920.0, p50_s=1.5), 0.95) is None


def test_the_same_deficit_at_low_latency_is_falling_behind():
    found = output_behind(_window(out_eps=920.0, p50_s=0.01), 0.95)
    assert found is not None and "92.0% of input" in found and "10 events in flight" in found


def test_batches_that_outlast_the_window_are_not_excused():
    assert output_behind(_window(out_eps=850.0, p50_s=20.0), 0.95) is not None


def test_a_window_without_latency_figures_uses_the_ratio_alone():
    assert output_behind(_window(out_eps=960.0, p50_s=math.nan), 0.95) is None
    assert output_behind(_window(out_eps=940.0, p50_s=math.nan), 0.95) is not None


def test_backlog_swinging_by_what_is_in_flight_is_tolerated_but_growth_beyond_it_is_not():
    from controller.guardrails import breaches
    from models.policy import Policy

    before = _window(out_eps=1000.0, p50_s=1.5)
    before.backlog_events = {"filebeat": 500}
    swing = _window(out_eps=1000.0, p50_s=1.5)
    swing.backlog_events = {"filebeat": 2500}  # one 2048-event flush batch more waiting than before
    assert breaches(swing, Policy(), before) == []
    growing = _window(out_eps=1000.0, p50_s=1.5)
    growing.backlog_events = {"filebeat": 500 + 30 * 150}  # 150 ev/s more in than out, beyond 50 + 50 in flight
    assert any("backlog grew 150 ev/s" in b for b in breaches(growing, Policy(), before))
