"""The multi-node testbed: N Filebeat nodes, each with its own agent, address and log, into a K-broker
KRaft cluster whose topics are replicated as in production. Sizes and ports are checked before anything
starts; the real cluster (2 nodes, 3 brokers) is brought up once for this module."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
import yaml
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, ConfigResource
from typer.testing import CliRunner

from agents.client import AgentClient, AgentError
from agents.config import AgentConfig
from agents.filebeat.render import render_filebeat_config, render_filebeat_inputs
from cli.main import app
from controller.deployment import agent_client, live_pipeline, load_deployment, pool_pipeline
from controller.realizer import OutcomeKind
from controller.rollout import CanaryPool
from replay import arrivals
from replay.profiles import Profile, WorkloadSpec
from models.space import PIPELINE_SPACE
from testbed import agent, lifecycle
from testbed.endpoints import write_deployment
from testbed.filebeat_layout import filebeat_layout
from testbed.harness import CHUNK_S, BackgroundLoad, replay_and_check
from testbed.install import Installed
from testbed.kafka import render_server_properties
from testbed.pipeline import PipelineError, PipelineSpec, load_pipeline
from testbed.prometheus import prometheus_url, render_prometheus_config
from tests.cli.test_testbed import _our_processes
from tests.conftest import LOW_LATENCY, _write_pipeline

runner = CliRunner()


def _spec(tmp_path: Path, nodes: int, brokers: int, **changes: object) -> PipelineSpec:
    return load_pipeline(_write_pipeline(tmp_path, "fleet", **changes)).sized(nodes, brokers)


@pytest.mark.parametrize("nodes, brokers, flag, allowed", [
    (0, 1, "--nodes", "1 to 16"), (17, 1, "--nodes", "1 to 16"),
    (1, 0, "--brokers", "1 to 5"), (2, 6, "--brokers", "1 to 5"),
])
def test_a_size_out_of_range_names_the_flag_and_the_range(tmp_path, nodes, brokers, flag, allowed):
    with pytest.raises(PipelineError, match=f"{flag}: .* allowed {allowed}"):
        _spec(tmp_path, nodes, brokers)
    result = runner.invoke(app, ["testbed", "up", "--pipeline", str(_write_pipeline(tmp_path, "fleet")),
                                 "--nodes", str(nodes), "--brokers", str(brokers)])
    assert result.exit_code == 2 and flag in result.output and allowed in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "run" / "state.json").exists()  # nothing started


def test_a_size_in_the_pipeline_file_is_checked_by_field(tmp_path):
    with pytest.raises(PipelineError, match="nodes: .*less than or equal to 16"):
        load_pipeline(_write_pipeline(tmp_path, "fleet", nodes=20))


def test_ports_the_node_count_makes_collide_name_both_fields_and_the_flag(tmp_path):
    # Node i's Filebeat serves its stats on filebeat.http_port + i - 1: node 3's would take Prometheus' port.
    path = _write_pipeline(tmp_path, "fleet", kafka={"port": 30100, "controller_port": 30101},
                           filebeat={"http_port": 30000}, prometheus={"port": 30002}, probe={"metrics_port": 30102},
                           agent={"port": 30103})
    assert load_pipeline(path).sized(2, 1).nodes == 2
    with pytest.raises(PipelineError, match=r"filebeat.http_port \(node-3\) and prometheus.port both use port"
                                            r".*--nodes"):
        load_pipeline(path).sized(3, 1)
    result = runner.invoke(app, ["testbed", "up", "--pipeline", str(path), "--nodes", "3"])
    assert result.exit_code == 2 and "filebeat.http_port (node-3)" in result.output


def test_each_node_has_its_own_address_log_agent_and_host_name(tmp_path):
    spec = _spec(tmp_path, 3, 3)
    nodes = spec.node_layouts()
    assert [n.name for n in nodes] == ["node-1", "node-2", "node-3"]
    assert [n.agent_url for n in nodes] == [f"http://127.0.1.{i}:{spec.agent.port}" for i in (1, 2, 3)]
    assert len({n.log_path for n in nodes}) == 3 and len({n.filebeat_http_port for n in nodes}) == 3
    rendered = yaml.safe_load(render_filebeat_config(filebeat_layout(spec, nodes[1]), spec.start_config()))
    assert rendered["name"] == "node-2"  # Filebeat's host.name, the probe's `node`
    assert rendered["output.kafka"]["hosts"] == [f"127.0.2.{j}:{spec.kafka.port}" for j in (1, 2, 3)]
    jobs = yaml.safe_load(render_prometheus_config(spec))["scrape_configs"]
    agents = [job for job in jobs if job["job_name"].startswith("pipetune-agent")]
    assert [job["static_configs"][0]["labels"]["node"] for job in agents] == ["node-1", "node-2", "node-3"]
    assert len({job["authorization"]["credentials_file"] for job in agents}) == 3  # each agent its own token


def test_with_canary_eps_each_agent_writes_canaries_named_after_its_node_into_its_log(tmp_path):
    spec = _spec(tmp_path, 2, 1, agent={"canary_eps": 2.0})
    for node in spec.node_layouts():
        agent.agent_service(spec, node, tmp_path / "filebeat", spec.start_config())
        written = AgentConfig.model_validate(yaml.safe_load((node.home / "agent" / "agent.yaml").read_text()))
        assert (written.canary.path, written.canary.node, written.canary.canary_eps) == (node.log_path, node.name, 2.0)
    (tmp_path / "plain").mkdir()
    plain = _spec(tmp_path / "plain", 1, 1)
    agent.agent_service(plain, plain.node_layouts()[0], tmp_path / "filebeat", plain.start_config())
    assert "canary" not in yaml.safe_load((plain.node_layouts()[0].home / "agent" / "agent.yaml").read_text())


def test_with_canary_file_canaries_get_a_file_of_their_own_that_filebeat_harvests_too(tmp_path):
    spec = _spec(tmp_path, 2, 1, agent={"canary_eps": 2.0, "canary_file": True})
    for node in spec.node_layouts():
        agent.agent_service(spec, node, tmp_path / "filebeat", spec.start_config())
        written = AgentConfig.model_validate(yaml.safe_load((node.home / "agent" / "agent.yaml").read_text()))
        assert written.canary.path == node.canary_path != node.log_path
        assert node.canary_path.parent == node.log_path.parent
        inputs = yaml.safe_load(render_filebeat_inputs(filebeat_layout(spec, node), spec.start_config()))
        assert inputs[0]["paths"] == [str(node.log_path), str(node.canary_path)]  # one input: a harvester each


def test_an_absolute_log_path_gets_a_directory_per_node(tmp_path):
    spec = _spec(tmp_path, 2, 1, log={"path": str(tmp_path / "logs" / "access.log")})
    assert [n.log_path for n in spec.node_layouts()] == [tmp_path / "logs" / f"node-{i}" / "access.log" for i in (1, 2)]


def test_the_one_node_testbed_is_todays(tmp_path):
    spec = _spec(tmp_path, 1, 1)
    (node,), (broker,) = spec.node_layouts(), spec.broker_layouts()
    assert node.name == spec.name and node.agent_url == f"http://127.0.0.1:{spec.agent.port}"
    assert node.log_path == spec.resolved_run_dir() / "logs" / "access.log"
    assert broker.service_name == "kafka" and spec.bootstrap == f"127.0.0.1:{spec.kafka.port}"
    assert "replication.factor=1\n" in render_server_properties(spec, broker, spec.start_config())


def test_every_broker_is_a_voter_and_replicates_as_in_production(tmp_path):
    spec = _spec(tmp_path, 1, 3)
    props = dict(line.split("=", 1) for line in
                 render_server_properties(spec, spec.broker_layouts()[1], spec.start_config()).splitlines())
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == ",".join(f"{j}@127.0.2.{j}:{spec.kafka.controller_port}"
                                                         for j in (1, 2, 3))
    assert props["default.replication.factor"] == props["offsets.topic.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert (spec.replication_factor, spec.min_insync_replicas) == (3, 2)
    assert (_spec(tmp_path, 1, 2).replication_factor, _spec(tmp_path, 1, 5).replication_factor) == (2, 3)


def test_the_deployment_file_lists_every_node_with_its_own_agent_and_no_pools(tmp_path):
    spec = _spec(tmp_path, 3, 1)
    for node in spec.node_layouts():
        (node.home / "agent").mkdir(parents=True)
        (node.home / "agent" / "token").write_text(f"token of {node.name}\n")
    written = write_deployment(spec)
    assert "pools" not in yaml.safe_load(written.read_text())
    nodes = load_deployment(written).nodes
    assert [n.name for n in nodes] == ["node-1", "node-2", "node-3"]
    assert [str(n.agent_url) for n in nodes] == [f"http://127.0.1.{i}:{spec.agent.port}/" for i in (1, 2, 3)]
    assert [n.token_file.read_text() for n in nodes] == [f"token of node-{i}\n" for i in (1, 2, 3)]


def test_the_first_agent_holds_every_brokers_dynamic_configs(tmp_path):
    """A pool's broker settings reach every broker, not broker 1 alone; one broker keeps its name `kafka`."""
    for brokers, names in ((3, ["kafka-1", "kafka-2", "kafka-3"]), (1, ["kafka"])):
        (tmp_path / str(brokers)).mkdir()
        spec = _spec(tmp_path / str(brokers), 2, brokers)
        config = PIPELINE_SPACE.config({"kafka.broker.num.io.threads": 6}, base=spec.start_config())
        for node in spec.node_layouts():
            agent.agent_service(spec, node, Path("/usr/bin/filebeat"), config)  # writes agent.yaml, starts nothing
        first, second = (yaml.safe_load((agent.agent_dir(spec, node) / "agent.yaml").read_text())["components"]
                         for node in spec.node_layouts())
        kafka = [c for c in first if c["kind"] == "kafka"]
        assert [c["name"] for c in kafka] == names and [c["broker_id"] for c in kafka] == list(range(1, brokers + 1))
        assert all(c["params"]["kafka.broker.num.io.threads"] == 6 and c["bootstrap"] == spec.bootstrap
                   for c in kafka)
        assert [c["kind"] for c in second] == ["filebeat"]


# The real cluster: 2 Filebeat nodes, 3 brokers, brought up once for the tests below.
CANARY_WINDOW_S = 10  # enough for a judgement of two nodes at 60 ev/s; the canary test may take five of them

@pytest.fixture(scope="module")
def fleet(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PipelineSpec]:
    directory = tmp_path_factory.mktemp("multinode")
    # A generous grace: a log new to its Filebeat may wait for a scan before its first line ships.
    path = _write_pipeline(directory, "fleet", config=yaml.safe_load(LOW_LATENCY.read_text()),
                           probe={"late_after_s": 60})
    spec = load_pipeline(path).sized(2, 3)
    lifecycle.up(spec)
    try:
        yield spec
    finally:
        lifecycle.down(spec)


def _wait_for(condition, timeout_s: float, what: str):
    """Poll `condition` until it returns something true; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not (result := condition()):
        assert time.monotonic() < deadline, f"{what} not within {timeout_s:g} s"
        time.sleep(0.5)
    return result


@pytest.mark.slow
def test_topics_are_replicated_three_times_with_two_in_sync_required(fleet):
    admin = AdminClient({"bootstrap.servers": fleet.bootstrap})
    topic = fleet.kafka.topics[0].name
    metadata = admin.list_topics(topic, timeout=30)
    assert len(metadata.brokers) == 3
    assert [len(p.replicas) for p in metadata.topics[topic].partitions.values()] == [3]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["min.insync.replicas"].value == "2"


def _e2e_counts_by_node(spec: PipelineSpec) -> dict[str, float]:
    query = urllib.parse.urlencode({"query": 'sum by (node) (pipetune_e2e_latency_seconds_count'
                                             '{source="event_time", stage="e2e"})'})
    with urllib.request.urlopen(f"{prometheus_url(spec)}/api/v1/query?{query}", timeout=5) as response:
        rows = json.load(response)["data"]["result"]
    return {row["metric"].get("node", ""): float(row["value"][1]) for row in rows}


@pytest.mark.slow
def test_each_nodes_events_arrive_labelled_with_that_node(fleet):
    node_1, node_2 = fleet.node_layouts()
    second = replay_and_check(fleet, arrivals.steady(50, 2), node=node_2)
    assert second.report.complete and second.report.lost_events == 0 and second.report.received == 100
    counts = _wait_for(lambda: (c := _e2e_counts_by_node(fleet)).get("node-2", 0) >= 100 and c,
                       60, "node-2's 100 events in Prometheus")
    assert counts.get("node-1", 0) == 0  # nothing was written to node-1's log yet
    first = replay_and_check(fleet, arrivals.steady(50, 1), node=node_1)
    assert first.report.complete and first.report.received == 50
    counts = _wait_for(lambda: (c := _e2e_counts_by_node(fleet)).get("node-1", 0) >= 50 and c,
                       60, "node-1's 50 events in Prometheus")
    assert counts["node-2"] == 100 and set(counts) == {"node-1", "node-2"}
    # The label is Filebeat's own host.name, as shipped to Kafka.
    consumer = Consumer({"bootstrap.servers": fleet.bootstrap, "group.id": "test-multinode-hosts",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([fleet.probe.topic])
    hosts: set[str] = set()
    try:
        def both_seen() -> bool:
            record = consumer.poll(1.0)
            if record is not None and record.error() is None:
                hosts.add(json.loads(record.value())["host"]["name"])
            return hosts >= {"node-1", "node-2"}
        _wait_for(both_seen, 60, "records with host.name node-1 and node-2")
    finally:
        consumer.close()
    assert hosts == {"node-1", "node-2"}


@pytest.mark.slow
def test_each_agent_answers_on_its_own_address_with_its_own_token(fleet):
    nodes = fleet.node_layouts()
    tokens = [(node.home / "agent" / "token").read_text().strip() for node in nodes]
    assert tokens[0] != tokens[1]
    for node, token, other in zip(nodes, tokens, reversed(tokens)):
        with AgentClient(node.agent_url, token) as client:
            names = {c["name"] for c in client.components()}
        assert names == ({"filebeat", "kafka-1", "kafka-2", "kafka-3", "probe"} if node == nodes[0] else {"filebeat"})
        with AgentClient(node.agent_url, other) as client, pytest.raises(AgentError, match="refused the token"):
            client.components()


@pytest.mark.slow
def test_a_change_goes_to_the_canary_node_first_then_the_pool_agrees(fleet, tmp_path):
    """The deployment's pool of two real nodes is a CanaryPool: a candidate runs on node-1 alone until a
    window judges it; then both nodes run the pool's promoted config (the candidate if it was judged
    better, the config before it if not), and the rollout record says which for each node."""
    deployment = load_deployment(write_deployment(fleet))
    (pool,) = deployment.pool_specs()
    canary = pool_pipeline(deployment, pool, tmp_path).pipeline
    assert isinstance(canary, CanaryPool)
    started = canary.current()
    timeout = "filebeat.queue.mem.flush.timeout"
    candidate = PIPELINE_SPACE.config({timeout: 0.2}, base=started)
    clients = {node.name: agent_client(node) for node in deployment.nodes}

    def in_force(node: str) -> float:
        filebeat = next(c for c in clients[node].components() if c["name"] == "filebeat")
        return float(filebeat["params"][timeout])

    # traffic on both nodes for every window observe takes (an unclear canary's extra ones, a step's settle and
    # judgement), and no longer: it ends with the block
    traffic = contextlib.ExitStack()
    try:
        for i, node in enumerate(fleet.node_layouts()):
            traffic.enter_context(BackgroundLoad(fleet, WorkloadSpec(Profile.steady, 60, CHUNK_S, seed=i), node=node))
        canary.observe(CANARY_WINDOW_S)  # the baseline: both nodes on the config in force
        assert canary.realize(candidate).kind is OutcomeKind.CANARY
        assert in_force("node-1") == 0.2 and in_force("node-2") != 0.2  # the canary alone
        # a Filebeat restart's window settles, the next judges; an unclear judgement is extended (the pool's
        # canary_max_windows, 3 by default) one window at a time, each read as the daemon would
        for _ in range(1 + 3):
            canary.observe(CANARY_WINDOW_S)
            outcome = canary.conclude(CANARY_WINDOW_S)
            if outcome.kind not in (OutcomeKind.CANARY, OutcomeKind.EXTENDED):
                break
        report = canary.rollout()
        assert report.phase == "steady" and report.judgement and outcome.config == candidate
        promoted = canary.current()[timeout]
        assert in_force("node-1") == in_force("node-2") == promoted
        recorded = json.loads((tmp_path / "rollout.json").read_text())
        assert recorded["promoted"][timeout] == promoted and set(report.nodes) == {"node-1", "node-2"}
    finally:
        traffic.close()
        canary.realize(started)  # a config the pool ran in full goes back to every node at once
        canary.close()
        for client in clients.values():
            client.close()


@pytest.mark.slow
def test_a_broker_setting_reaches_every_broker(fleet):
    pipeline = live_pipeline(load_deployment(write_deployment(fleet)))
    started = pipeline.current()
    threads = "kafka.broker.num.io.threads"
    wanted = int(started[threads]) + 1
    admin = AdminClient({"bootstrap.servers": fleet.bootstrap})
    brokers = [ConfigResource(ConfigResource.Type.BROKER, str(j)) for j in (1, 2, 3)]
    try:
        assert pipeline.apply(PIPELINE_SPACE.config({threads: wanted}, base=started)).ok
        # one broker a call: the admin API takes a single BROKER resource per request
        values = [admin.describe_configs([b])[b].result(timeout=30)["num.io.threads"].value for b in brokers]
        assert values == [str(wanted)] * 3
    finally:
        pipeline.apply(started)
        pipeline.close()


@pytest.mark.slow
def test_status_shows_every_node_and_broker(fleet):
    result = runner.invoke(app, ["testbed", "status", "--pipeline", str(fleet.resolved_run_dir().parent /
                                                                         "pipeline.yaml")])
    assert result.exit_code == 0, result.output
    assert "2 node(s), 3 broker(s)" in result.output
    for node in fleet.node_layouts():
        assert node.agent_url in result.output and str(node.log_path) in result.output
    for name in ("kafka-1", "kafka-2", "kafka-3", "agent-node-2", "filebeat-node-2", "probe", "prometheus"):
        assert f"  {name} " in result.output and "stopped" not in result.output
    assert "replication factor 3, min.insync.replicas 2" in result.output


@pytest.mark.slow
def test_down_leaves_no_process(fleet):
    stopped = lifecycle.down(fleet)
    assert {"kafka-1", "kafka-2", "kafka-3", "agent-node-1", "agent-node-2", "filebeat-node-1",
            "filebeat-node-2", "probe", "prometheus"} <= set(stopped)
    assert _our_processes(fleet.resolved_run_dir()) == []
