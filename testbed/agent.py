"""The testbed's node agent: it starts and changes Filebeat, the broker's dynamic configs and the probe
(a Kafka consumer).

`up` writes `<run>/agent/agent.yaml` and a bearer token (`<run>/agent/token`, mode 0600), then
starts `pipetune agent` on loopback; every later Filebeat, broker or consumer change is a versioned
request to it, so the testbed is changed the way a real node is.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from pathlib import Path

import yaml

from agents.client import AgentClient
from agents import filebeat_adapter
from agents.filebeat_render import input_selector, write_first_config
from agents.kafka_broker import KafkaBrokerAdapter
from agents.kafka_client import FILE as CONSUMER_PROPERTIES, KafkaConsumerAdapter
from models.space import Config, Param, Value
from testbed.filebeat_layout import filebeat_layout
from testbed.pipeline import PipelineSpec
from testbed.probe import checkout_env, probe_config_dir, probe_service
from testbed.processes import Service


def agent_dir(spec: PipelineSpec) -> Path:
    return spec.resolved_run_dir() / "agent"


def token_file(spec: PipelineSpec) -> Path:
    return agent_dir(spec) / "token"


def agent_url(spec: PipelineSpec) -> str:
    return f"http://127.0.0.1:{spec.agent.port}"


def _params(config: Config, params: tuple[Param, ...]) -> dict[str, Value]:
    """The starting values of the parameters a component takes (its adapter's)."""
    return {p.name: config[p.name] for p in params}


def agent_service(spec: PipelineSpec, filebeat_binary: Path, config: Config) -> Service:
    """Write Filebeat's first config and the probe's properties file, agent.yaml pointing at them, and a
    fresh token; the agent patches them to `config` and starts Filebeat and the probe when it starts.

    Each `up` starts the agent on an empty state dir: a kept one would put back its last version, with
    files written for the ports and paths of the pipeline file as it was then.
    """
    directory = agent_dir(spec)
    shutil.rmtree(directory / "state", ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    layout = filebeat_layout(spec)
    filebeat_yml = write_first_config(layout, config)
    properties = probe_config_dir(spec) / CONSUMER_PROPERTIES
    properties.parent.mkdir(parents=True, exist_ok=True)
    properties.write_text("# librdkafka settings of the probe's consumer, read when it starts\n")
    document = {
        "state_dir": str(directory / "state"), "host": "127.0.0.1", "port": spec.agent.port,
        "health_timeout_s": spec.agent.health_timeout_s, "settle_s": spec.agent.settle_s,
        "components": [
            {"name": "filebeat", "kind": "filebeat", "binary": str(filebeat_binary), "config": str(filebeat_yml),
             "inputs": [input_selector(layout)], "http_port": layout.http_port,
             "params": _params(config, filebeat_adapter.PARAMS)},
            {"name": "kafka", "kind": "kafka", "bootstrap": spec.bootstrap, "broker_id": 1,
             "params": _params(config, KafkaBrokerAdapter.params)},
            {"name": "probe", "kind": "kafka-consumer", "properties": str(properties),
             "health_url": f"http://127.0.0.1:{spec.probe.metrics_port}/metrics",
             "runtime": {"argv": list(probe_service(spec).argv)},
             "params": _params(config, KafkaConsumerAdapter.params)},
        ],
    }
    (directory / "agent.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    token = token_file(spec)
    # Created 0600 before the secret is written, so it is never readable by others.
    fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(32) + "\n")
    token.chmod(0o600)
    argv = (sys.executable, "-m", "cli", "agent", "--config", str(directory / "agent.yaml"),
            "--token-file", str(token))
    return Service("agent", argv, spec.resolved_run_dir(), env=checkout_env())


def client(spec: PipelineSpec) -> AgentClient:
    """A client of the testbed's agent, with the token `up` generated."""
    return AgentClient(agent_url(spec), token_file(spec).read_text().strip())
