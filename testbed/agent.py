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
from agents.filebeat_adapter import FilebeatAdapter
from agents.kafka_broker import KafkaBrokerAdapter
from agents.kafka_client import KafkaConsumerAdapter
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
    """Write agent.yaml and a fresh token; the agent starts Filebeat and the probe on `config` when it starts.

    Each `up` starts the agent on an empty state dir: a kept one would put back its last version, with
    files rendered for the ports and paths of the pipeline file as it was then.
    """
    directory = agent_dir(spec)
    shutil.rmtree(directory / "state", ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    layout = filebeat_layout(spec)
    document = {
        "state_dir": str(directory / "state"), "host": "127.0.0.1", "port": spec.agent.port,
        "health_timeout_s": spec.agent.health_timeout_s, "settle_s": spec.agent.settle_s,
        "components": [
            {"name": "filebeat", "kind": "filebeat", "binary": str(filebeat_binary), "config_dir": str(layout.home_dir),
             "log_paths": [str(p) for p in layout.log_paths], "input_type": layout.input_type,
             "multiline": layout.multiline, "kafka_hosts": list(layout.kafka_hosts), "topic": layout.topic,
             "http_port": layout.http_port, "params": _params(config, FilebeatAdapter.params)},
            {"name": "kafka", "kind": "kafka", "bootstrap": spec.bootstrap, "broker_id": 1,
             "params": _params(config, KafkaBrokerAdapter.params)},
            {"name": "probe", "kind": "kafka-consumer", "config_dir": str(probe_config_dir(spec)),
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
