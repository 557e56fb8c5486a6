"""The network between the controller and the agents (issue 41, fault 1): a node cut off in the middle of a pool's
change, and every agent behind 300 ms each way or 5 % of packets lost.

Each agent (`pipetune agent`, over a stand-in Filebeat) runs in a network namespace of its own, reached from the
test's process over a link `testbed.netns` slows, thins or cuts. The daemon drives a real pool in this process, as
`controller.deployment.pool_pipeline` builds it (a `LivePipeline` per node, canary first), its figures from a stand-in
Prometheus whose per-node latency follows the flush timeout each node's files hold. What each node runs is read from
its files on disk, never over the link: the pool must never report a node on a version it is not on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import pytest
import yaml

from agents.client import AgentClient
from agents.filebeat.adapter import FilebeatAdapter
from agents.filebeat.patch import InputSelector
from agents.runtimes import ProcessRuntime
from controller.daemon import Daemon
from controller.live import LivePipeline
from controller.pipelines import ApplyReport, PipelineUnavailable
from controller.realizer import OutcomeKind
from controller.rollout import CanaryPool, LivePoolWindows, Phase
from controller.state import Action, Decision, StateStore
from controller.telemetry import PrometheusTelemetry
from models.policy import Policy
from models.rollout import plan_rollout
from models.space import PIPELINE_SPACE, Config
from testbed.netns import NodeNetwork, node_network
from tests.agents.conftest import TOKEN
from tests.agents.test_agent_restart import _stop, _wait_answering
from tests.controller.test_daemon import Scripted
from tests.controller.test_rollout import NODES as ROLLOUT_NODES, Node, Windows, _pool as _rollout_pool
from tests.controller.test_rollout import _window as rollout_window
from tests.controller.test_tuned_space import stand_in_filebeat
from tests.faults.test_sigkill import STAND_IN_FILEBEAT, TIMEOUT, StandInPrometheus, _until

DEFAULTS = PIPELINE_SPACE.defaults()
FASTER = PIPELINE_SPACE.config({TIMEOUT: 0.1}, base=DEFAULTS)
NAMES = ("node-1", "node-2")  # node-1 the canary, node-2 the control that takes the candidate in the next step
WINDOW_S = 1.0
CLIENT_TIMEOUT_S = 10.0  # a request to a cut-off agent fails after this (the daemon's default is 120 s)
AGENT_PORT, FILEBEAT_PORT = 8765, 5066  # each namespace has ports of its own


# test_sigkill's stand-in Filebeat, but only a process started after the hold was made is held: the running one
# stays healthy, as the daemon checks before a change
STAND_IN = STAND_IN_FILEBEAT.replace("held = os.path.exists(hold)",
                                     "held = os.path.exists(hold) and os.path.getmtime(hold) <= BORN").replace(
    "import http.server, json, os, sys\n", "import http.server, json, os, sys, time\nBORN = time.time()\n")


@dataclass
class NetNode:
    """One node: its namespace and link, its agent process, the files its Filebeat reads, and its health hold (a
    file: while it exists the stand-in Filebeat answers its health check 503 and notes that it was asked)."""

    name: str
    network: NodeNetwork
    agent: subprocess.Popen
    client: AgentClient
    runtime: ProcessRuntime
    adapter: FilebeatAdapter
    hold: Path
    started: Path

    def timeout_s(self) -> float:
        """The flush timeout the node's filebeat.yml holds, read from disk."""
        return float(self.adapter.read()[TIMEOUT])

    def starts(self) -> list[dict]:
        return [json.loads(line) for line in self.started.read_text().splitlines()] if self.started.exists() else []


def _start(name: str, network: NodeNetwork, directory: Path) -> NetNode:
    """`pipetune agent` started inside the namespace on the node's address (plain HTTP off loopback:
    --insecure-http), managing a stand-in Filebeat that serves its health on the namespace's own loopback."""
    raw = stand_in_filebeat(directory).model_dump(mode="json")
    config = Path(raw["components"][0]["config"])
    hold, started = directory / "hold-health", directory / "started.jsonl"
    (directory / "stand-in.py").write_text(STAND_IN)
    argv = [sys.executable, str(directory / "stand-in.py"), str(FILEBEAT_PORT), str(config), str(hold), str(started)]
    raw |= {"host": network.node_ip, "port": AGENT_PORT, "health_timeout_s": 120}
    raw["components"][0] |= {"http_port": FILEBEAT_PORT, "runtime": {"kind": "process", "argv": argv,
                                                                    "stop_timeout_s": 10}}
    (directory / "agent.yaml").write_text(yaml.safe_dump(raw))
    log = directory / "agent.log"
    with open(log, "ab") as out:
        agent = subprocess.Popen(network.argv([sys.executable, "-c", "from cli.main import app; app()", "agent",
                                               "--config", str(directory / "agent.yaml"), "--insecure-http"]),
                                 stdout=out, stderr=subprocess.STDOUT, cwd=Path(__file__).parents[2],
                                 env={**os.environ, "PIPETUNE_AGENT_TOKEN": TOKEN})
    client = AgentClient(f"http://{network.node_ip}:{AGENT_PORT}", TOKEN, timeout_s=CLIENT_TIMEOUT_S, node=name)
    runtime = ProcessRuntime("filebeat", argv, Path(raw["state_dir"]) / "filebeat" / "run")
    node = NetNode(name, network, agent, client, runtime,
                   FilebeatAdapter(config, [InputSelector(id="access")], Path(raw["components"][0]["binary"])),
                   hold, started)
    return node


@pytest.fixture
def net_nodes(tmp_path: Path) -> Iterator[dict[str, NetNode]]:
    """Two nodes, each an agent in a namespace of its own; agents stopped and namespaces gone after the test,
    however it ends."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces and TUN devices need root")
    with ExitStack() as stack:
        nodes: dict[str, NetNode] = {}
        for index, name in enumerate(NAMES):
            network = stack.enter_context(node_network(index))
            node = nodes[name] = _start(name, network, tmp_path / name)
            stack.callback(_stop, node.client, node.agent, node.runtime)
            _wait_answering(node.client, node.agent, tmp_path / name / "agent.log")
        yield nodes


@dataclass
class Pool:
    """The daemon over a canary pool of the nodes, built as the deployment builds one."""

    daemon: Daemon
    pool: CanaryPool
    store: StateStore
    prometheus: StandInPrometheus

    def close(self) -> None:
        self.pool.close()
        self.prometheus.close()


def _pool(nodes: dict[str, NetNode], state: Path) -> Pool:
    # the stand-in Prometheus asks each node's component for the values its files hold: here, the files on disk
    prometheus = StandInPrometheus({n: SimpleNamespace(components={"filebeat": SimpleNamespace(adapter=node.adapter)})
                                    for n, node in nodes.items()})
    telemetry = PrometheusTelemetry(prometheus.url)
    pipeline = LivePipeline([node.client for node in nodes.values()], telemetry, DEFAULTS)
    pool = CanaryPool({n: LivePipeline([node.client], telemetry, DEFAULTS) for n, node in nodes.items()},
                      LivePoolWindows(pipeline, telemetry), plan_rollout(NAMES, 1, 1), state / "rollout.json",
                      max_windows=3, node_versions=pipeline.node_versions)
    store = StateStore(state)
    daemon = Daemon(pool, Scripted(FASTER), Policy(min_dwell_windows=1), window_s=WINDOW_S, store=store,
                    realizer=pool)
    return Pool(daemon, pool, store, prometheus)


def _truthful(pool: CanaryPool, nodes: dict[str, NetNode]) -> None:
    """Every node the pool places on a version runs that version's config, by its files (version 0 the defaults,
    1 the candidate). A node the pool says it cannot place (unreachable) is the only exception."""
    rollout = pool.rollout()
    for name, record in rollout.nodes.items():
        if record.state != "unreachable":
            assert nodes[name].timeout_s() == (DEFAULTS, FASTER)[record.version][TIMEOUT], (name, rollout)


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
