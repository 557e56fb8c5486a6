"""SIGKILL mid-apply (issue 41, fault 4): the agent killed between writing a version and the component's health check,
the daemon killed between a canary's promotion steps. On restart each finds one consistent version on every node, and
its log (the agent's audit log, the daemon's decision log) says what it found and what it did.

The fast tests kill at every point of a change in turn: `Killed`, raised in place of the n-th call the change makes
(a BaseException: no `except Exception` of the code under test runs, as after a real SIGKILL), then a fresh agent or
pool starts over the same files. The slow ones kill real processes, `pipetune agent` and `pipetune autotune`, at a
moment the test holds open (a stand-in Filebeat whose health the test withholds, an agent whose change it blocks)."""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from agents.adapter import ConfigStore
from agents.client import AgentClient
from agents.component import ManagedComponent
from agents.config import AgentConfig
from agents.runtimes import ProcessRuntime
from controller.daemon import Daemon
from controller.rollout import CanaryPool, Phase
from controller.state import StateStore
from models.policy import Policy
from testbed.daemon_kill import (Recovery, autotune, commit_group, kill_between_steps, recover_reason, restart,
                                 rollout, write_deployment)
from testbed.net_pool import STAND_IN_FILEBEAT, TIMEOUT, StandInPrometheus, until as _until
from tests.agents.conftest import TOKEN, ServedAgent
from tests.agents.test_agent_restart import _alive, _ignore, _start_agent, _stop, _wait_answering
from tests.agents.test_component import OPERATOR
from tests.conftest import free_ports
from tests.controller.test_daemon import Scripted
from tests.controller.test_rollout import DEFAULTS, FASTER, NODES, _pool, _window
from tests.controller.test_tuned_space import stand_in_filebeat
from tests.faults.conftest import StandInAgent

class Killed(BaseException):
    """The process's death at one point of a change: nothing after it runs, no handler of the code under test."""


class DeathAt:
    """Wraps methods so that the call numbered `at` (from 0, over every wrapped method) raises `Killed` instead of
    running (`after`: once it has run, its answer lost); every other call runs. `where` names the call it died at
    (None: the operation ran to its end)."""

    def __init__(self, at: int, *, after: bool = False) -> None:
        self.at, self.after, self.calls, self.where = at, after, 0, None

    def wrap(self, owner: object, *names: str) -> None:
        for name in names:
            setattr(owner, name, self._dying(name, getattr(owner, name)))

    def _dying(self, name: str, real: Callable) -> Callable:
        def call(*args, **kwargs):
            self.calls += 1
            dies = self.calls - 1 == self.at
            if dies and not self.after:
                self.where = name
                raise Killed(name)
            answer = real(*args, **kwargs)
            if dies:
                self.where = name
                raise Killed(name)
            return answer
        return call


# -- the agent, killed at each point of a change or a rollback ----------------------------------------------------

V1, V2 = {TIMEOUT: 0.5}, {TIMEOUT: 0.1}


def _node(directory: Path) -> StandInAgent:
    """A stand-in agent with version 1 in force."""
    node = StandInAgent(directory / "conf", directory / "state", directory / "data", directory)
    node.component.start()
    assert node.component.change(1, V1).status == "applied"
    return node


@pytest.fixture(scope="module")
def texts(tmp_path_factory) -> dict[int, str]:
    """filebeat.yml as versions 1 and 2 leave it, when nothing goes wrong."""
    node = _node(tmp_path_factory.mktemp("reference"))
    first = node.config.read_text()
    node.component.change(2, V2)
    return {1: first, 2: node.config.read_text()}


def _dies(node: StandInAgent, at: int) -> DeathAt:
    death = DeathAt(at)
    death.wrap(node.component.store, "set_pending", "put", "set_current", "audit")
    death.wrap(node.runtime, "stop", "restart")
    death.wrap(node.component.adapter, "apply", "health")  # apply: the files are written; health: being checked
    return death


def _restarted(node: StandInAgent) -> ManagedComponent:
    """The agent started again over the same files, state and (still running, or stopped) component."""
    again = ManagedComponent(node.component.adapter, node.runtime, ConfigStore(node.state, "filebeat"), {},
                             settle_s=0)
    again.start()
    return again


def _consistent(again: ManagedComponent, node: StandInAgent, texts: dict[int, str]) -> int:
    """The version the restarted agent reports, after checking the component runs it: its file that version's, the
    operator's untuned bytes with it, the process started on that file, no change left under way."""
    state = again.state()
    version = state["version"]
    assert version in texts and again.store.pending() is None and state["change_in_progress"] is False
    assert node.config.read_text() == texts[version]
    assert node.runtime.running() and node.runtime.started_on[-1] == texts[version]
    assert again.adapter.read()[TIMEOUT] == state["params"][TIMEOUT] == {1: V1, 2: V2}[version][TIMEOUT]
    return version


def _kill_points(operation: Callable[[StandInAgent], object], tmp_path: Path, *, before: dict | None = None
                 ) -> Iterator[tuple[StandInAgent, str]]:
    """A fresh node (version 1 in force, then `before`'s change as version 2 when given) killed at each call of
    `operation` in turn, until one runs to its end: the node and the call it died at."""
    for at in range(100):
        node = _node(tmp_path / str(at))
        if before is not None:
            assert node.component.change(2, before).status == "applied"
        death = _dies(node, at)
        try:
            operation(node)
        except Killed:
            yield node, death.where
            continue
        assert at > 5, "the kill points were not reached"
        return
    raise AssertionError("the operation never ran to its end")


def test_an_agent_killed_anywhere_in_a_change_restarts_on_one_version_and_says_what_it_found(tmp_path, texts):
    seen: dict[str, list[int]] = {}
    for node, where in _kill_points(lambda n: n.component.change(2, V2), tmp_path):
        logged, under_way, in_force = len(node.component.audit()), node.component.store.pending(), \
            node.component.store.current()
        again = _restarted(node)
        version = _consistent(again, node, texts)
        seen.setdefault(where, []).append(version)
        events = [e for e in again.audit()[logged:] if e["event"] in ("interrupted", "recovered")]
        if under_way is not None:  # the change had begun: the log says what was found, then what was done
            found, did = events
            assert (found["version"], found["in_force"], did["interrupted"], did["restored"]) == (2, version, 2,
                                                                                                   version)
            assert found["found"].startswith(("version 2 was", "version 2 had"))
        else:
            assert events == [] and version == in_force
        # Whatever the restart kept, the change can be asked for again and ends applied on version 2.
        retried = again.change(2, V2)
        assert (retried.status, retried.version) == ("applied", 2) and node.config.read_text() == texts[2]
    # Killed before `current` named it, the change is undone; once it did, it is kept.
    assert set(seen["health"]) == set(seen["apply"]) == {1} and seen["set_current"] == [1]
    assert seen["set_pending"] == [1, 2]


def test_an_agent_killed_in_a_change_health_check_finds_the_new_files_and_puts_the_old_version_back(tmp_path, texts):
    node = next(n for n, where in _kill_points(lambda n: n.component.change(2, V2), tmp_path) if where == "health")
    assert node.config.read_text() == texts[2] and node.runtime.started_on[-1] == texts[2]  # v2 written and running
    again = _restarted(node)
    assert _consistent(again, node, texts) == 1
    found, did = again.audit()[-2:]
    assert found["found"] == ("version 2 was being put in force, its health not yet confirmed; filebeat's files "
                              "hold version 2's values")
    assert did | {"at": 0} == {"at": 0, "event": "recovered", "interrupted": 2, "restored": 1}
    assert not (node.state / "filebeat" / "v2.json").exists()  # never decided: it can be sent again


def test_an_agent_killed_once_the_change_was_in_force_keeps_it(tmp_path, texts):
    """Killed after `current` named version 2 but before the change's end was written: before, the restarted agent
    deleted version 2's record and answered every request with an error (no stored current version)."""
    node = next(n for n, where in _kill_points(lambda n: n.component.change(2, V2), tmp_path)
                if where == "set_pending" and n.component.store.current() == 2)
    again = _restarted(node)
    assert _consistent(again, node, texts) == 2
    found, did = again.audit()[-2:]
    assert found["found"] == "version 2 was in force; only the end of its change was not recorded"
    assert (did["interrupted"], did["restored"]) == (2, 2)
    assert again.change(2, V2).status == "applied"  # the same answer again, from its record


def test_an_agent_killed_anywhere_in_a_rollback_restarts_on_one_version_and_keeps_both(tmp_path, texts):
    """Before, a rollback left no trace while under way: killed once it had written version 1's files, the agent came
    back reporting version 2 over them."""
    after_files = []
    for node, where in _kill_points(lambda n: n.component.rollback(), tmp_path, before=V2):
        again = _restarted(node)
        version = _consistent(again, node, texts)
        assert {p.name for p in (node.state / "filebeat").glob("v*.json")} == {"v0.json", "v1.json", "v2.json"}
        if where in ("apply", "health"):
            after_files.append(version)
    assert after_files and set(after_files) == {2}  # the rollback undone: version 2 back in force


# -- the daemon, killed at each node change of a canary, a promotion and a take-back ----------------------------------


def _dying_nodes(nodes: dict, at: int, *, applied: bool) -> DeathAt:
    """Kill the daemon at its `at`-th node change: while the agent still has it to do, or (`applied`) once the agent
    has put it in force but before the daemon heard back."""
    death = DeathAt(at, after=applied)
    for node in nodes.values():
        death.wrap(node, "apply")
    return death


def _through_the_rollout(pool: CanaryPool, candidate) -> None:
    _window(pool)
    pool.realize(candidate)
    _window(pool)  # judged: promoted in steps, or (a node slow on it) taken back


@pytest.mark.parametrize("applied", [False, True], ids=["before-the-agent-changed", "after-the-agent-changed"])
@pytest.mark.parametrize("slow_node", [None, "node-3"], ids=["promoted", "taken-back"])
def test_a_daemon_killed_at_any_node_change_restarts_with_every_node_on_one_config(tmp_path, applied, slow_node):
    kinds = set()
    for at in range(100):
        (tmp_path / f"{at}").mkdir()
        pool, nodes, windows, _ = _pool(tmp_path / f"{at}", loads=[1.0])
        if slow_node:
            nodes[slow_node].slow_on = FASTER
        death = _dying_nodes(nodes, at, applied=applied)
        try:
            _through_the_rollout(pool, FASTER)
        except Killed:
            pass
        else:
            assert at > 3 and death.where is None
            break
        state = json.loads((tmp_path / f"{at}" / "rollout.json").read_text())
        kinds.add(state["phase"])
        restarted = CanaryPool(nodes, windows, pool.plan, tmp_path / f"{at}" / "rollout.json", max_windows=3)
        config = restarted.current()
        assert all(node.config == config for node in nodes.values()), (at, state)
        report = restarted.rollout()
        assert report.phase == "steady" and len({n.version for n in report.nodes.values()}) == 1
        assert config == (FASTER if state["phase"] == "promoting" else DEFAULTS)
        assert report.recovered.startswith("the daemon restarted in the middle of a rollout: found version 1 ("
                                           f"{TIMEOUT} 1.0 → 0.1) ")
        assert report.recovered.endswith(f"every node on version {report.promoted_version}")
    assert kinds == {"canary", "promoting", "taking_back"} if slow_node else {"canary", "promoting"}


def test_a_daemon_killed_between_promotion_steps_finishes_the_promotion_and_its_log_says_so(tmp_path):
    pool, nodes, windows, _ = _pool(tmp_path, loads=[1.0])
    death = _dying_nodes(nodes, 2, applied=False)  # the canary's change, node-2's step, then node-3's: killed there
    with pytest.raises(Killed):
        _through_the_rollout(pool, FASTER)
    assert [n.config for n in nodes.values()] == [FASTER, FASTER, DEFAULTS, DEFAULTS] and death.where == "apply"
    restarted = CanaryPool(nodes, windows, pool.plan, tmp_path / "rollout.json", max_windows=3)
    assert all(node.config == FASTER for node in nodes.values()) and restarted.state.phase is Phase.STEADY
    assert {n: (v.version, v.state) for n, v in restarted.rollout().nodes.items()} == {
        n: (1, "promoted") for n in NODES}
    store = StateStore(tmp_path / "state")
    daemon = Daemon(restarted, Scripted(FASTER), Policy(min_dwell_windows=1), window_s=30.0, store=store,
                    realizer=restarted)
    daemon.warm_up()
    daemon.step()
    recover, first = store.decisions()
    assert recover["action"] == "recover" and recover["config"] == dict(FASTER)
    assert recover["reason"] == (
        f"the daemon restarted in the middle of a rollout: found version 1 ({TIMEOUT} 1.0 → 0.1) being promoted, "
        "node-1 promoted on version 1, node-2 promoted on version 1, node-3 pending on version 0, node-4 pending on "
        "version 0; finished the promotion, its remaining steps not judged (node-3: reloaded; node-4: reloaded); "
        "every node on version 1")
    # the words bench.faults and the real daemon test expect, as testbed.daemon_kill builds them
    assert recover["reason"] == recover_reason(TIMEOUT, 1.0, 0.1, {"node-1": (1, "promoted"), "node-2": (1, "promoted"),
                                                                   "node-3": (0, "pending"), "node-4": (0, "pending")},
                                               {"node-3": "reloaded", "node-4": "reloaded"})
    assert recover["rollout"]["recovered"] == recover["reason"] and first["rollout"]["recovered"] == ""
    assert first["action"] != "recover" and first["outcome"]["kind"] == "applied"


def test_a_daemon_killed_while_a_promotion_is_taken_back_takes_it_back_on_every_node(tmp_path):
    """Before, the phase stayed `promoting` while a promotion was taken back: a restart then finished the promotion,
    and the pool reported the candidate while the nodes already taken back ran the config before it."""
    pool, nodes, windows, _ = _pool(tmp_path, loads=[1.0])
    nodes["node-4"].slow_on = FASTER  # its step's window shows it worse: the promotion is taken back
    # forward: the canary, node-2, node-3, node-4; back: the canary, node-2 (its agent done): killed there
    _dying_nodes(nodes, 5, applied=True)
    with pytest.raises(Killed):
        _through_the_rollout(pool, FASTER)
    assert [n.config for n in nodes.values()] == [DEFAULTS, DEFAULTS, FASTER, FASTER]
    restarted = CanaryPool(nodes, windows, pool.plan, tmp_path / "rollout.json", max_windows=3)
    assert all(node.config == DEFAULTS for node in nodes.values()) and restarted.current() == DEFAULTS
    assert restarted.state.promoted == dict(DEFAULTS) and restarted.state.version == 0
    assert "being taken back, node-1 rolled_back on version 0, node-2 promoted on version 1, node-3 promoted on " \
        "version 1, node-4 promoted on version 1; finished taking it back (promotion taken back: node-4 worse" \
        in restarted.state.recovered
    assert restarted.state.recovered.endswith("every node on version 0")


def test_a_daemon_killed_while_the_canary_changes_takes_the_canary_back(tmp_path):
    """Before, the canary phase was written only once its nodes had changed: killed while the canary's agent applied
    the candidate, a restart found the pool steady and the canary ran the candidate unseen."""
    pool, nodes, windows, _ = _pool(tmp_path, loads=[1.0])
    _dying_nodes(nodes, 0, applied=True)
    _window(pool)
    with pytest.raises(Killed):
        pool.realize(FASTER)
    assert nodes["node-1"].config == FASTER
    restarted = CanaryPool(nodes, windows, pool.plan, tmp_path / "rollout.json", max_windows=3)
    assert all(node.config == DEFAULTS for node in nodes.values()) and restarted.current() == DEFAULTS
    assert restarted.rollout().nodes["node-1"].state == "rolled_back"
    assert "on the canary, not judged yet" in restarted.state.recovered
    assert "took the canary back (node-1: reloaded)" in restarted.state.recovered


# -- real processes: `pipetune agent` killed in its component's health check --------------------------------------

@pytest.mark.slow
def test_the_agent_process_killed_in_the_health_check_comes_back_on_the_previous_version(tmp_path):
    config, hold, started = tmp_path / "etc" / "filebeat.yml", tmp_path / "hold-health", tmp_path / "started.jsonl"
    config.parent.mkdir()
    config.write_text(OPERATOR)
    (tmp_path / "stand-in.py").write_text(STAND_IN_FILEBEAT)
    binary = tmp_path / "filebeat"  # `filebeat test config` passes: Filebeat's own check is not the subject
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    http_port, agent_port = free_ports(2)
    argv = [sys.executable, str(tmp_path / "stand-in.py"), str(http_port), str(config), str(hold), str(started),
            f"--path.data={tmp_path / 'data'}"]
    agent_config = AgentConfig.model_validate({
        "state_dir": str(tmp_path / "state"), "port": agent_port, "health_timeout_s": 600, "settle_s": 0.2,
        "supervise_interval_s": 600,
        "components": [{"name": "filebeat", "kind": "filebeat", "binary": str(binary), "config": str(config),
                        "inputs": [{"id": "access"}], "http_port": http_port,
                        "runtime": {"kind": "process", "argv": argv, "stop_timeout_s": 10}}]})
    agent_yaml = tmp_path / "agent.yaml"
    agent_yaml.write_text(yaml.safe_dump(agent_config.model_dump(mode="json")))
    runtime = ProcessRuntime("filebeat", argv, agent_config.state_dir / "filebeat" / "run")
    log = tmp_path / "agent.log"

    def starts() -> list[dict]:
        return [json.loads(line) for line in started.read_text().splitlines()] if started.exists() else []

    agent = _start_agent(agent_yaml, log)
    client = AgentClient(f"http://127.0.0.1:{agent_port}", TOKEN, timeout_s=60)
    try:
        _wait_answering(client, agent, log)
        assert client.put_config("filebeat", 1, V1).status == "applied"
        version_1 = config.read_text()
        hold.touch()  # version 2's Filebeat starts and is asked for its health, which the test holds back
        threading.Thread(target=lambda: _ignore(lambda: client.put_config("filebeat", 2, V2)), daemon=True).start()
        asked = hold.with_name(hold.name + ".asked")
        _until(lambda: len(starts()) == 3 and asked.exists() and str(starts()[-1]["pid"]) in asked.read_text(),
               "version 2's Filebeat asked for its health")
        held_pid = starts()[-1]["pid"]
        agent.send_signal(signal.SIGKILL)
        agent.wait(10)
        assert "flush.timeout: 100ms" in config.read_text() and _alive(held_pid)  # version 2 written and running
        hold.unlink()

        agent = _start_agent(agent_yaml, log)
        _wait_answering(client, agent, log)
        state = client.component("filebeat")
        assert (state["version"], state["params"][TIMEOUT], state["change_in_progress"]) == (1, 0.5, False)
        assert state["health"]["ok"] and config.read_text() == version_1  # the operator's bytes and version 1's values
        assert starts()[-1]["config"] == version_1 and _alive(starts()[-1]["pid"]) and not _alive(held_pid)
        found, did = client.audit("filebeat")[-2:]
        assert found["event"] == "interrupted" and found["found"] == (
            "version 2 was being put in force, its health not yet confirmed; filebeat's files hold version 2's values")
        assert (did["event"], did["interrupted"], did["restored"]) == ("recovered", 2, 1)
        assert client.put_config("filebeat", 2, V2).status == "applied"  # never decided: it can be sent again
    finally:
        _stop(client, agent, runtime)


# -- real processes: `pipetune autotune` killed between a canary's promotion steps ---------------------------------

class HeldChange:
    """An agent's next change held in the middle, once its files are written (`adapter.apply`), until the test lets
    it go on: to its end, or failing (the agent rolls the component back)."""

    def __init__(self, agent) -> None:
        self.component = agent.components["filebeat"]
        self.real = self.component.adapter.apply
        self.entered, self.released, self.fails = threading.Event(), threading.Event(), False
        self.component.adapter.apply = self.apply

    def apply(self, *args, **kwargs):
        self.component.adapter.apply = self.real  # once
        self.entered.set()
        self.released.wait(600)
        if self.fails:
            raise RuntimeError("the stand-in Filebeat did not start")
        return self.real(*args, **kwargs)


@pytest.mark.slow
def test_the_daemon_process_killed_between_promotion_steps_finishes_the_promotion_on_restart(tmp_path, testbed,
                                                                                             kafka_topic):
    """Node-2's step fails after the daemon died (its agent puts the version before back); bench.faults' daemon row
    kills it the same way (`testbed.daemon_kill`) with node-2's step ending either way, its real run in
    tests/bench/test_faults.py."""
    group = f"sigkill-{kafka_topic}"  # a group with a committed offset: the daemon reads its lag every window
    commit_group(testbed.bootstrap, kafka_topic, group)
    agents = {name: ServedAgent(stand_in_filebeat(tmp_path / name)) for name in ("node-1", "node-2")}
    prometheus = StandInPrometheus(agents)
    deployment = write_deployment(tmp_path, {name: agent.url for name, agent in agents.items()}, TOKEN,
                                  testbed.bootstrap, group, prometheus.url)
    state = tmp_path / "state"
    # A person's override makes the change: the canary takes it, it is judged better, and node-2's step is held.
    StateStore(state).add_override({TIMEOUT: 0.1}, 3600, "the test's change")
    held = HeldChange(agents["node-2"])
    command = autotune(deployment, state)
    try:
        kill_between_steps(command, state, tmp_path / "autotune.log", held.entered.is_set)
        assert [(n["node"], n["version"], n["state"]) for n in rollout(state)["nodes"]] == [
            ("node-1", 1, "promoted"), ("node-2", 0, "pending")]
        held.fails = True
        held.released.set()
        _until(lambda: not agents["node-2"].client.component("filebeat")["change_in_progress"], "node-2's change ended")
        assert agents["node-2"].client.component("filebeat")["params"][TIMEOUT] == 1.0

        restarted, recovered_s = restart(command, state)
        assert restarted.returncode == 0, restarted.stderr[-3000:]
        assert recovered_s is not None
        for agent in agents.values():  # one version on every node, each agent's files holding it
            assert agent.client.component("filebeat")["params"][TIMEOUT] == 0.1
            assert agent.components["filebeat"].adapter.read()[TIMEOUT] == 0.1
        recovery = Recovery.of(state)
        assert recovery.finished(1, TIMEOUT, 0.1)
        assert recovery.recover_reasons == (recover_reason(TIMEOUT, 1.0, 0.1, {"node-1": (1, "promoted"),
                                                                              "node-2": (0, "pending")},
                                                           {"node-2": "filebeat restarted"}),)
        assert recovery.actions[-2] == "recover" and recovery.actions[-1] != "recover"
    finally:
        held.released.set()
        prometheus.close()
        for agent in agents.values():
            agent.close()
