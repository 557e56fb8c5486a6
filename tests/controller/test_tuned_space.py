"""A pool's tuned space (`controller.tuned_space`): on the operator's pipeline of issue 39, where only Filebeat has
an agent, the learner searched `kafka.consumer.fetch.max.wait.ms` (500 → 197 → … ms) and the end summary listed
it as tuned. Here a real agent that manages one Filebeat (its process and `filebeat test config` are stand-ins)
answers for the node: the learner searches Filebeat's parameters only, no decision changes a Kafka one, and the
status says what is tuned by which agent and what is held and why."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from agents.config import AgentConfig
from controller.daemon import Daemon
from controller.deployment import Deployment, live_pipeline, load_deployment, pool_managers
from controller.state import StateStore
from controller.tuned_space import NothingToTune, tuned_space
from controller.tuning_run import LearnerSetup, tuning_learner, twin_pipeline
from models.latency_bounds import lull_ceilings
from models.learning import TUNED_BY_TOPOLOGY
from models.policy import Policy
from models.presets import preset
from models.space import PIPELINE_SPACE
from models.twin import load as load_calibration
from replay.profiles import WorkloadSpec
from tests.agents.conftest import TOKEN, ServedAgent
from tests.conftest import FixedTelemetry, free_ports, write_deployment
from tests.controller.test_daemon import Scripted

HELD = "kafka.consumer.fetch.max.wait.ms"
FILEBEAT_TUNED = tuple(n for n in TUNED_BY_TOPOLOGY["filebeat-kafka"] if n.startswith("filebeat."))


def stand_in_filebeat(directory: Path) -> AgentConfig:
    """agent.yaml of a node whose agent manages one Filebeat over an operator's filebeat.yml, and nothing else; its
    process is `sleep` and its `filebeat test config` passes (Filebeat's own check is not the subject)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "filebeat.yml"
    config.write_text(f"filebeat.inputs:\n  - type: filestream\n    id: access\n    paths: [{directory}/access.log*]\n"
                      "output.kafka:\n  hosts: ['127.0.0.1:9']\n  topic: web\n")
    binary = directory / "filebeat"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    (port,) = free_ports(1)
    return AgentConfig.model_validate({
        "state_dir": str(directory / "agent"), "port": port, "health_timeout_s": 5, "settle_s": 0.2,
        "supervise_interval_s": 600,
        "components": [{"name": "filebeat", "kind": "filebeat", "binary": str(binary), "config": str(config),
                        "inputs": [{"id": "access"}], "runtime": {"kind": "process", "argv": ["sleep", "600"]}}]})


@pytest.fixture
def filebeat_node(tmp_path: Path) -> Iterator[ServedAgent]:
    agent = ServedAgent(stand_in_filebeat(tmp_path / "node"))
    try:
        yield agent
    finally:
        agent.close()


def _deployment(tmp_path: Path, agent: ServedAgent) -> Deployment:
    """The operator's deployment file: its `config:` sets the consumer's fetch wait, which no agent takes."""
    path = write_deployment(tmp_path, agent.url, config={"preset": "defaults", "set": {HELD: 250}})
    (tmp_path / "edge-1.token").write_text(TOKEN)
    return load_deployment(path)


def test_a_pool_whose_agents_manage_only_filebeat_searches_filebeat_and_holds_the_rest(filebeat_node, tmp_path):
    deployment = _deployment(tmp_path, filebeat_node)
    managers = pool_managers(deployment, "default")
    assert set(FILEBEAT_TUNED) <= set(managers)
    assert all(name.startswith("filebeat.") and by == ("edge-1/filebeat",) for name, by in managers.items())
    pipeline = live_pipeline(deployment, "default")
    pipeline.telemetry.close()
    pipeline.telemetry = FixedTelemetry()  # no Prometheus runs here
    try:
        setup = LearnerSetup("random", Policy(), pipeline.current(), "filebeat-kafka", seed=3, managers=managers)
        learner = tuning_learner(setup, remote=False)
        assert learner.cube.names == FILEBEAT_TUNED
        store = StateStore(tmp_path / "state")
        daemon = Daemon(pipeline, learner, Policy(), window_s=0.01, store=store, space=setup.space())
        changes = [daemon.step().change for _ in range(3)]
        assert any(changes) and all(name in FILEBEAT_TUNED for change in changes for name in change)
        assert pipeline.current()[HELD] == 250  # the deployment's value: held
    finally:
        pipeline.close()
    space = store.load_status()["tuned_space"]
    assert space["tuned"] == {name: ["edge-1/filebeat"] for name in FILEBEAT_TUNED}
    assert space["held"] == {HELD: "no agent of pool default manages it"}
    assert HELD not in space["managed"]


def test_a_decided_change_to_a_parameter_no_agent_applies_is_not_made():
    """Whatever decides it (a learner resumed from an older run, a person's pin), a held parameter keeps the
    running config's value, and the decision does not list it."""
    calibration = load_calibration("local-filebeat-kafka")
    start = preset("defaults")
    space = tuned_space(TUNED_BY_TOPOLOGY["filebeat-kafka"], {name: ("edge-1/filebeat",) for name in FILEBEAT_TUNED},
                        "edge", lull_ceilings(start))
    candidate = PIPELINE_SPACE.config({"filebeat.backoff": 0.05, HELD: 100}, base=start)
    pipeline = twin_pipeline(start, calibration, WorkloadSpec("steady", 300.0, seed=1), 3, 10.0)
    daemon = Daemon(pipeline, Scripted(candidate), Policy(), window_s=10.0, space=space)
    daemon.warm_up()
    decision = daemon.step()
    assert decision.change == {"filebeat.backoff": [start["filebeat.backoff"], 0.05]}
    assert pipeline.current()[HELD] == start[HELD]


def test_a_pool_whose_agents_manage_nothing_the_learner_tunes_is_refused_naming_them():
    with pytest.raises(NothingToTune, match=r"pool core: no agent of the pool manages any parameter the learner "
                                            r"tunes \(.*kafka.consumer.fetch.max.wait.ms\); its agents manage "
                                            r"kafka.producer.linger.ms"):
        tuned_space(TUNED_BY_TOPOLOGY["filebeat-kafka"], {"kafka.producer.linger.ms": ("core-1/replay",)}, "core", {})


def test_on_the_twin_everything_is_tuned_and_nothing_held():
    space = tuned_space(TUNED_BY_TOPOLOGY["paper"], None, "default", {})
    assert space.tuned == TUNED_BY_TOPOLOGY["paper"] and not space.held
    report = space.report()
    assert report.tuned == {name: ["twin"] for name in TUNED_BY_TOPOLOGY["paper"]} and report.managed is None


def test_the_learner_takes_each_wait_a_lull_sits_out_no_higher_than_the_run_started_on_and_the_report_says_so():
    start = PIPELINE_SPACE.config({"filebeat.queue.mem.flush.timeout": 0.2, "filebeat.max_backoff": 3.0},
                                  base=preset("defaults"))
    managers = {name: ("edge-1/filebeat",) for name in FILEBEAT_TUNED}
    setup = LearnerSetup("pipetune", Policy(), start, "filebeat-kafka", managers=managers, pool="edge")
    # the held consumer's fetch wait is no ceiling of the learner's: it never moves
    expected = {"filebeat.queue.mem.flush.timeout": 0.2, "filebeat.max_backoff": 3.0}
    assert setup.space().report().ceilings == expected
    learner = tuning_learner(setup, remote=False)
    far = learner.cube.decode(np.ones(learner.cube.dims), base=start)
    assert {name: far[name] for name in expected} == expected
    # a run resumed on a tuned config keeps the ceilings its first start set, as its state passes them on
    resumed = replace(setup, start=PIPELINE_SPACE.config({"filebeat.max_backoff": 0.01}, base=start), ceilings=expected)
    assert resumed.space().ceilings == expected
