"""The testbed's node agents: each starts and changes its node's Filebeat; the first node's also changes
the broker's dynamic configs and runs the probe (a Kafka consumer), as one shared consumer group, and, in a
pipeline with a Spark sink, changes the Spark job's micro-batch settings (agents/spark.py).

`up` writes each node's `<node>/agent/agent.yaml` and a bearer token (`<node>/agent/token`, mode 0600),
then starts `pipetune agent` on the node's loopback address; every later Filebeat, broker or consumer
change is a versioned request to it, so the testbed is changed the way a real node is.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import yaml

from agents.client import AgentClient
from agents.filebeat import adapter as filebeat_adapter
from agents.filebeat.render import input_selector, write_first_config
from agents.init import METRICS_TOKEN, write_token
from agents.kafka.broker import KafkaBrokerAdapter
from agents.kafka.client import FILE as CONSUMER_PROPERTIES, KafkaConsumerAdapter
from models.listening import is_loopback
from models.space import Config, Param, Value
from testbed.filebeat_layout import filebeat_layout
from testbed.pipeline import NodeLayout, PipelineSpec
from testbed.probe import checkout_env, probe_config_dir, probe_service
from testbed.processes import Service
from testbed.spark_sink import job_settings


def _node(spec: PipelineSpec, node: NodeLayout | None) -> NodeLayout:
    return node or spec.node_layouts()[0]


def agent_dir(spec: PipelineSpec, node: NodeLayout | None = None) -> Path:
    """Node `node`'s agent files (default: the first node's, the one that also runs the probe)."""
    return _node(spec, node).home / "agent"


def token_file(spec: PipelineSpec, node: NodeLayout | None = None) -> Path:
    return agent_dir(spec, node) / "token"


def metrics_token_file(spec: PipelineSpec, node: NodeLayout | None = None) -> Path:
    """The token Prometheus scrapes the agent with: it reads /metrics and nothing else."""
    return agent_dir(spec, node) / METRICS_TOKEN


def agent_url(spec: PipelineSpec, node: NodeLayout | None = None) -> str:
    return _node(spec, node).agent_url


def _params(config: Config, params: tuple[Param, ...]) -> dict[str, Value]:
    """The starting values of the parameters a component takes (its adapter's)."""
    return {p.name: config[p.name] for p in params}


def agent_service(spec: PipelineSpec, node: NodeLayout, filebeat_binary: Path, config: Config) -> Service:
    """Write the node's first Filebeat config (and, on the first node, the probe's properties file),
    agent.yaml pointing at them, and a fresh token; the agent patches them to `config` and starts Filebeat
    (and the probe) when it starts. The first node's agent also holds every broker's dynamic configs.

    Each `up` starts the agent on an empty state dir: a kept one would put back its last version, with
    files written for the ports and paths of the pipeline file as it was then.
    """
    directory = agent_dir(spec, node)
    shutil.rmtree(directory / "state", ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    layout = filebeat_layout(spec, node)
    filebeat_yml = write_first_config(layout, config)
    components: list[dict[str, object]] = [
        {"name": "filebeat", "kind": "filebeat", "binary": str(filebeat_binary), "config": str(filebeat_yml),
         "inputs": [input_selector(layout)], "http_port": layout.http_port,
         "params": _params(config, filebeat_adapter.PARAMS)}]
    if node == spec.node_layouts()[0]:
        properties = probe_config_dir(spec) / CONSUMER_PROPERTIES
        properties.parent.mkdir(parents=True, exist_ok=True)
        properties.write_text("# librdkafka settings of the probe's consumer, read when it starts\n")
        # Broker dynamic configs are per broker: every broker gets the pool's (`kafka` alone, else `kafka-j`),
        # each altered through the cluster's bootstrap (the admin client sends a broker's configs to it).
        components += [
            *({"name": broker.service_name, "kind": "kafka", "bootstrap": spec.bootstrap, "broker_id": broker.node_id,
               "params": _params(config, KafkaBrokerAdapter.params)} for broker in spec.broker_layouts()),
            {"name": "probe", "kind": "kafka-consumer", "properties": str(properties),
             "health_url": f"http://127.0.0.1:{spec.probe.metrics_port}/metrics",
             "runtime": {"argv": list(probe_service(spec).argv)},
             "params": _params(config, KafkaConsumerAdapter.params)}]
        if spec.spark is not None:
            # No starting values: the job's file holds the pipeline file's `spark:` settings, the first version
            job = job_settings(spec)
            components.append({"name": "spark", "kind": "spark-query", "properties": str(job.properties_path),
                               "url": job.url})
    document = {"state_dir": str(directory / "state"), "host": node.host, "port": node.agent_port,
                "health_timeout_s": spec.agent.health_timeout_s, "settle_s": spec.agent.settle_s,
                "components": components}
    if spec.agent.canary_eps is not None:  # in the busy log they share its harvester; in a file of their own, not
        path = node.canary_path if spec.agent.canary_file else node.log_path
        document["canary"] = {"path": str(path), "canary_eps": spec.agent.canary_eps, "node": node.name}
    (directory / "agent.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    token, metrics_token = token_file(spec, node), metrics_token_file(spec, node)
    write_token(token)
    write_token(metrics_token)
    # Another 127/8 address stands for another host, where the agent wants TLS; the testbed's hosts are
    # simulated on this machine's loopback, so plain HTTP (the agent warns at start) crosses no network.
    insecure = () if is_loopback(node.host) else ("--insecure-http",)
    argv = (sys.executable, "-m", "cli", "agent", "--config", str(directory / "agent.yaml"),
            "--token-file", str(token), "--metrics-token-file", str(metrics_token), *insecure)
    return Service(spec.node_process(node, "agent"), argv, spec.resolved_run_dir(), env=checkout_env())


def client(spec: PipelineSpec, node: NodeLayout | None = None) -> AgentClient:
    """A client of node `node`'s agent (default: the first node's), with the token `up` generated."""
    return AgentClient(agent_url(spec, node), token_file(spec, node).read_text().strip())
