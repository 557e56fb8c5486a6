"""The network between the controller and the agents (issue 41, fault 1): a node cut off in the middle of a pool's
change, and every agent behind 300 ms each way or 5 % of packets lost.

Each agent (`pipetune agent`, over a stand-in Filebeat) runs in a network namespace of its own, reached from the
test's process over a link `testbed.netns` slows, thins or cuts. The daemon drives a real pool in this process, as
`controller.deployment.pool_pipeline` builds it (a `LivePipeline` per node, canary first), its figures from a stand-in
Prometheus whose per-node latency follows the flush timeout each node's files hold. What each node runs is read from
its files on disk, never over the link: the pool must never report a node on a version it is not on."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Iterator

import pytest

from controller.pipelines import ApplyReport, PipelineUnavailable
from controller.realizer import OutcomeKind
from controller.rollout import CanaryPool, Phase
from controller.state import Action, Decision
from models.rollout import plan_rollout
from models.space import Config
from testbed.net_pool import DEFAULTS, FASTER, TIMEOUT, NetNode, Pool, build_pool, net_nodes as net_nodes_of
from testbed.net_pool import untruthful, until as _until
from tests.agents.conftest import TOKEN
from tests.controller.test_daemon import Scripted
from tests.controller.test_rollout import NODES as ROLLOUT_NODES, Node, Windows, _pool as _rollout_pool
from tests.controller.test_rollout import _window as rollout_window

@pytest.fixture
def net_nodes(tmp_path: Path) -> Iterator[dict[str, NetNode]]:
    """Two nodes, each an agent in a namespace of its own; agents stopped and namespaces gone after the test,
    however it ends."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces and TUN devices need root")
    with net_nodes_of(tmp_path, TOKEN) as nodes:
        yield nodes


def _pool(nodes: dict[str, NetNode], state: Path) -> Pool:
    return build_pool(nodes, state, Scripted(FASTER))


def _truthful(pool: CanaryPool, nodes: dict[str, NetNode]) -> None:
    """Every node the pool places on a version runs that version's config, by its files (version 0 the defaults,
    1 the candidate). A node the pool says it cannot place (unreachable) is the only exception."""
    assert not untruthful(pool, nodes, {0: DEFAULTS, 1: FASTER}), pool.rollout()


def _steps(run: Pool, nodes: dict[str, NetNode], until: Callable[[], bool], what: str, limit: int = 12
           ) -> list[Decision]:
    """The daemon's windows until `until` holds (at most `limit`), the pool checked truthful after each."""
    decisions = []
    while not until():
        assert len(decisions) < limit, f"{what}: not within {limit} windows: {[d.reason for d in decisions]}"
        decisions.append(run.daemon.step())
        _truthful(run.pool, nodes)
    return decisions


def _on_one_version(run: Pool, nodes: dict[str, NetNode], config: Config) -> None:
    rollout = run.pool.rollout()
    assert rollout.phase == "steady" and {(r.version, r.state) for r in rollout.nodes.values()} == {
        (rollout.promoted_version, "promoted")}, rollout
    assert run.pool.current() == config and all(node.timeout_s() == config[TIMEOUT] for node in nodes.values())


# -- the pool over stand-in nodes (tests/controller/test_rollout.py): fast ----------------------------------------


def _cut_off(node: Node, *, answer_lost: bool = False) -> None:
    """The node's agent does not answer a change from now on; `answer_lost`: it makes the change, its answer lost."""
    real = node.apply

    def apply(config: Config) -> ApplyReport:
        if answer_lost:
            real(config)
        raise PipelineUnavailable("agent at http://10.241.0.2:8765: timed out")
    node.apply = apply


def test_a_canary_whose_answer_is_lost_is_held_unreachable_and_taken_back_once_it_answers(tmp_path):
    pool, nodes, _, _ = _rollout_pool(tmp_path, loads=[1.0])
    _cut_off(nodes["node-1"], answer_lost=True)
    rollout_window(pool)
    with pytest.raises(PipelineUnavailable, match=r"node-1 did not answer in the middle of a rollout \(version 1 on "
                                                  r"the canary, not judged yet\)"):
        pool.realize(FASTER)
    assert nodes["node-1"].config == FASTER  # made: before, the pool recorded it on version 0, steady
    assert pool.state.phase is Phase.CANARY and pool.rollout().nodes["node-1"].state == "unreachable"
    with pytest.raises(PipelineUnavailable, match="node-1 did not answer"):
        rollout_window(pool)  # still silent: the window passes, held
    del nodes["node-1"].apply
    _, outcome = rollout_window(pool)
    assert all(node.config == DEFAULTS for node in nodes.values()) and pool.state.phase is Phase.STEADY
    assert outcome.rollout.recovered.startswith("every node answers again: found node-1 unreachable, last on version 0")
    assert "took the canary back (node-1: reloaded); every node on version 0" in outcome.rollout.recovered


def test_no_candidate_goes_on_the_canary_while_a_node_of_the_pool_does_not_answer(tmp_path):
    nodes = {name: Node(DEFAULTS, [], threading.Lock()) for name in ROLLOUT_NODES}
    silent = {"node-3"}
    pool = CanaryPool(nodes, Windows(nodes, [1.0]), plan_rollout(ROLLOUT_NODES, 1, 1), tmp_path / "rollout.json",
                      max_windows=3, node_versions=lambda: {n: None if n in silent else {"filebeat": 1} for n in nodes})
    rollout_window(pool)
    with pytest.raises(PipelineUnavailable, match="node-3 did not answer: no candidate goes on the canary"):
        pool.realize(FASTER)
    assert all(node.config == DEFAULTS for node in nodes.values()) and pool.state.phase is Phase.STEADY
    silent.clear()
    assert pool.realize(FASTER).kind is OutcomeKind.CANARY


def test_a_daemon_restarted_while_a_node_does_not_answer_holds_the_rollout_and_finishes_it_when_it_does(tmp_path):
    pool, nodes, windows, _ = _rollout_pool(tmp_path, loads=[1.0])
    rollout_window(pool)
    pool.realize(FASTER)
    _cut_off(nodes["node-2"])
    with pytest.raises(PipelineUnavailable):
        rollout_window(pool)  # judged better, held at node-2's step
    restarted = CanaryPool(nodes, windows, pool.plan, tmp_path / "rollout.json", max_windows=3)
    assert restarted.state.phase is Phase.PROMOTING and "node-2 did not answer" in restarted.state.recovered
    assert restarted.state.recovered.startswith("the daemon restarted in the middle of a rollout: found version 1 ")
    del nodes["node-2"].apply
    rollout_window(restarted)
    assert all(node.config == FASTER for node in nodes.values()) and restarted.state.phase is Phase.STEADY


# -- real agents in network namespaces: slow ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("cut", ["before-its-step", "while-its-agent-applies"])
def test_a_node_cut_off_during_a_promotion_freezes_the_pool_naming_it_and_the_promotion_ends_when_it_is_back(
        net_nodes, tmp_path, cut):
    run = _pool(net_nodes, tmp_path / "state")
    node_2 = net_nodes["node-2"]
    try:
        run.daemon.warm_up()
        _steps(run, net_nodes, lambda: run.pool.state.phase == "canary", "the candidate on the canary")
        assert net_nodes["node-1"].timeout_s() == 0.1 and node_2.timeout_s() == 1.0
        if cut == "before-its-step":
            node_2.network.partition()
            frozen = run.daemon.step()  # the canary judged better; node-2's step cannot reach its agent
        else:
            # node-2's agent writes the candidate and restarts Filebeat, whose health the test holds back; cut off
            # then, the agent puts the change in force but its answer never arrives
            node_2.hold.touch()
            stepped: list[Decision] = []
            stepping = threading.Thread(target=lambda: stepped.append(run.daemon.step()))
            stepping.start()
            asked = node_2.hold.with_name(node_2.hold.name + ".asked")
            _until(lambda: len(node_2.starts()) == 2 and asked.exists()
                   and str(node_2.starts()[-1]["pid"]) in asked.read_text(),
                   "node-2's new Filebeat asked for its health")
            node_2.network.partition()
            node_2.hold.unlink()
            _until(lambda: node_2.timeout_s() == 0.1 and not (node_2.runtime.run_dir.parent / "pending").exists(),
                   "node-2's agent done with the change")
            stepping.join(120)
            [frozen] = stepped
        _truthful(run.pool, net_nodes)
        assert frozen.action == Action.FROZEN and "node-2" in frozen.reason, frozen.reason
        rollout = run.pool.rollout()
        assert rollout.phase == "promoting" and rollout.nodes["node-2"].state == "unreachable", rollout
        assert "node-2" in run.store.load_status()["last_decision"]["reason"]

        held = run.daemon.step()  # still cut off: held again, nothing else changed
        assert held.action == Action.FROZEN and "node-2" in held.reason and run.pool.state.phase == "promoting"
        _truthful(run.pool, net_nodes)

        node_2.network.heal()
        resumed = run.daemon.step()
        _truthful(run.pool, net_nodes)
        assert resumed.action != Action.FROZEN, resumed.reason
        did = "already in place" if cut == "while-its-agent-applies" else "filebeat restarted"
        assert f"node-2: {did}" in resumed.rollout.recovered and "every node on version 1" in resumed.rollout.recovered
        _on_one_version(run, net_nodes, FASTER)
    finally:
        node_2.hold.unlink(missing_ok=True)
        node_2.network.heal()
        run.close()


@pytest.mark.slow
@pytest.mark.parametrize("shape", [{"delay_s": 0.3}, {"loss": 0.05}], ids=["300ms-each-way", "5pct-loss"])
def test_a_slow_or_lossy_network_still_promotes_the_candidate_and_never_half_changes_the_pool(
        net_nodes, tmp_path, shape):
    for node in net_nodes.values():
        node.network.shape(**shape)
    run = _pool(net_nodes, tmp_path / "state")
    try:
        run.daemon.warm_up()
        decisions = _steps(run, net_nodes, lambda: run.pool.state.version == 1 and run.pool.state.phase == "steady",
                           "the candidate promoted")
        assert any(d.outcome and d.outcome.kind == "promoted" or d.rollout and d.rollout.recovered
                   for d in decisions), [d.reason for d in decisions]
        _on_one_version(run, net_nodes, FASTER)
    finally:
        run.close()
