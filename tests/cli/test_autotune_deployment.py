"""`pipetune autotune --pipeline` with an operator's deployment file: a node that does not answer is exit 2
naming it, before Ray starts; a bad file is exit 2 naming the file and field; every pool of a deployment runs
in the one daemon, each with its own state directory; an error in every window ends the run with exit 1 naming it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator

import pytest
from typer.testing import CliRunner

from agents.config import AgentConfig
from agents.service import create_app
from api.server import serve_in_thread
from cli.main import app
from controller.state import StateStore, load_pool_dirs
from tests.agents.conftest import TOKEN, ServedAgent
from tests.conftest import free_ports, write_deployment
from tests.controller.test_tuned_space import stand_in_filebeat

runner = CliRunner()


def _deployment(tmp_path: Path, **changes: object) -> Path:
    (closed,) = free_ports(1)
    return write_deployment(tmp_path, f"http://127.0.0.1:{closed}", **changes)


def test_a_node_that_does_not_answer_is_exit_2_naming_it(tmp_path):
    result = runner.invoke(app, ["autotune", "--pipeline", str(_deployment(tmp_path)), "--windows", "1"])
    assert result.exit_code == 2
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())  # the message as one line, without rich's box
    assert "an agent does not answer (node edge-1: agent at http://127.0.0.1:" in said


def test_a_bad_deployment_file_is_exit_2_naming_the_field(tmp_path):
    path = _deployment(tmp_path, latency={"source": "logs"})
    result = runner.invoke(app, ["autotune", "--pipeline", str(path), "--windows", "1"])
    assert result.exit_code == 2 and "latency.source" in result.output


def test_load_replay_on_an_operators_pipeline_is_exit_2_naming_the_flag(tmp_path):
    result = runner.invoke(app, ["autotune", "--pipeline", str(_deployment(tmp_path)), "--load", "replay"])
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())
    assert result.exit_code == 2 and "--load" in said and "an operator's pipeline carries its own traffic" in said


def test_an_unknown_load_is_exit_2_listing_the_allowed_ones(tmp_path):
    result = runner.invoke(app, ["autotune", "--pipeline", str(_deployment(tmp_path)), "--load", "k6"])
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())
    assert result.exit_code == 2 and "must be none or replay, got 'k6'" in said


def test_load_is_refused_on_the_twin():
    result = runner.invoke(app, ["autotune", "--load", "none", "--windows", "1"])
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())
    assert result.exit_code == 2 and "--load is for a --pipeline FILE" in said


def test_a_pool_whose_agents_manage_nothing_the_learner_tunes_is_exit_2_naming_them(tmp_path):
    (port,) = free_ports(1)
    config = AgentConfig.model_validate({"state_dir": str(tmp_path / "agent"), "port": port, "components": [
        {"name": "broker", "kind": "kafka", "bootstrap": "127.0.0.1:1"}]})
    server = serve_in_thread(create_app(config, "secret", components={}), "127.0.0.1", port)  # it manages nothing
    path = write_deployment(tmp_path, f"http://127.0.0.1:{port}")
    try:
        result = runner.invoke(app, ["autotune", "--pipeline", str(path), "--windows", "1"])
    finally:
        server.should_exit = True
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())
    assert result.exit_code == 2
    assert "pool default: no agent of the pool manages any parameter the learner tunes" in said
    assert "its agents manage nothing" in said


@pytest.mark.slow
def test_the_summary_lists_what_no_agent_manages_as_held(tmp_path, ray_session):
    """Issue 39: with only Filebeat under an agent, the end summary listed the consumer's fetch wait as tuned."""
    agent = ServedAgent(stand_in_filebeat(tmp_path / "node"))
    path = write_deployment(tmp_path, agent.url)
    (tmp_path / "edge-1.token").write_text(TOKEN)
    try:
        result = runner.invoke(app, ["autotune", "--pipeline", str(path), "--windows", "1", "--window", "0.2",
                                     "--state-dir", str(tmp_path / "state")])
    finally:
        agent.close()
    said = " ".join(result.output.split())
    assert result.exit_code == 0, said[-2000:]
    assert "held, not tuned: kafka.consumer.fetch.max.wait.ms 500 (no agent of pool default manages it)" in said
    assert "kafka.consumer" not in said.split("final config vs")[1].split("held, not tuned")[0]
    # the waits a lull sits out, at most as Filebeat reads them from the operator's file, which sets neither
    assert ("at most as the run started (a lull's events wait them out): filebeat.queue.mem.flush.timeout 1, "
            "filebeat.max_backoff 10") in said


@pytest.fixture
def three_agents(tmp_path: Path) -> Iterator[list[str]]:
    """Three real node agents on loopback, each managing a stand-in Filebeat (a pool's learner tunes what they take)."""
    agents = [ServedAgent(stand_in_filebeat(tmp_path / f"node-{i}")) for i in range(1, 4)]
    yield [agent.url for agent in agents]
    for agent in agents:
        agent.close()


@pytest.mark.slow
def test_one_daemon_runs_every_pool_of_a_deployment(tmp_path, three_agents, ray_session):
    nodes = [{"name": f"node-{i}", "agent_url": url, "token_file": "edge-1.token"}
             for i, url in enumerate(three_agents, start=1)]
    path = write_deployment(tmp_path, three_agents[0], nodes=nodes,
                            pools=[{"name": "edge", "nodes": ["node-1", "node-2"]}, {"name": "core", "nodes": ["node-3"]}])
    (tmp_path / "edge-1.token").write_text(TOKEN)
    state = tmp_path / "state"
    result = runner.invoke(app, ["autotune", "--pipeline", str(path), "--windows", "2", "--window", "0.2",
                                 "--state-dir", str(state), "--json", str(tmp_path / "run.json")])
    assert result.exit_code == 0, result.output
    figures = json.loads((tmp_path / "run.json").read_text())["pools"]
    pools = load_pool_dirs(state)
    assert [(p.name, p.nodes) for p in pools] == [("edge", ("node-1", "node-2")), ("core", ("node-3",))]
    for pool in pools:
        decisions = StateStore(pool.directory).decisions()
        # no Prometheus runs here: each pool holds, saying why, in its own decision log
        assert len(decisions) >= 2 and {d["action"] for d in decisions} == {"frozen"}
        assert "Prometheus" in decisions[-1]["reason"]
        assert json.loads((pool.directory / "status.json").read_text())["pipeline"] == pool.name
        assert (pool.directory / "autotune.png").read_bytes()[:4] == b"\x89PNG"
        assert len(figures[pool.name]["windows"]) >= 2 and figures[pool.name]["rollbacks"] == 0
    said = " ".join(result.output.split())
    # the warm-up window, unreadable too, is recorded as well: three windows each
    assert "pools: edge (node-1, node-2); core (node-3)" in said and "pool core: 3 windows" in said
    assert "pool edge: window 2/2 frozen" in said


@pytest.mark.slow
def test_an_error_in_every_window_stops_the_run_with_exit_1_naming_it_after_the_summary(monkeypatch, tmp_path):
    import cli.autotune
    built = cli.autotune.twin_pipeline

    def broken_pipeline(*args, **kwargs):
        pipeline = built(*args, **kwargs)

        def observe(seconds):
            raise RuntimeError("the disk under the twin is on fire")
        pipeline.observe = observe
        return pipeline
    monkeypatch.setattr(cli.autotune, "twin_pipeline", broken_pipeline)
    result = runner.invoke(app, ["autotune", "--windows", "6", "--speed", "0", "--state-dir", str(tmp_path / "s")])
    said = " ".join(result.output.split())
    assert result.exit_code == 1, said[-2000:]
    assert "stopped:" in said and "the same error in 3 windows in a row" in said and "is on fire" in said
    assert "decision log:" in said  # the summary is still printed before the exit
