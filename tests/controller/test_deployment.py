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
    ({"latency": {"stage": "spark"}}, "latency.stage: Input should be 'e2e' or 'warehouse'"),
    ({"latency": {"source": "canary", "stage": "warehouse"}},
     "latency: stage warehouse: only events reach the table, so source must be event_time, not canary"),
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


def _three_nodes(tmp_path: Path, pools: object) -> Path:
    nodes = [{"name": f"node-{i}", "agent_url": f"https://127.0.1.{i}:8765", "token_file": "edge-1.token"}
             for i in (1, 2, 3)]
    return _write(tmp_path, nodes=nodes, pools=pools)


def test_without_pools_every_node_is_in_the_pool_default(tmp_path):
    deployment = load_deployment(_write(tmp_path))
    (pool,) = deployment.pool_specs()
    assert (pool.name, pool.nodes, pool.canary_nodes, pool.max_unavailable) == ("default", ["edge-1"], 1, 1)
    assert pool.canary_max_windows == 3
    assert "pools" not in (tmp_path / "deployment.yaml").read_text()


def test_pools_group_the_nodes_and_each_pipeline_asks_only_its_own(tmp_path):
    path = _three_nodes(tmp_path, [{"name": "edge", "nodes": ["node-1", "node-2"], "max_unavailable": 2},
                                   {"name": "core", "nodes": ["node-3"]}])
    deployment = load_deployment(path)
    assert [(p.name, p.nodes, p.canary_nodes, p.max_unavailable) for p in deployment.pool_specs()] == [
        ("edge", ["node-1", "node-2"], 1, 2), ("core", ["node-3"], 1, 1)]
    pipeline = live_pipeline(deployment, "edge")
    assert [a.node for a in pipeline.agents] == ["node-1", "node-2"]
    pipeline.close()
    with pytest.raises(KeyError, match="no pool 'edge-2' in deployment 'shop'; pools: edge, core"):
        deployment.pool("edge-2")


@pytest.mark.parametrize("pools,expected", [
    ([{"name": "edge", "nodes": ["node-1", "node-2", "node-9"]}, {"name": "core", "nodes": ["node-3"]}],
     "pools.0.nodes.2: 'node-9' is not a node of this deployment; nodes: node-1, node-2, node-3"),
    ([{"name": "edge", "nodes": ["node-1", "node-2"]}, {"name": "core", "nodes": ["node-3", "node-1"]}],
     "pools.1.nodes.1: 'node-1' is already in pool 'edge'; every node is in exactly one pool"),
    ([{"name": "edge", "nodes": ["node-1", "node-2"]}],
     "pools: node-3 in no pool; every node is in exactly one pool"),
    ([{"name": "edge", "nodes": ["node-1"]}, {"name": "edge", "nodes": ["node-2", "node-3"]}],
     "pools.1.name: 'edge' is used by another pool"),
    ([{"name": "edge", "nodes": ["node-1", "node-2", "node-3"], "canary_nodes": 3}],
     "pools.0.canary_nodes: 3 leaves no control node in a pool of 3 nodes; allowed: 1 to 2"),
    ([{"name": "edge", "nodes": ["node-1", "node-2", "node-3"], "canary_nodes": 0}],
     "pools.0.canary_nodes: Input should be greater than or equal to 1"),
    ([{"name": "edge", "nodes": ["node-1", "node-2", "node-3"], "max_unavailable": 0}],
     "pools.0.max_unavailable: Input should be greater than or equal to 1"),
    ([{"name": "edge", "nodes": ["node-1", "node-2", "node-3"], "canary_max_windows": 0}],
     "pools.0.canary_max_windows: Input should be greater than or equal to 1"),
    ([{"name": "edge", "nodes": ["node-1", "node-2", "node-3"], "canary_max_windows": 11}],
     "pools.0.canary_max_windows: Input should be less than or equal to 10"),
    ([{"name": "edge pool", "nodes": ["node-1", "node-2", "node-3"]}], "pools.0.name: String should match pattern"),
    ([{"name": "edge", "nodes": []}], "pools.0.nodes: List should have at least 1 item"),
    ([], "pools: List should have at least 1 item"),
    ([{"name": "edge", "nodes": ["node-1", "node-2", "node-3"], "canary": 1}], "pools.0.canary: Extra inputs"),
])
def test_pool_errors_name_the_field(tmp_path, pools, expected):
    path = _three_nodes(tmp_path, pools)
    with pytest.raises(DeploymentError) as caught:
        load_deployment(path)
    assert str(caught.value).startswith(f"{path}: ") and expected in str(caught.value)


def test_a_single_node_pool_may_have_its_node_as_canary(tmp_path):
    path = _three_nodes(tmp_path, [{"name": "a", "nodes": ["node-1"]}, {"name": "b", "nodes": ["node-2", "node-3"]}])
    assert [p.canary_nodes for p in load_deployment(path).pool_specs()] == [1, 1]


def test_each_pools_telemetry_reads_its_own_nodes_and_a_single_pool_every_series(tmp_path):
    nodes = [{"name": name, "agent_url": "http://127.0.0.1:9", "token_file": "edge-1.token"}
             for name in ("edge-1", "edge.2", "core-1")]
    pools = [{"name": "edge", "nodes": ["edge-1", "edge.2"]}, {"name": "core", "nodes": ["core-1"]}]
    fleet = load_deployment(_write(tmp_path, nodes=nodes, pools=pools))
    single = load_deployment(_write(tmp_path, nodes=nodes, pools=[{"name": "all", "nodes": ["edge-1", "edge.2",
                                                                                             "core-1"]}]))
    pipelines = [live_pipeline(fleet, "edge"), live_pipeline(fleet, "core"), live_pipeline(single, "all"),
                 live_pipeline(fleet)]
    try:
        assert [p.telemetry.nodes for p in pipelines] == [("edge-1", "edge.2"), ("core-1",), None, None]
    finally:
        for pipeline in pipelines:
            pipeline.close()


def test_the_latency_stage_the_deployment_names_is_the_one_the_telemetry_reads(tmp_path):
    """`latency.stage: warehouse` (a pipeline ending in a Spark job): the daemon's latency is to the table."""
    default = live_pipeline(load_deployment(_write(tmp_path)))
    warehouse = live_pipeline(load_deployment(_write(tmp_path, latency={"stage": "warehouse"})))
    try:
        assert default.telemetry.latency_stage == "e2e" and warehouse.telemetry.latency_stage == "warehouse"
    finally:
        default.close()
        warehouse.close()
