"""Guardrails on live-like windows: batching and latency are not falling behind; a real deficit is."""

import math

from controller.guardrails import output_behind
from models.observation import Observation


def _window(out_eps: float, p50_s: float, offered_eps: float = 1000.0) -> Observation:
    return Observation(duration_s=30, offered_eps=offered_eps, throughput_eps=out_eps, p50_s=p50_s, p95_s=2 * p50_s,
                       p99_s=3 * p50_s, mean_s=p50_s)


def test_a_flush_batch_cut_off_by_the_window_end_is_not_falling_behind():
    # 1 s flushes at 1000 ev/s: the window can end just before a batch of 1000 events (3.3 % of 30 000)
    # beyond the 5 % tolerance that would be 8.3 % short with a 1.5 s median latency: still keeping up.
    assert output_behind(_window(out_eps=920.0, p50_s=1.5), 0.95) is None


def test_the_same_deficit_at_low_latency_is_falling_behind():
    found = output_behind(_window(out_eps=920.0, p50_s=0.01), 0.95)
    assert found is not None and "92.0%" in found and "10 events in flight" in found


def test_a_window_without_latency_figures_uses_the_ratio_alone():
    assert output_behind(_window(out_eps=960.0, p50_s=math.nan), 0.95) is None
    assert output_behind(_window(out_eps=940.0, p50_s=math.nan), 0.95) is not None
