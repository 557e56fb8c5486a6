"""A pool's changes canary first: judged against the controls over the same windows, promoted in steps or
taken back, each outcome said as such, each node's version recorded, and a restarted daemon finishing or
reverting what it found.

The nodes here are in-memory stand-ins for node agents (the agent's own apply, health check and rollback
are tested in tests/agents); what is under test is the order and the bookkeeping of the rollout."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from agents.probe.metrics import LATENCY_BUCKETS_S
from controller.daemon import Daemon
from controller.pipelines import ApplyReport, PipelineUnavailable, TwinPipeline
from controller.realizer import Outcome, OutcomeKind
from controller.rollout import CanaryPool, Phase, PoolWindow, TwinPoolWindows
from controller.state import StateStore
from models.canary import CanaryOutcome, LatencyHistogram
from models.observation import Observation
from models.policy import Policy
from models.rollout import NodeState, plan_rollout
from models.space import PIPELINE_SPACE, Config
from models.twin import load
from replay.profiles import Profile, WorkloadSpec, build_schedule
from tests.controller.test_daemon import Scripted

TIMEOUT = "filebeat.queue.mem.flush.timeout"
DEFAULTS = PIPELINE_SPACE.defaults()
FASTER = PIPELINE_SPACE.config({TIMEOUT: 0.1}, base=DEFAULTS)
SLOWER = PIPELINE_SPACE.config({TIMEOUT: 5.0}, base=DEFAULTS)
BOUNDS = tuple(0.001 * 1.25 ** i for i in range(60))
NODES = ("node-1", "node-2", "node-3", "node-4")


class Node:
    """A node whose agent puts a config in force, or refuses it (and keeps what it ran) when `refuses`; its
    latency is ten times as high on `slow_on` (its own traffic suffers from it), and unread on `silent_on`."""

    def __init__(self, config: Config, changes: list, lock: threading.Lock) -> None:
        self.config = config
        self.refuses: Config | None = None
        self.slow_on: Config | None = None
        self.silent_on: Config | None = None
        self.changes, self.lock = changes, lock

    def apply(self, config: Config) -> ApplyReport:
        if config == self.refuses:
            return ApplyReport(False, self.config, 0.0, "not healthy after the change: rolled back")
        with self.lock:  # a step changes its nodes from threads of its own
            self.changes.append((self, config))
        self.config = config
        return ApplyReport(True, config, 0.0, "reloaded")

    def current(self) -> Config:
        return self.config


class Windows:
    """Each node's latencies: its flush timeout times the pool's load, which moves every window (then holds),
    times the node's factor in `apart` on any config but the defaults (its own rate sets its batches' wait);
    `events` per node and window likewise (3000 once the list is spent). `observed` counts the windows."""

    def __init__(self, nodes: dict[str, Node], loads: list[float]) -> None:
        self.nodes, self.loads = nodes, list(loads)
        self.rng = np.random.default_rng(7)
        self.silent: set[str] = set()
        self.apart: dict[str, float] = {}
        self.events: list[int] = []
        self.observed = 0
        self.fails_at: int | None = None  # the window at which the controller "dies" (not PipelineUnavailable)
        self.unavailable_at: int | None = None  # the window no node can be read in

    def observe(self, seconds: float) -> PoolWindow:
        self.observed += 1
        if self.observed == self.fails_at:
            raise KeyboardInterrupt("the daemon is stopped in the middle of a window")
        if self.observed == self.unavailable_at:
            raise PipelineUnavailable("telemetry: Prometheus at http://127.0.0.1:1 did not answer")
        load = self.loads.pop(0) if len(self.loads) > 1 else self.loads[0]  # the last load holds
        events = self.events.pop(0) if self.events else 3000
        latency = {}
        for name, node in self.nodes.items():
            if name not in self.silent and node.config != node.silent_on:
                median_s = (0.02 + node.config[TIMEOUT] * 0.5) * load * (10.0 if node.config == node.slow_on else 1.0)
                median_s *= 1.0 if node.config == DEFAULTS else self.apart.get(name, 1.0)
                latency[name] = LatencyHistogram.of(self.rng.lognormal(np.log(median_s), 0.3, events), BOUNDS)
        p95 = LatencyHistogram.merge(latency.values()).quantile_s()
        offered_eps = 1000.0 * load
        return PoolWindow(Observation(seconds, offered_eps, offered_eps, p95 / 2, p95, p95, p95 / 2, events_in=3000),
                          latency)

    def close(self) -> None:
        pass


def _pool(tmp_path: Path, loads: list[float], canary_nodes: int = 1, max_unavailable: int = 1, max_windows: int = 3,
          ) -> tuple[CanaryPool, dict[str, Node], Windows, list]:
    changes: list = []
    lock = threading.Lock()
    nodes = {name: Node(DEFAULTS, changes, lock) for name in NODES}
    windows = Windows(nodes, loads)
    plan = plan_rollout(NODES, canary_nodes, max_unavailable)
    return CanaryPool(nodes, windows, plan, tmp_path / "rollout.json", max_windows=max_windows), nodes, windows, changes


def _versions(pool: CanaryPool) -> dict[str, tuple[int, NodeState]]:
    return {node: (r.version, NodeState(r.state)) for node, r in pool.rollout().nodes.items()}


def _window(pool: CanaryPool) -> tuple[Observation, Outcome]:
    """One window as the daemon reads it: the observation it judges and tells the learner (the judged one,
    where the pool judged its canary), and what the pool concluded of the window."""
    measured = pool.observe(30)
    outcome = pool.conclude(30)
    return outcome.observation or measured, outcome


def _trial(pool: CanaryPool) -> list[Outcome]:
    """Windows as the daemon reads them while a canary is on trial, up to the one that ends it."""
    outcomes = [_window(pool)[1]]
    while outcomes[-1].kind is OutcomeKind.EXTENDED:
        outcomes.append(_window(pool)[1])
    return outcomes


def test_a_better_canary_is_promoted_in_steps_although_the_load_rose_on_every_node(tmp_path):
    pool, nodes, _, changes = _pool(tmp_path, loads=[1.0, 1.6], max_unavailable=2)
    _window(pool)
    assert pool.realize(FASTER).kind is OutcomeKind.CANARY
    assert [n.config for n in nodes.values()] == [FASTER, DEFAULTS, DEFAULTS, DEFAULTS]
    judged, outcome = _window(pool)  # every node's latency rose with the load; the canary's fell against them
    assert outcome.kind is OutcomeKind.PROMOTED and outcome.config == FASTER and outcome.windows == 1
    assert outcome.judgement.outcome is CanaryOutcome.BETTER and outcome.judgement.high_s < 0
    assert all(n.config == FASTER for n in nodes.values())
    changed = [node for node, _ in changes]  # the canary, then two controls at once, then the last
    assert changed[0] is nodes["node-1"] and set(changed[1:3]) == {nodes["node-2"], nodes["node-3"]}
    assert changed[3:] == [nodes["node-4"]]
    assert _versions(pool) == {name: (1, NodeState.PROMOTED) for name in NODES}
    assert pool.current() == FASTER and pool.state.phase is Phase.STEADY
    # told at the load before the change: FASTER's P95 there is ~0.1 s; the raw window, at 1.6x, ~0.18 s
    assert 0.07 < judged.p95_s < 0.13
    assert "interval" in pool.state.judgement


def test_the_learner_is_told_the_judged_p95_with_the_spread_its_interval_implies(tmp_path):
    pool, _, _, _ = _pool(tmp_path, loads=[1.0, 1.6])
    plain, steady = _window(pool)
    # a window that judged nothing: told as measured, the learner estimates its noise itself
    assert steady.kind is OutcomeKind.APPLIED and steady.observation is None and plain.p95_sd_s is None
    pool.realize(FASTER)
    judged, outcome = _window(pool)
    low_ms, high_ms = (float(v) for v in pool.state.judgement.split("interval ")[1].removesuffix(" ms").split(" .. "))
    # a 95 % interval spans ±1.96 standard deviations (its bounds are printed to 0.1 ms)
    assert judged.p95_sd_s == pytest.approx((high_ms - low_ms) / 1e3 / (2 * 1.96), abs=0.1e-3 / 1.96)
    assert 0 < judged.p95_sd_s < judged.p95_s
    assert (outcome.judgement.low_s, outcome.judgement.high_s) == pytest.approx((low_ms / 1e3, high_ms / 1e3),
                                                                                abs=0.05e-3)


def test_a_worse_canary_is_taken_back_and_the_controls_are_never_touched(tmp_path):
    pool, nodes, _, changes = _pool(tmp_path, loads=[1.0, 0.7, 1.0])
    before, _ = _window(pool)
    pool.realize(SLOWER)
    judged, outcome = _window(pool)  # the load fell everywhere: the canary's raw P95 alone would hide the harm
    assert outcome.kind is OutcomeKind.REVERTED and outcome.config == SLOWER  # the config the judged window ran
    assert outcome.judgement.outcome is CanaryOutcome.WORSE and outcome.message.startswith("worse")
    assert [n for n, _ in changes] == [nodes["node-1"], nodes["node-1"]]  # on, then back
    assert all(n.config == DEFAULTS for n in nodes.values())
    assert judged.p95_s > before.p95_s
    assert _versions(pool)["node-1"] == (0, NodeState.ROLLED_BACK) and "worse" in pool.state.judgement


def test_after_a_canary_is_taken_back_the_pool_reports_the_config_its_nodes_run(tmp_path):
    pool, nodes, _, _ = _pool(tmp_path, loads=[1.0])
    _window(pool)
    pool.realize(SLOWER)
    assert pool.current() == SLOWER  # on the canary, being judged
    _, outcome = _window(pool)
    assert outcome.kind is OutcomeKind.REVERTED and outcome.config == SLOWER
    assert pool.current() == DEFAULTS and nodes["node-1"].config == DEFAULTS  # no window reports the candidate
    assert pool.report().rollout.phase == "steady"


def test_a_change_the_canary_refuses_is_refused_and_the_pool_stays_as_it_was(tmp_path):
    pool, nodes, _, changes = _pool(tmp_path, loads=[1.0])
    nodes["node-1"].refuses = FASTER
    _window(pool)
    outcome = pool.realize(FASTER)
    assert outcome.kind is OutcomeKind.REFUSED and not outcome.in_force
    assert outcome.message == "canary refused the change (node-1: not healthy after the change: rolled back)"
    assert not changes and pool.current() == DEFAULTS and pool.state.phase is Phase.STEADY
    _, steady = _window(pool)
    assert steady.kind is OutcomeKind.APPLIED and steady.in_force and steady.config == DEFAULTS


def test_once_the_nodes_p95s_part_with_their_rates_the_next_canary_is_judged_against_its_usual_ratio(tmp_path):
    # on any tuned config the controls' P95 is twice the canary's (a quarter of its rate): the baseline of the
    # next canary is 50 % off the controls', which is where it usually stands, not a backlog left
    pool, nodes, windows, _ = _pool(tmp_path, loads=[1.0])
    windows.apart = {"node-2": 2.0, "node-3": 2.0, "node-4": 2.0}
    _window(pool)
    pool.realize(FASTER)
    _window(pool)
    assert pool.state.version == 1
    fastest = PIPELINE_SPACE.config({TIMEOUT: 0.02}, base=DEFAULTS)
    _window(pool)
    pool.realize(fastest)
    _window(pool)
    assert "no common baseline" not in pool.state.judgement
    assert pool.state.version == 2 and all(node.config == fastest for node in nodes.values())
    # the usual ratio is kept in the state file: a restarted daemon does not take a backlog's for it
    _window(pool)
    pool.realize(PIPELINE_SPACE.config({TIMEOUT: 0.04}, base=DEFAULTS))
    _window(pool)  # worse: taken back, the pool stays on version 2
    assert pool.state.version == 2 and pool.state.baseline_ratios == [pytest.approx(0.5, rel=0.1)]
    restarted = CanaryPool(nodes, windows, pool.plan, tmp_path / "rollout.json", max_windows=3)
    assert restarted.state.baseline_ratios == pool.state.baseline_ratios


def test_a_node_failing_its_health_check_in_promotion_stays_back_alone(tmp_path):
    pool, nodes, _, _ = _pool(tmp_path, loads=[1.0, 1.0])
    nodes["node-3"].refuses = FASTER
    _window(pool)
    pool.realize(FASTER)
    _window(pool)
    assert [n.config for n in nodes.values()] == [FASTER, FASTER, DEFAULTS, FASTER]
    versions = _versions(pool)
    assert versions["node-3"] == (0, NodeState.ROLLED_BACK)
    assert all(versions[n] == (1, NodeState.PROMOTED) for n in ("node-1", "node-2", "node-4"))
    recorded = json.loads((tmp_path / "rollout.json").read_text())
    assert {v["node"]: v["state"] for v in recorded["nodes"]}["node-3"] == "rolled_back"


def test_a_config_the_pool_ran_before_goes_back_to_every_node_at_once(tmp_path):
    pool, nodes, _, _ = _pool(tmp_path, loads=[1.0, 1.0])
    _window(pool)
    pool.realize(FASTER)
    _window(pool)  # promoted everywhere
    outcome = pool.realize(DEFAULTS)  # the config the run started from: the daemon reverting on exit
    assert outcome.kind is OutcomeKind.APPLIED and all(node.config == DEFAULTS for node in nodes.values())
    assert pool.current() == DEFAULTS and _versions(pool) == {name: (2, NodeState.PROMOTED) for name in NODES}


def test_a_restart_finishes_a_promotion_judged_better(tmp_path):
    pool, nodes, windows, _ = _pool(tmp_path, loads=[1.0, 1.0])
    nodes["node-4"].refuses = FASTER  # the daemon "dies" before node-4's step: it is left pending
    _window(pool)
    pool.realize(FASTER)
    _window(pool)
    state = json.loads((tmp_path / "rollout.json").read_text())
    state["phase"], state["candidate"], state["version"], state["promoted"] = "promoting", dict(FASTER), 0, dict(DEFAULTS)
    state["nodes"][3] = {"node": "node-4", "version": 0, "state": "pending"}
    (tmp_path / "rollout.json").write_text(json.dumps(state))
    nodes["node-4"].refuses = None
    restarted = CanaryPool(nodes, windows, pool.plan, tmp_path / "rollout.json", max_windows=3)
    assert nodes["node-4"].config == FASTER and restarted.current() == FASTER
    assert _versions(restarted)["node-4"] == (1, NodeState.PROMOTED)


def test_a_restart_that_finds_every_node_on_another_config_takes_it_as_promoted(tmp_path):
    """The nodes were reset while the daemon was stopped (redeployed on their files): a canary taken back goes back to
    what its controls run, not to the stored promoted config, so a later canary starts where its controls stand."""
    pool, nodes, windows, _ = _pool(tmp_path, loads=[1.0])
    _window(pool)
    pool.realize(FASTER)
    _window(pool)  # promoted everywhere
    for node in nodes.values():
        node.config = DEFAULTS
    restarted = CanaryPool(nodes, windows, pool.plan, tmp_path / "rollout.json", max_windows=1)
    assert restarted.current() == DEFAULTS and "changed outside the rollout, taken as version 2" in \
        restarted.state.recovered and _versions(restarted) == {name: (2, NodeState.PROMOTED) for name in NODES}
    nodes["node-1"].slow_on = SLOWER
    _window(restarted)
    restarted.realize(SLOWER)
    assert _trial(restarted)[-1].kind is OutcomeKind.REVERTED
    assert nodes["node-1"].config == DEFAULTS and "no common baseline" not in restarted.state.judgement
    # nodes that do not agree are the rollout's to bring together: the stored promoted config stands
    for name, node in nodes.items():
        node.config = FASTER if name == "node-2" else SLOWER
    assert CanaryPool(nodes, windows, pool.plan, tmp_path / "rollout.json", max_windows=1).current() == DEFAULTS


def test_a_restart_reverts_a_canary_not_yet_judged(tmp_path):
    pool, nodes, windows, _ = _pool(tmp_path, loads=[1.0])
    _window(pool)
    pool.realize(FASTER)
    restarted = CanaryPool(nodes, windows, pool.plan, tmp_path / "rollout.json", max_windows=3)
    assert nodes["node-1"].config == DEFAULTS and restarted.current() == DEFAULTS
    assert "restarted" in restarted.state.judgement


def test_a_restart_of_the_canary_settles_a_window_before_it_is_judged(tmp_path):
    pool, nodes, _, _ = _pool(tmp_path, loads=[1.0, 3.0, 1.0])

    def restarting(config: Config) -> ApplyReport:
        nodes["node-1"].config = config
        return ApplyReport(True, config, 4.0, "restarted")
    nodes["node-1"].apply = restarting
    _window(pool)
    assert pool.realize(FASTER).pause_s == 4.0
    _, settling = _window(pool)  # the restart's window: not judged
    assert settling.kind is OutcomeKind.CANARY and settling.config == FASTER and pool.state.phase is Phase.CANARY
    _, judged = _window(pool)
    assert judged.kind is OutcomeKind.PROMOTED and all(n.config == FASTER for n in nodes.values())


def test_a_node_without_latency_leaves_the_canary_unjudged_and_taken_back(tmp_path):
    pool, nodes, windows, _ = _pool(tmp_path, loads=[1.0, 1.0])
    _window(pool)
    pool.realize(FASTER)
    windows.silent.add("node-3")
    *extended, outcome = _trial(pool)
    assert [o.kind for o in extended] == [OutcomeKind.EXTENDED] * 2  # unclear: judged again, up to 3 windows
    assert outcome.kind is OutcomeKind.REVERTED and outcome.judgement.outcome is CanaryOutcome.UNCLEAR
    assert nodes["node-1"].config == DEFAULTS and "node-3" in pool.state.judgement


def test_an_agent_that_does_not_answer_during_promotion_holds_it_until_it_answers(tmp_path):
    """Before, the node was recorded rolled back and the promotion went on without it: the pool ended promoted
    with node-2 on the version before, and nothing ever put it on the promoted one (tests/faults/test_network.py)."""
    pool, nodes, _, _ = _pool(tmp_path, loads=[1.0, 1.0])

    def gone(config: Config) -> ApplyReport:
        raise PipelineUnavailable("node node-2: agent at http://127.0.1.2:1: connection refused")
    nodes["node-2"].apply = gone
    _window(pool)
    pool.realize(FASTER)
    for _ in range(2):  # the judged window, then one while node-2 is still silent
        with pytest.raises(PipelineUnavailable, match="node-2 did not answer in the middle of a rollout"):
            _window(pool)
        assert _versions(pool)["node-2"] == (0, NodeState.UNREACHABLE) and pool.state.phase is Phase.PROMOTING
        assert nodes["node-3"].config == DEFAULTS and nodes["node-4"].config == DEFAULTS
    del nodes["node-2"].apply  # it answers again
    _window(pool)
    assert all(node.config == FASTER for node in nodes.values()) and pool.state.phase is Phase.STEADY
    assert set(_versions(pool).values()) == {(1, NodeState.PROMOTED)}
    assert pool.rollout().recovered.startswith("every node answers again: found node-1 promoted on version 1, node-2 "
                                               "unreachable, last on version 0, node-3 pending on version 0")


def test_a_pool_without_controls_is_refused(tmp_path):
    with pytest.raises(ValueError, match="control nodes"):
        CanaryPool({}, Windows({}, []), plan_rollout(["only"], 1, 1), max_windows=3)
    with pytest.raises(ValueError, match="canary_max_windows: 0 is below 1"):
        CanaryPool({}, Windows({}, []), plan_rollout(["a", "b"], 1, 1), max_windows=0)


def _twin_pool(tmp_path: Path, rates_eps: tuple[float, ...]) -> tuple[CanaryPool, dict[str, TwinPipeline]]:
    nodes = {f"node-{i + 1}": TwinPipeline(DEFAULTS, build_schedule(WorkloadSpec(Profile.steady, rate, 1800, seed=i))
                                           .schedule.times_s, load("paper-2vcpu"), seed=i)
             for i, rate in enumerate(rates_eps)}
    plan = plan_rollout(list(nodes), 1, 1)
    return CanaryPool(nodes, TwinPoolWindows(nodes), plan, tmp_path / "rollout.json", max_windows=3), nodes


def test_the_twin_pool_sums_its_nodes_and_keeps_each_nodes_latency(tmp_path):
    pool, nodes = _twin_pool(tmp_path, (300.0, 450.0, 600.0))
    window = pool.windows.observe(30)
    assert window.observation.offered_eps == pytest.approx(1350, rel=0.05)
    assert set(window.latency) == set(nodes)
    assert sum(h.total for h in window.latency.values()) == window.observation.events_out
    # its percentiles are read from those histograms, as the probe's are: no finer than their first bucket
    assert window.observation.latency_resolution_s == LATENCY_BUCKETS_S[0]


def test_the_daemon_drives_a_twin_pool_canary_first_better_promoted_worse_taken_back(tmp_path):
    faster = PIPELINE_SPACE.config({"filebeat.backoff": 0.1, "filebeat.max_backoff": 0.5,
                                    "filebeat.queue.mem.flush.timeout": 0.05}, base=DEFAULTS)
    slower = PIPELINE_SPACE.config({"filebeat.backoff": 5.0, "filebeat.max_backoff": 30.0}, base=faster)
    pool, nodes = _twin_pool(tmp_path, (450.0, 450.0, 450.0))
    daemon = Daemon(pool, Scripted(faster, slower, faster), Policy(min_dwell_windows=1), window_s=30.0,
                    realizer=pool)
    daemon.warm_up()
    decisions = []
    for _ in range(6):
        decisions.append(daemon.step())
        if pool.state.version == 1 and pool.state.phase is Phase.STEADY and "worse" in pool.state.judgement:
            break
    assert all(node.current() == faster for node in nodes.values())  # faster promoted, slower taken back
    judged = [(d.outcome.kind, d.config) for d in decisions if d.outcome.kind in ("promoted", "reverted")]
    assert judged == [("promoted", dict(faster)), ("reverted", dict(slower))]
    assert pool.state.promoted == dict(faster) and "worse" in pool.state.judgement
    assert _versions(pool)["node-1"] == (1, NodeState.ROLLED_BACK)
    assert all(_versions(pool)[n] == (1, NodeState.PROMOTED) for n in ("node-2", "node-3"))


def test_the_daemon_keeps_what_the_pool_promoted_although_the_load_moved_while_it_was_judged(tmp_path):
    # The load rose by half between the window before the change and the one that judged it: the pool
    # promoted the faster config against its controls, and the daemon must not take that for a new
    # situation and put its old incumbent back on every node (before, a re-measure of the defaults did).
    pool, nodes, _, _ = _pool(tmp_path, loads=[1.0, 1.0, 1.5])
    learner = Scripted(FASTER)
    daemon = Daemon(pool, learner, Policy(min_dwell_windows=1), window_s=30.0, realizer=pool)
    daemon.warm_up()
    decisions = [daemon.step() for _ in range(3)]
    assert pool.current() == FASTER and all(node.config == FASTER for node in nodes.values())
    assert daemon.incumbent.config == FASTER
    assert all(d.action != "remeasure" for d in decisions), [d.reason for d in decisions]
    # the learner is told the candidate's measured effect, as the outcome says it: at the load before the change
    told = next(observation for config, observation, _ in learner.told if config == FASTER)
    promoted = decisions[1].outcome
    assert promoted.kind == "promoted" and told.p95_sd_s == promoted.p95_sd_s is not None
    assert told.offered_eps == pytest.approx(1000.0) and decisions[1].observed["p95_s"] == told.p95_s


OTHER = PIPELINE_SPACE.config({"filebeat.backoff": 2.0}, base=DEFAULTS)  # a change the nodes' latency ignores


def test_a_thin_first_window_keeps_the_canary_one_more_window_and_judges_both_together(tmp_path):
    pool, nodes, windows, _ = _pool(tmp_path, loads=[1.0])
    windows.events = [3000, 150]  # the canary's first window has too few events for a P95: unclear
    _window(pool)
    pool.realize(FASTER)
    _, extended = _window(pool)
    assert extended.kind is OutcomeKind.EXTENDED and extended.windows == 1 and not extended.in_force
    assert "too few events" in extended.message and nodes["node-2"].config == DEFAULTS
    _, outcome = _window(pool)
    # judged again over both windows (3150 events), better: promoted; 2 canary windows, 3 steps, a baseline
    assert windows.observed == 1 + 2 + 3 + 1 and outcome.kind is OutcomeKind.PROMOTED and outcome.windows == 2
    assert all(node.config == FASTER for node in nodes.values()) and pool.state.version == 1
    assert "too few events" not in pool.state.judgement


def test_the_daemon_holds_and_tells_the_learner_nothing_while_an_unclear_canary_runs_one_more_window(tmp_path):
    pool, nodes, windows, _ = _pool(tmp_path, loads=[1.0])
    windows.events = [3000, 3000, 150]  # the canary's first window has too few events for a P95: unclear
    learner = Scripted(FASTER)
    daemon = Daemon(pool, learner, Policy(min_dwell_windows=1), window_s=30.0, realizer=pool)
    daemon.warm_up()
    first = daemon.step()
    told_before = len(learner.told)
    on_trial = daemon.step()
    assert on_trial.action == "hold" and on_trial.outcome.kind == "extended" and on_trial.change == {}
    assert on_trial.reason.startswith("canary on trial: unclear over 1 window(s)") and on_trial.config == dict(FASTER)
    assert len(learner.told) == told_before and on_trial.t_s == first.t_s + 30.0
    judged = daemon.step()
    assert judged.outcome.kind == "promoted" and judged.outcome.windows == 2
    assert all(node.config == FASTER for node in nodes.values())


def test_a_canary_still_unclear_after_its_windows_is_taken_back_and_the_learner_told_what_it_measured(tmp_path):
    pool, nodes, windows, _ = _pool(tmp_path, loads=[1.0], max_windows=3)
    before, _ = _window(pool)
    pool.realize(OTHER)
    assert [_window(pool)[1].kind for _ in range(2)] == [OutcomeKind.EXTENDED] * 2
    judged, outcome = _window(pool)
    assert windows.observed == 1 + 3 + 1  # three canary windows, then the baseline
    assert outcome.kind is OutcomeKind.REVERTED and outcome.windows == 3
    assert outcome.judgement.outcome is CanaryOutcome.UNCLEAR and outcome.judgement.low_s < 0 < outcome.judgement.high_s
    assert all(node.config == DEFAULTS for node in nodes.values())
    assert _versions(pool)["node-1"] == (0, NodeState.ROLLED_BACK) and pool.state.judgement.startswith("unclear")
    # the measured effect (about none) with the spread of its interval, not a window's raw P95
    assert judged.p95_sd_s is not None and 0 < judged.p95_sd_s < 0.1 * judged.p95_s  # buckets 25 % wide
    assert judged.p95_s == pytest.approx(before.p95_s, rel=0.05)


def test_one_canary_window_when_the_bound_is_one(tmp_path):
    pool, nodes, windows, _ = _pool(tmp_path, loads=[1.0], max_windows=1)
    _window(pool)
    pool.realize(OTHER)
    _window(pool)
    assert windows.observed == 1 + 1 + 1 and nodes["node-1"].config == DEFAULTS


def test_a_restart_in_the_middle_of_a_canarys_windows_reverts_it(tmp_path):
    pool, nodes, windows, _ = _pool(tmp_path, loads=[1.0])
    _window(pool)
    pool.realize(OTHER)
    windows.fails_at = 3  # the canary's first window was unclear; the daemon dies in its second
    assert _window(pool)[1].kind is OutcomeKind.EXTENDED
    with pytest.raises(KeyboardInterrupt):
        _window(pool)
    recorded = json.loads((tmp_path / "rollout.json").read_text())
    assert recorded["phase"] == "canary" and "judged again with one more" in recorded["judgement"]
    restarted = CanaryPool(nodes, windows, pool.plan, tmp_path / "rollout.json", max_windows=3)
    assert nodes["node-1"].config == DEFAULTS and restarted.state.phase is Phase.STEADY
    assert "restarted" in restarted.state.judgement


def test_a_canary_window_that_cannot_be_read_ends_its_trial_on_the_windows_read_before_it(tmp_path):
    pool, nodes, windows, _ = _pool(tmp_path, loads=[1.0])
    _window(pool)
    pool.realize(OTHER)
    assert _window(pool)[1].kind is OutcomeKind.EXTENDED
    windows.unavailable_at = 3
    with pytest.raises(PipelineUnavailable):
        _window(pool)
    _, outcome = _window(pool)  # the window after the gap is not part of the trial
    assert outcome.kind is OutcomeKind.REVERTED and outcome.windows == 1
    assert "window 2 unread: telemetry" in outcome.message and nodes["node-1"].config == DEFAULTS


def test_a_promotion_that_hurts_a_later_node_is_taken_back_from_every_node(tmp_path):
    # the canary's traffic gains from FASTER; node-3's own traffic (a flash sale) suffers from it
    pool, nodes, _, _ = _pool(tmp_path, loads=[1.0])
    nodes["node-3"].slow_on = FASTER
    before, _ = _window(pool)
    pool.realize(FASTER)
    judged, outcome = _window(pool)
    assert outcome.kind is OutcomeKind.TAKEN_BACK and outcome.config == FASTER  # what the judged windows ran
    assert outcome.judgement.outcome is CanaryOutcome.WORSE and outcome.judgement.low_s > 0  # node-3's step
    assert all(node.config == DEFAULTS for node in nodes.values())
    assert pool.current() == DEFAULTS and pool.state.version == 0 and pool.state.phase is Phase.STEADY
    report = pool.rollout()
    assert {n: (r.version, r.state) for n, r in report.nodes.items()} == {
        "node-1": (0, "rolled_back"), "node-2": (0, "rolled_back"), "node-3": (0, "rolled_back"),
        "node-4": (0, "promoted")}  # node-4's step never came: it kept the promoted config
    assert report.nodes["node-3"].judgement.startswith("worse") and report.nodes["node-2"].judgement
    assert report.judgement.startswith("promotion taken back: node-3 worse")
    recorded = json.loads((tmp_path / "rollout.json").read_text())
    assert {v["node"]: v["state"] for v in recorded["nodes"]}["node-3"] == "rolled_back"
    assert "node-3 worse" in recorded["judgement"]
    # told worse than what it replaced, as on node-3 (its P95 rose by a third), not the canary's gain
    assert judged.p95_s > 1.2 * before.p95_s and judged.p95_sd_s is not None


def test_a_step_that_cannot_be_told_from_the_others_goes_on(tmp_path):
    pool, nodes, _, _ = _pool(tmp_path, loads=[1.0])
    nodes["node-3"].silent_on = FASTER  # its step's window has no latency of it: unclear
    _window(pool)
    pool.realize(FASTER)
    _window(pool)
    assert all(node.config == FASTER for node in nodes.values()) and pool.current() == FASTER
    report = pool.rollout()
    assert report.nodes["node-3"].judgement.startswith("unclear") and report.nodes["node-3"].state == "promoted"
    assert report.nodes["node-4"].judgement.startswith(("better", "unclear"))


def test_the_decision_log_and_status_say_which_node_took_a_promotion_back(tmp_path):
    pool, nodes, _, _ = _pool(tmp_path, loads=[1.0])
    nodes["node-3"].slow_on = FASTER
    store = StateStore(tmp_path / "state")
    daemon = Daemon(pool, Scripted(FASTER), Policy(min_dwell_windows=1), window_s=30.0, store=store, realizer=pool)
    daemon.warm_up()
    decisions = [daemon.step() for _ in range(2)]
    logged = store.decisions()[-1]  # the decision log's line of the window that judged it
    assert logged["rollout"]["nodes"]["node-3"]["state"] == "rolled_back"
    assert "node-3 worse" in logged["rollout"]["judgement"]
    assert logged["outcome"]["kind"] == "taken_back" and logged["outcome"]["effect_s"] > 0
    assert logged["config"] == dict(FASTER) and daemon.incumbent.config == DEFAULTS
    status = daemon.status(decisions[1])
    assert status.rollout is not None and status.rollout.nodes["node-3"].judgement.startswith("worse")
    assert all(node.config == DEFAULTS for node in nodes.values())
