"""Every pool of a deployment in one process: each its own daemon, learner and state directory; a pool
whose agent hangs (a real HTTP server on loopback that never answers) never stalls another pool's decisions,
and an error in a pool's window is recorded and its loop goes on, unless the same error comes back window
after window: then that pool alone stops, saying why."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterator

import pytest

from controller.deployment import load_deployment, pool_pipelines
from controller.pools import PoolRunner, pool_runs
from controller.realizer import Driven
from controller.state import PoolDir, StateStore, load_pool_dirs, plan_pool_dirs
from controller.tuning_run import twin_pipeline
from models.policy import Policy
from models.presets import preset
from models.space import PIPELINE_SPACE
from models.twin import load
from replay.profiles import WorkloadSpec
from tests.conftest import FixedTelemetry, write_deployment
from tests.controller.test_daemon import Failing, Scripted

WINDOW_S = 30.0
CANDIDATE = PIPELINE_SPACE.config({"filebeat.queue.mem.flush.timeout": 0.2})


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout_s:g} s for {what}")
        time.sleep(0.05)


def _twin(windows: int = 8) -> Driven:
    return Driven.direct(twin_pipeline(preset("defaults"), load("paper-2vcpu"), WorkloadSpec("steady", 450.0, seed=1),
                                       windows, WINDOW_S))


class HungAgent:
    """A node agent on loopback that takes every request and answers none: released, it hangs up."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.release = threading.Event()
        agent = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                agent.asked.set()
                agent.release.wait(300)
                self.close_connection = True  # no answer at all: the client sees the agent go away

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hung_agent() -> Iterator[HungAgent]:
    agent = HungAgent()
    yield agent
    agent.close()


def test_each_pool_has_its_own_learner_config_and_state_directory(tmp_path):
    learners = {"edge": Scripted(CANDIDATE), "core": Scripted(preset("defaults"))}
    dirs = plan_pool_dirs(tmp_path, {"edge": ["node-1"], "core": ["node-2", "node-3"]})
    runs = pool_runs([(d, _twin()) for d in dirs], tmp_path)
    runner = PoolRunner(runs, lambda name, start, policy: (learners[name], None), Policy(min_dwell_windows=1),
                        window_s=WINDOW_S)
    runner.start(3)
    assert runner.join(120), f"pools still running: {runner.running()}"
    assert [p.name for p in load_pool_dirs(tmp_path)] == ["edge", "core"]
    assert load_pool_dirs(tmp_path)[1].nodes == ("node-2", "node-3")
    for name, run in runner.runs.items():
        assert run.error is None and run.store.dir == tmp_path / "pools" / name
        assert len(run.store.decisions()) == 3
        assert json.loads((run.store.dir / "status.json").read_text())["pipeline"] == name
    # one config each: only edge's learner proposed a change, and only edge's twin runs it
    assert runs[0].pipeline.current() == CANDIDATE and runs[1].pipeline.current() == preset("defaults")
    assert learners["edge"].told and learners["core"].told


def test_a_single_pool_keeps_the_state_directory_as_it_was(tmp_path):
    (pool,) = plan_pool_dirs(tmp_path, {"default": ["edge-1"]})
    assert pool.directory == tmp_path
    StateStore(tmp_path).save_policy(Policy(mode="advise", min_dwell_windows=1))  # state from before pools
    (run,) = pool_runs([(pool, _twin())], tmp_path)
    runner = PoolRunner([run], lambda name, start, policy: (Scripted(CANDIDATE), None), Policy(), window_s=WINDOW_S)
    runner.start(1)
    assert runner.join(120)
    assert run.daemon.policy.mode == "advise" and run.store.decisions()[0]["action"] == "advise"


def test_a_pool_whose_agent_hangs_does_not_stall_the_others(tmp_path, hung_agent):
    path = write_deployment(tmp_path, hung_agent.url,
                            nodes=[{"name": "edge-1", "agent_url": hung_agent.url, "token_file": "edge-1.token"},
                                   {"name": "core-1", "agent_url": "http://127.0.0.1:9", "token_file": "edge-1.token"}],
                            pools=[{"name": "edge", "nodes": ["edge-1"]}, {"name": "core", "nodes": ["core-1"]}])
    (edge_dir, edge), (core_dir, core) = pool_pipelines(load_deployment(path), tmp_path / "state")
    edge_live = edge.pipeline
    assert [a.node for a in edge_live.agents] == ["edge-1"]  # each pool's pipeline asks only its own nodes
    edge_live.telemetry = FixedTelemetry()  # the agent, not Prometheus, is what hangs
    core.pipeline.close()
    runs = pool_runs([(edge_dir, edge), (core_dir, _twin(windows=40))], tmp_path / "state")
    runner = PoolRunner(runs, lambda name, start, policy: (Scripted(CANDIDATE), None), Policy(), window_s=WINDOW_S)
    runner.start(None)
    edge, core = runner.runs["edge"], runner.runs["core"]
    try:
        wait_for(hung_agent.asked.is_set, "the edge pool to ask its agent")
        wait_for(lambda: len(core.store.decisions()) >= 5, "five decisions of the core pool")
        assert "edge" in runner.running() and edge.store.decisions() == []  # still waiting on its agent
        assert "explore" in [d["action"] for d in core.store.decisions()]  # core went on changing its config
    finally:
        runner.stop.set()
        hung_agent.release.set()  # the hung request now fails: edge's loop sees stop and ends
        assert runner.join(120), f"pools still running: {runner.running()}"
        edge_live.close()
    assert core.error is None and edge.error is None


def test_an_error_in_a_pools_window_is_recorded_and_its_loop_goes_on(tmp_path):
    (pool,) = plan_pool_dirs(tmp_path, {"edge": ["node-1"]})
    (run,) = pool_runs([(pool, _twin())], tmp_path)
    learner = Failing(CANDIDATE, None, ValueError("no such parameter: 'filebeat.queue.spool'"), None)
    runner = PoolRunner([run], lambda name, start, policy: (learner, None), Policy(min_dwell_windows=1),
                        window_s=WINDOW_S)
    runner.start(4)
    assert runner.join(120) and run.error is None
    assert [d["action"] for d in run.store.decisions()] == ["explore", "error", "hold", "hold"]


def test_an_error_that_persists_stops_that_pool_alone_and_names_the_error(tmp_path):
    dirs = plan_pool_dirs(tmp_path, {"edge": ["node-1"], "core": ["node-2"]})
    learners = {"edge": Failing(CANDIDATE, RuntimeError("the learner's actor died")), "core": Scripted(CANDIDATE)}
    runner = PoolRunner(pool_runs([(d, _twin()) for d in dirs], tmp_path),
                        lambda name, start, policy: (learners[name], None), Policy(min_dwell_windows=1),
                        window_s=WINDOW_S)
    runner.start(5)
    assert runner.join(120), f"pools still running: {runner.running()}"
    edge, core = runner.runs["edge"], runner.runs["core"]
    assert str(edge.error) == "edge: the same error in 3 windows in a row, the loop stops: " \
                              "RuntimeError: the learner's actor died"
    assert [d["action"] for d in edge.store.decisions()] == ["error"] * 3
    assert core.error is None and len(core.store.decisions()) == 5


def test_pool_directories_without_pools_json_are_the_default_pool(tmp_path):
    assert load_pool_dirs(tmp_path) == [PoolDir("default", tmp_path, ())]


@pytest.mark.slow
def test_each_pool_learns_in_a_ray_actor_of_its_own(tmp_path, ray_session):
    from controller.tuning_run import LearnerSetup, tuning_learner

    learners = {}

    def remote(name, start, policy):
        learners[name] = tuning_learner(LearnerSetup("random", policy, start, "filebeat-kafka"), remote=True)
        return learners[name], None

    dirs = plan_pool_dirs(tmp_path, {"edge": ["node-1"], "core": ["node-2"]})
    runner = PoolRunner(pool_runs([(d, _twin()) for d in dirs], tmp_path), remote, Policy(), window_s=WINDOW_S)
    runner.start(2)
    assert runner.join(120), f"pools still running: {runner.running()}"
    assert all(r.error is None and len(r.store.decisions()) == 2 for r in runner.runs.values())
    assert learners["edge"].actor._actor_id != learners["core"].actor._actor_id
