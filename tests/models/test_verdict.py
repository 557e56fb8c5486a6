"""The one verdict on a window: what counts as keeping up, and every strategy judging by it alone."""

import math
from dataclasses import replace

import numpy as np
import pytest

from models.budget import REQUESTS
from models.learning import Context, TunedCube, tuned_names
from models.observation import Observation
from models.policy import Policy
from models.space import PIPELINE_SPACE, Config
from models.strategies import STRATEGIES, build_learner
from models.verdict import BreachKind, Drain, buffered_events, drain, judge, output_margin


def _window(out_eps: float, p50_s: float = 0.5, offered_eps: float = 1000.0, backlog: int = 500) -> Observation:
    return Observation(duration_s=30, offered_eps=offered_eps, throughput_eps=out_eps, p50_s=p50_s, p95_s=2 * p50_s,
                       p99_s=3 * p50_s, mean_s=p50_s, backlog_events={"filebeat": backlog})


def _config(min_events: int = 2048, timeout_s: float = 1.0, bulk: int = 2048, pipelining: int = 2,
            workers: int = 1) -> Config:
    return PIPELINE_SPACE.config({"filebeat.queue.mem.flush.min_events": min_events,
                                  "filebeat.queue.mem.flush.timeout": timeout_s, "filebeat.output.bulk_max_size": bulk,
                                  "filebeat.output.pipelining": pipelining, "filebeat.output.worker": workers})


def test_what_a_config_buffers_is_its_flush_batch_and_the_output_batches_in_flight():
    # 1 s flushes at 1000 ev/s gather 1000 events (fewer than min_events), two batches in flight per worker
    assert buffered_events(_config(), 1000.0) == pytest.approx(1000 + 2 * 1000)
    # min_events smaller than a timeout's worth: batches of 100; output batches capped by bulk_max_size
    assert buffered_events(_config(min_events=100, bulk=40, pipelining=4, workers=2), 1000.0) == pytest.approx(
        100 + 8 * 40)
    # no batching (min_events 1, synchronous output): one event gathered, one in flight
    assert buffered_events(_config(min_events=1, pipelining=0), 1000.0) == pytest.approx(2)


def test_a_flush_batch_cut_off_by_the_window_end_is_not_falling_behind():
    # 1 s flushes at 1000 ev/s: a window can end just before a batch; 8 % short is within the 5 % share plus
    # what the config buffers (3000 events, trusted up to another 5 %, 1500): still keeping up.
    assert judge(_window(out_eps=920.0), Policy(), _config()).ok


def test_the_same_deficit_with_small_buffers_is_falling_behind():
    verdict = judge(_window(out_eps=920.0), Policy(), _config(min_events=4, pipelining=0))
    [breach] = verdict.breaches
    assert breach.kind is BreachKind.BEHIND and breach.unit == "events"
    assert breach.figure == pytest.approx(80 * 30) and breach.limit == pytest.approx(1500 + 8)
    assert "92.0% of input" in breach.message and "8 events its buffers hold" in breach.message


def test_a_micro_batch_cut_off_by_the_window_end_is_what_the_sink_holds_not_falling_behind():
    small = _config(min_events=4, pipelining=0)  # Filebeat holds next to nothing: the batches are the sink's
    cut = replace(_window(out_eps=920.0), sink_held_events=1000.0 * 1.5)  # a Spark job holds ~1.5 s of events
    assert judge(cut, Policy(), small).ok
    assert drain(replace(cut, throughput_eps=1080.0), Policy(), small) is Drain.NONE  # the batch the next one ships
    # trusted up to the policy's share again: a job that carries a few records a batch is behind, however long
    # its events wait in it
    assert not judge(replace(cut, throughput_eps=500.0, sink_held_events=1000.0 * 40), Policy(), small).ok


def test_a_window_shipping_more_than_came_in_beyond_what_its_config_buffers_is_draining_a_backlog():
    # 3000 events buffered, trusted up to 5 % (1500) on top of the 5 % share: up to 10 % ahead is batching
    assert drain(_window(out_eps=1090.0), Policy(), _config()) is Drain.NONE
    assert drain(_window(out_eps=1110.0), Policy(), _config()) is not Drain.NONE
    # a small-batch config is ahead by more than batching only beyond the policy's share
    assert drain(_window(out_eps=1060.0), Policy(), _config(min_events=1, pipelining=0)) is not Drain.NONE
    assert drain(_window(out_eps=1000.0), Policy(), _config(min_events=1, pipelining=0)) is Drain.NONE


def _near_capacity_window(start_backlog: float, spare_eps: float, offered_eps: float = 6000.0, p50_s: float = 1.0,
                          p95_s: float = 2.0) -> Observation:
    """30 s at `offered_eps` whose output runs `spare_eps` ahead of the input until the `start_backlog` it began
    with is down to what a small-batch config holds, then matches it."""
    backlog, inflow, outflow = start_backlog, [], []
    for _ in range(30):
        ship = min(spare_eps, max(backlog - 2, 0.0))
        backlog -= ship
        inflow.append(offered_eps)
        outflow.append(offered_eps + ship)
    shipped = sum(outflow) / 30
    return Observation(duration_s=30, offered_eps=offered_eps, throughput_eps=shipped, p50_s=p50_s, p95_s=p95_s,
                       p99_s=p95_s, mean_s=p50_s, backlog_events={"source": round(backlog)},
                       series={"input_eps": inflow, "output_eps": outflow})


def test_a_lull_starting_a_second_into_the_window_is_what_the_counts_misplace_at_its_edge_not_falling_behind():
    # bench.foreign, run 2, window 14: k6 stopped about a second in; the input counted 662 events, the output 13
    lull = Observation(duration_s=20, offered_eps=33.1, throughput_eps=0.65, p50_s=0.046, p95_s=0.054, p99_s=0.056,
                       mean_s=0.046, backlog_events={"source": 0})
    config = _config(min_events=144, timeout_s=0.017, bulk=7822)
    assert judge(lull, Policy(), config).breaches[0].kind is BreachKind.BEHIND
    # the rate went from 800 ev/s to none across it, the counts' targets scraped every second
    assert judge(replace(lull, edge_events=800.0), Policy(), config).ok
    # what they may misplace is an interval's worth of the rate's change, no more: 2,000 events short is behind
    short = replace(lull, offered_eps=800.0, throughput_eps=700.0, edge_events=800.0)
    assert judge(short, Policy(), config).breaches[0].kind is BreachKind.BEHIND


def test_a_config_with_little_to_spare_draining_a_rollbacks_backlog_is_draining_though_ahead_by_less_than_5pc():
    small = _config(min_events=4, pipelining=0)
    # 30,000 events left by a rolled-back config, 200 ev/s to spare: ahead by 3 %, 24,000 still queued at the end
    slow_drain = _near_capacity_window(30_000, spare_eps=200.0)
    verdict = judge(slow_drain, Policy(), small)
    assert slow_drain.throughput_ratio < 1.05 and verdict.ok and verdict.drain is Drain.LONG
    # 12,000 at 200 ev/s: beyond the 9,000 events of the policy's share of the input for 15 s
    assert drain(_near_capacity_window(12_000, spare_eps=200.0), Policy(), small) is Drain.LONG
    # a large backlog that does not shrink is the config's own latency, not the past's
    assert judge(_near_capacity_window(30_000, spare_eps=0.0), Policy(), small).drain is Drain.NONE


def test_a_backlog_within_what_the_pipeline_settles_at_is_not_a_queue_from_before():
    small = _config(min_events=4, pipelining=0)
    # 8,000 events: within the policy's share of the input (9,000) beyond what the config buffers
    assert drain(_near_capacity_window(8_000, spare_eps=200.0), Policy(), small) is Drain.NONE
    # 30,000 where the pipeline held 25,000 after its last window of its own: 5,000 beyond, shipped at 200 ev/s
    assert drain(_near_capacity_window(30_000, spare_eps=200.0), Policy(), small, settled_events=25_000) is Drain.NONE


def test_a_restarts_queue_that_sets_the_tail_but_not_the_median_is_draining_though_within_the_policys_share():
    small = _config(min_events=4, pipelining=0)
    # a Filebeat restart's pause left 3,000 events (0.5 s of input) queued, shipped at 100 ev/s to spare: within
    # the 9,000 events of the policy's share, but the window's P95 (0.4 s) is the queue's, 80x its median (5 ms)
    restart = _near_capacity_window(3_000, spare_eps=100.0, p50_s=0.005, p95_s=0.4)
    verdict = judge(restart, Policy(), small)
    assert verdict.ok and verdict.drain is Drain.LONG
    # the same backlog figures under a tail shaped like the body: no queue reached the latency (a backlog's noise)
    noise = _near_capacity_window(3_000, spare_eps=100.0, p50_s=0.005, p95_s=0.012)
    assert drain(noise, Policy(), small) is Drain.NONE


def test_a_backlog_shipped_within_the_policys_share_of_the_window_sets_no_long_drain():
    small = _config(min_events=4, pipelining=0)
    quick = _near_capacity_window(30_000, spare_eps=30_000.0)  # gone in the first second of 30: 17 % ahead
    assert drain(quick, Policy(), small) is Drain.SHORT
    quick.series = {}  # without the per-second series the drain is taken as steady: through the whole window
    assert drain(quick, Policy(), small) is Drain.LONG


def test_a_flush_batch_shipped_across_the_windows_start_is_not_a_backlog_from_before():
    # 1 s flushes at 1000 ev/s hold 3,000 events: a window 3 % ahead shipped a batch the last one ended with
    assert drain(_window(out_eps=1030.0, backlog=2000), Policy(), _config()) is Drain.NONE


def test_the_output_margin_counts_a_batch_held_at_the_windows_end_as_shipped_and_a_surplus_as_no_headroom():
    # 3000 events buffered, trusted up to the policy's 5 % (1500 of 30,000): 4 % short is keeping up exactly
    assert output_margin(_window(out_eps=960.0), Policy(), _config()) == 0.0
    assert output_margin(_window(out_eps=900.0), Policy(), _config()) == pytest.approx(-0.05)
    # with no batching the same shortfall is all the config's; shipping more than came in is the past's queue
    assert output_margin(_window(out_eps=960.0), Policy(), _config(min_events=1, pipelining=0)) == pytest.approx(
        -0.04 + 2 / 30_000)
    assert output_margin(_window(out_eps=1030.0), Policy(), _config(min_events=1, pipelining=0)) == 0.0
    # the margin is below the policy's floor exactly when the BEHIND rule breaks
    for out_eps in (800.0, 899.0, 901.0, 950.0):
        below = output_margin(_window(out_eps), Policy(), _config()) < Policy().min_throughput_ratio - 1
        assert below == any(b.kind is BreachKind.BEHIND for b in judge(_window(out_eps), Policy(), _config()).breaches)


def test_a_config_falling_behind_is_not_excused_by_its_growing_latency():
    # a small-batch config 8 % short whose median latency grew to 20 s: the latency says "much in flight",
    # but its buffers hold 2 events; what piles up is backlog, not events in flight
    assert not judge(_window(out_eps=920.0, p50_s=20.0), Policy(), _config(min_events=1, pipelining=0)).ok


def test_batches_that_outlast_the_window_are_not_excused():
    # huge batches are trusted only up to the policy's share again: 15 % short is behind whatever they hold
    assert not judge(_window(out_eps=850.0, p50_s=20.0), Policy(), _config(min_events=100_000, timeout_s=60.0)).ok


def test_a_window_of_an_unknown_config_gets_the_policy_share_alone():
    assert judge(_window(out_eps=960.0), Policy(), None).ok
    assert not judge(_window(out_eps=940.0), Policy(), None).ok


def test_backlog_swinging_by_what_is_buffered_is_tolerated_but_growth_beyond_it_is_not():
    before = _window(out_eps=1000.0)
    swing = _window(out_eps=1000.0, backlog=2500)  # one 2048-event flush batch more waiting
    assert judge(swing, Policy(), _config(), before).ok
    growing = _window(out_eps=1000.0, backlog=500 + 30 * 150)  # 150 ev/s beyond 50 + 50 buffered
    [breach] = judge(growing, Policy(), _config(), before).breaches
    assert breach.kind is BreachKind.BACKLOG and "backlog grew 150 ev/s" in breach.message
    assert judge(growing, Policy(), _config()).ok  # no previous window, no trend to judge


def _quiet(offered_eps: float, backlog: int) -> Observation:
    """A minute in which the output matched a small input."""
    return Observation(duration_s=60, offered_eps=offered_eps, throughput_eps=offered_eps, p50_s=0.1, p95_s=0.2,
                       p99_s=0.3, mean_s=0.1, backlog_events={"kafka": backlog})


def test_the_backlog_may_grow_by_the_policys_share_of_the_input_and_no_more_however_small_the_input():
    # The policy's 1 - min_ratio is a share of the input, not a rate: a window with no input may grow no backlog
    # (read as ev/s, a 50 % share tolerated an idle minute's backlog growing by 29 events).
    [breach] = judge(_quiet(0.0, 29), Policy(min_throughput_ratio=0.5), None, _quiet(0.0, 0)).breaches
    assert breach.kind is BreachKind.BACKLOG and breach.limit == 0.0
    # at any input the backlog may grow as fast as the output may fall short (the BEHIND rule's allowance)
    for offered_eps in (0.4, 2.0, 1000.0):
        allowed = _quiet(offered_eps, 0).shortfall_allowed(0.95, 0.0)
        within, beyond = _quiet(offered_eps, math.floor(allowed)), _quiet(offered_eps, math.floor(allowed) + 1)
        assert judge(within, Policy(), None, _quiet(offered_eps, 0)).ok
        assert not judge(beyond, Policy(), None, _quiet(offered_eps, 0)).ok


def test_each_breach_is_named_with_its_figure_and_limit():
    before = Observation(duration_s=10, offered_eps=300, throughput_eps=300, p50_s=1, p95_s=1, p99_s=1, mean_s=1,
                         backlog_events={"x": 100})
    window = Observation(duration_s=10, offered_eps=300, throughput_eps=250, p50_s=1, p95_s=9, p99_s=10, mean_s=2,
                         backlog_events={"x": 900})
    verdict = judge(window, Policy(p95_ceiling_s=5.0), _config(), before)
    assert [b.kind for b in verdict.breaches] == [BreachKind.BEHIND, BreachKind.BACKLOG, BreachKind.CEILING]
    assert "output" in verdict.messages[0] and "backlog" in verdict.messages[1] and "ceiling" in verdict.messages[2]
    ceiling = verdict.breaches[2]
    assert (ceiling.figure, ceiling.limit, ceiling.unit) == (9, 5.0, "s")
    assert verdict.excess > 0 and judge(before, Policy(), _config(), before).ok and judge(before, Policy(), _config()).excess == 0


def test_every_strategy_judges_a_window_short_of_its_input_with_a_growing_backlog_infeasible():
    # 4 % short of its input is within the policy's 5 %: only the growing backlog makes this window infeasible,
    # so a strategy that judged by the raw ratio (or by keeping up alone) would take it as feasible.
    policy = Policy()
    previous = _window(out_eps=1000.0)
    window = _window(out_eps=960.0, backlog=500 + 30 * 150)
    verdict = judge(window, policy, _config(), previous)
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
    assert judged["pipetune"].search.region.length < judged["pipetune"].settings.length_init
    # the paper's sweep keeps its best config: the tried one's lower P95 does not count
    assert judged["ovat"].best == start
    # Optuna's constraint is violated (> 0 is infeasible to Optuna)
    told = judged["optuna-tpe"].study.trials[-1]
    assert told.constraints == {"throughput": verdict.excess} and verdict.excess > 0


def test_a_strategy_told_a_feasible_verdict_takes_the_window():
    # the other side of the test above: the same window, judged feasible, is taken, so that test sees the verdict
    policy = Policy()
    window = _window(out_eps=960.0)
    verdict = judge(window, policy, _config())
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
    assert bayes.search.region.length == bayes.settings.length_init


def test_a_window_over_its_request_budget_breaks_the_budget_rule_in_requests_per_second():
    window = replace(_window(1000.0), produce_requests_per_s=700.0)
    (breach,) = judge(window, Policy(), _config(), budget_limits={REQUESTS: 120.0}).breaches
    assert breach.kind is BreachKind.BUDGET and (breach.figure, breach.limit, breach.unit) == (700.0, 120.0, "req/s")
    assert REQUESTS in breach.message
    assert judge(replace(window, produce_requests_per_s=None), Policy(), _config(),
                 budget_limits={REQUESTS: 120.0}).ok  # not measured: nothing to hold against it


def test_a_component_over_its_cpu_budget_breaks_the_budget_rule_and_is_not_behind():
    window = replace(_window(1000.0), cpu_cores={"filebeat": 0.2, "logstash": 0.1})
    verdict = judge(window, Policy(), _config(), budget_limits={"filebeat": 0.15, "logstash": 0.3})
    (breach,) = verdict.breaches
    assert breach.kind is BreachKind.BUDGET and (breach.figure, breach.limit, breach.unit) == (0.2, 0.15, "cores")
    assert "filebeat" in breach.message and verdict.over_budget and not verdict.behind
    assert judge(window, Policy(), _config(), budget_limits={"filebeat": 0.25}).ok  # within its limit
    assert judge(window, Policy(), _config()).ok  # no limits given: nothing budgeted


@pytest.mark.parametrize("out_eps, why", [(600.0, "behind"), (1400.0, "draining a backlog from before")])
def test_a_window_that_did_not_ship_its_own_load_says_nothing_of_the_configs_cpu(out_eps, why):
    # its parts run flat out on a queue whatever the config: a paper Logstash used 2.2 cores so, 0.7 keeping up
    window = replace(_window(out_eps, backlog=20_000), cpu_cores={"logstash": 2.2})
    verdict = judge(window, Policy(), _config(), budget_limits={"logstash": 0.8})
    assert not verdict.over_budget, why
    own_load = replace(_window(1000.0), cpu_cores={"logstash": 2.2})
    assert judge(own_load, Policy(), _config(), budget_limits={"logstash": 0.8}).over_budget


def test_a_reading_over_its_budget_by_no_more_than_its_noise_is_not_a_breach():
    window = replace(_window(1000.0), cpu_cores={"filebeat": 0.2})
    limits = {"filebeat": 0.18}  # 11 % over
    assert judge(window, Policy(), _config(), budget_limits=limits, budget_allowances={"filebeat": 0.15}).ok
    (breach,) = judge(window, Policy(), _config(), budget_limits=limits, budget_allowances={"filebeat": 0.05}).breaches
    assert breach.limit == 0.18 and "by more than its noise (5%)" in breach.message
