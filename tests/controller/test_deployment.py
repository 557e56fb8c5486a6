"""The deployment file: loading it with errors that name the file and field, and the daemon over the
`LivePipeline` built from it freezing, naming the node, while that node's agent does not answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.daemon import Daemon
from controller.deployment import DeploymentError, is_deployment_file, live_pipeline, load_deployment
from models.policy import Policy
from models.space import PIPELINE_SPACE
from tests.controller.test_daemon import Scripted
from tests.conftest import FixedTelemetry, free_ports, write_deployment


def _write(tmp_path: Path, **changes: object) -> Path:
    return write_deployment(tmp_path, "https://127.0.1.1:8765", **changes)


def test_a_deployment_file_loads_with_paths_relative_to_it(tmp_path):
    deployment = load_deployment(_write(tmp_path))
    assert deployment.nodes[0].token_file == tmp_path / "edge-1.token"
    assert deployment.latency.source == "event_time" and deployment.testbed is None
    assert deployment.kafka.commit_interval_s == 5.0
    assert is_deployment_file(tmp_path / "deployment.yaml")


@pytest.mark.parametrize("changes,expected", [
    ({"latency": {"source": "probe"}}, "latency.source: Input should be 'event_time', 'canary' or 'worst'"),
    ({"kafka": {"bootstrap": "k:9092", "consumer_group": "g", "commit_interval_s": 0}},
     "kafka.commit_interval_s: Input should be greater than 0"),
    ({"nodes": []}, "nodes: List should have at least 1 item"),
    ({"nodes": [{"name": "a", "agent_url": "ftp://x", "token_file": "t"}]}, "nodes.0.agent_url: URL scheme should be"),
    ({"nodes": [{"name": "a", "agent_url": "https://x", "token_file": "missing.token"}]},
     "nodes.0.token_file: "),
    ({"kafka": {"bootstrap": "k:9092"}}, "kafka.consumer_group: Field required"),
    ({"config": {"preset": "defaults", "set": {"filebeat.backoff": -1}}}, "config: "),
])
def test_errors_name_the_file_and_the_field(tmp_path, changes, expected):
    path = _write(tmp_path, **changes)
    with pytest.raises(DeploymentError) as caught:
        load_deployment(path)
    assert str(caught.value).startswith(f"{path}: ") and expected in str(caught.value)


def test_the_daemon_freezes_naming_the_node_that_does_not_answer(tmp_path):
    (closed,) = free_ports(1)  # nobody listens there
    path = _write(tmp_path, nodes=[{"name": "edge-1", "agent_url": f"http://127.0.0.1:{closed}",
                                    "token_file": "edge-1.token"}])
    pipeline = live_pipeline(load_deployment(path))
    pipeline.telemetry = FixedTelemetry()  # the agent, not Prometheus, is what is away
    daemon = Daemon(pipeline, Scripted(PIPELINE_SPACE.config({"filebeat.backoff": 0.5})), Policy(), window_s=0.01)
    decisions = [daemon.step() for _ in range(2)]
    assert [d.action for d in decisions] == ["frozen", "frozen"]
    assert all(f"node edge-1: agent at http://127.0.0.1:{closed}: " in d.reason and not d.change for d in decisions)
    pipeline.close()
