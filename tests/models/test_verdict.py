"""The one verdict on a window: what counts as keeping up, and every strategy judging by it alone."""

import math

import numpy as np
import pytest

from models.learning import Context, TunedCube, tuned_names
from models.observation import Observation
from models.policy import Policy
from models.space import PIPELINE_SPACE
from models.strategies import STRATEGIES, build_learner
from models.verdict import BreachKind, judge


def _window(out_eps: float, p50_s: float, offered_eps: float = 1000.0, backlog: int = 500) -> Observation:
    return Observation(duration_s=30, offered_eps=offered_eps, throughput_eps=out_eps, p50_s=p50_s, p95_s=2 * p50_s,
                       p99_s=3 * p50_s, mean_s=p50_s, backlog_events={"filebeat": backlog})


def test_a_flush_batch_cut_off_by_the_window_end_is_not_falling_behind():
    # 1 s flushes at 1000 ev/s: a window can end just before a batch; 8 % short with a 1.5 s median
    # latency is within the 5 % share plus what is in flight (capped at another 5 %): still keeping up.
    assert judge(_window(out_eps=920.0, p50_s=1.5), Policy()).ok


def test_the_same_deficit_at_low_latency_is_falling_behind():
    verdict = judge(_window(out_eps=920.0, p50_s=0.01), Policy())
    [breach] = verdict.breaches
    assert breach.kind is BreachKind.BEHIND and breach.unit == "events"
    assert breach.figure == pytest.approx(80 * 30) and breach.limit == pytest.approx(1500 + 10)
    assert "92.0% of input" in breach.message and "10 events in flight" in breach.message


def test_batches_that_outlast_the_window_are_not_excused():
    assert not judge(_window(out_eps=850.0, p50_s=20.0), Policy()).ok


def test_a_window_without_latency_figures_uses_the_ratio_alone():
    assert judge(_window(out_eps=960.0, p50_s=math.nan), Policy()).ok
    assert not judge(_window(out_eps=940.0, p50_s=math.nan), Policy()).ok


def test_backlog_swinging_by_what_is_in_flight_is_tolerated_but_growth_beyond_it_is_not():
    before = _window(out_eps=1000.0, p50_s=1.5)
    swing = _window(out_eps=1000.0, p50_s=1.5, backlog=2500)  # one 2048-event flush batch more waiting
    assert judge(swing, Policy(), before).ok
    growing = _window(out_eps=1000.0, p50_s=1.5, backlog=500 + 30 * 150)  # 150 ev/s beyond 50 + 50 in flight
    [breach] = judge(growing, Policy(), before).breaches
    assert breach.kind is BreachKind.BACKLOG and "backlog grew 150 ev/s" in breach.message
    assert judge(growing, Policy()).ok  # no previous window, no trend to judge


def test_each_breach_is_named_with_its_figure_and_limit():
    before = Observation(duration_s=10, offered_eps=300, throughput_eps=300, p50_s=1, p95_s=1, p99_s=1, mean_s=1,
                         backlog_events={"x": 100})
    window = Observation(duration_s=10, offered_eps=300, throughput_eps=250, p50_s=1, p95_s=9, p99_s=10, mean_s=2,
                         backlog_events={"x": 900})
    verdict = judge(window, Policy(p95_ceiling_s=5.0), before)
    assert [b.kind for b in verdict.breaches] == [BreachKind.BEHIND, BreachKind.BACKLOG, BreachKind.CEILING]
    assert "output" in verdict.messages[0] and "backlog" in verdict.messages[1] and "ceiling" in verdict.messages[2]
    ceiling = verdict.breaches[2]
    assert (ceiling.figure, ceiling.limit, ceiling.unit) == (9, 5.0, "s")
    assert verdict.excess > 0 and judge(before, Policy(), before).ok and judge(before, Policy()).excess == 0


def test_every_strategy_judges_a_window_short_of_its_input_with_a_growing_backlog_infeasible():
    # 4 % short of its input is within the policy's 5 %: only the growing backlog makes this window infeasible,
    # so a strategy that judged by the raw ratio (or by keeping up alone) would take it as feasible.
    policy = Policy()
    previous = _window(out_eps=1000.0, p50_s=0.01)
    window = _window(out_eps=960.0, p50_s=0.01, backlog=500 + 30 * 150)
    verdict = judge(window, policy, previous)
    assert [b.kind for b in verdict.breaches] == [BreachKind.BACKLOG]
    assert window.throughput_ratio >= policy.min_throughput_ratio
    cube = TunedCube(tuned_names(policy, "paper"), policy)
    start = PIPELINE_SPACE.defaults()
    tried = cube.decode(np.full(cube.dims, 0.3), base=start)  # a config other than the start, with a low P95
    judged = {}
    for name in STRATEGIES:
        learner = build_learner(name, cube, start, seed=0)
        learner.suggest(Context(window.offered_eps))
        learner.tell(tried, Context(window.offered_eps), window, verdict)
        judged[name] = learner
    # the Bayesian learner counts an infeasible window as several failures: its trust region shrinks at once
    assert judged["pipetune"].length < judged["pipetune"].length_init
    # the paper's sweep keeps its best config: the tried one's lower P95 does not count
    assert judged["ovat"].best == start
    # Optuna's constraint is violated (> 0 is infeasible to Optuna)
    told = judged["optuna-tpe"].study.trials[-1]
    assert told.constraints == {"throughput": verdict.excess} and verdict.excess > 0


def test_a_strategy_told_a_feasible_verdict_takes_the_window():
    # the other side of the test above: the same window, judged feasible, is taken, so that test sees the verdict
    policy = Policy()
    window = _window(out_eps=960.0, p50_s=0.01)
    verdict = judge(window, policy)
    assert verdict.ok
    cube = TunedCube(tuned_names(policy, "paper"), policy)
    start = PIPELINE_SPACE.defaults()
    tried = cube.decode(np.full(cube.dims, 0.3), base=start)
    ovat = build_learner("ovat", cube, start)
    ovat.suggest(Context(window.offered_eps))
    ovat.tell(tried, Context(window.offered_eps), window, verdict)
    assert ovat.best == tried
    bayes = build_learner("pipetune", cube, start)
    bayes.suggest(Context(window.offered_eps))
    bayes.tell(tried, Context(window.offered_eps), window, verdict)
    assert bayes.length == bayes.length_init
