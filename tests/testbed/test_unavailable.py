"""The daemon on the live testbed when its agent or its telemetry goes away: it holds, then resumes."""

from __future__ import annotations

import math
import time

import pytest

from controller.daemon import Daemon
from controller.telemetry import PrometheusTelemetry
from models.learning import TunedCube, tuned_names
from models.policy import Policy
from models.strategies import build_learner
from models.twin import load
from replay.profiles import Profile, WorkloadSpec
from testbed import lifecycle, processes
from testbed.endpoints import live_pipeline
from testbed.harness import BackgroundLoad
from testbed.pipeline import PipelineSpec
from testbed.prometheus import prometheus_url

WINDOW_S = 5.0


def _restart(spec: PipelineSpec, name: str, ready) -> None:
    """Start the recorded service again if it is down (keeping its state: the agent's versions), until `ready`."""
    service = lifecycle.recorded_services(spec)[name]
    if processes.running_pid(service) is None:
        processes.start(service)
    processes.wait_ready(service, ready, 90.0)


def _agent_back(spec: PipelineSpec) -> None:
    _restart(spec, "agent", lambda: live_pipeline(spec).current() is not None)


def _prometheus_back(spec: PipelineSpec) -> None:
    # Back means scraping again: right after its start it still answers `up` with the sample before the stop.
    telemetry = PrometheusTelemetry(prometheus_url(spec))
    _restart(spec, "prometheus",
             lambda: math.isfinite(telemetry.scalar(f"increase(pipetune_events_total[{WINDOW_S:.0f}s])", time.time())))


@pytest.mark.slow
def test_the_daemon_holds_while_the_agent_or_prometheus_is_down_and_resumes_after(testbed):
    pipeline = live_pipeline(testbed)
    original = pipeline.current()
    policy = Policy()
    cube = TunedCube(tuned_names(policy, load("local-filebeat-kafka").topology), policy)
    daemon = Daemon(pipeline, build_learner("random", cube, original, seed=3), policy, window_s=WINDOW_S)
    recorded = lifecycle.recorded_services(testbed)
    try:
        with BackgroundLoad(testbed, WorkloadSpec(Profile.steady, 300, 300.0, seed=5)):
            daemon.warm_up()
            assert daemon.step().action != "frozen"

            # (a) the agent goes away: the window is held, nothing is changed
            in_force = pipeline.current()
            processes.stop(recorded["agent"])
            held = daemon.step()
            assert held.action == "frozen" and not held.change, held.reason
            # The agent also serves the node's source metrics: the window is unreadable first, naming the node.
            assert "pipeline unavailable (telemetry" in held.reason and "pipetune_source_events_total" in held.reason
            assert f"not scraped: pipetune-agent 127.0.0.1:{testbed.agent.port} (node {testbed.name})" in held.reason
            _agent_back(testbed)
            assert pipeline.current() == in_force  # the agent put back what was in force, nothing more
            resumed = daemon.step()
            assert resumed.action != "frozen" and resumed.observed["offered_eps"] > 0, resumed.reason

            # (b) Prometheus goes away: the window cannot be read, so nothing is changed either
            in_force = pipeline.current()
            processes.stop(recorded["prometheus"])
            held = daemon.step()
            assert held.action == "frozen" and not held.change, held.reason
            assert "Prometheus at" in held.reason
            assert pipeline.current() == in_force
            _prometheus_back(testbed)
            resumed = daemon.step()
            assert resumed.action != "frozen" and resumed.observed["offered_eps"] > 0, resumed.reason
    finally:
        _agent_back(testbed)
        _prometheus_back(testbed)
        assert pipeline.apply(original).ok
