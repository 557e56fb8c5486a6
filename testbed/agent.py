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
from typing import Mapping

import yaml

from agents.client import AgentClient
from agents.component import ChangeResult
from models.space import Config, Value
from testbed.filebeat import filebeat_layout
from testbed.pipeline import PipelineSpec
from testbed.probe import checkout_env, probe_config_dir, probe_service
from testbed.processes import Service

# Agent component name -> the prefix of the parameters it owns.
COMPONENTS = {"filebeat": "filebeat.", "kafka": "kafka.broker.", "probe": "kafka.consumer."}


def agent_dir(spec: PipelineSpec) -> Path:
    return spec.resolved_run_dir() / "agent"


def token_file(spec: PipelineSpec) -> Path:
    return agent_dir(spec) / "token"


def agent_url(spec: PipelineSpec) -> str:
    return f"http://127.0.0.1:{spec.agent.port}"


def _params(config: Mapping[str, Value], prefix: str) -> dict[str, Value]:
    return {name: value for name, value in config.items() if name.startswith(prefix)}


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
             "http_port": layout.http_port, "params": _params(config, COMPONENTS["filebeat"])},
            {"name": "kafka", "kind": "kafka", "bootstrap": spec.bootstrap, "broker_id": 1,
             "params": _params(config, COMPONENTS["kafka"])},
            {"name": "probe", "kind": "kafka-consumer", "config_dir": str(probe_config_dir(spec)),
             "health_url": f"http://127.0.0.1:{spec.probe.metrics_port}/metrics",
             "runtime": {"argv": list(probe_service(spec).argv)}, "params": _params(config, COMPONENTS["probe"])},
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


def params_in_force(spec: PipelineSpec) -> dict[str, Value]:
    """The Filebeat, broker and consumer parameters of the versions the agent has in force."""
    with client(spec) as agent:
        return {name: value for component in agent.components() for name, value in component["params"].items()}


def by_component(params: Mapping[str, Value]) -> dict[str, dict[str, Value]]:
    """`params` split by the agent component that owns them; components owning none are left out."""
    parts = {name: _params(params, prefix) for name, prefix in COMPONENTS.items()}
    return {name: part for name, part in parts.items() if part}


def changes_not_in_audit(decisions: list[dict], audit: Mapping[str, list[dict]]) -> list[dict]:
    """The decisions whose change to the agent's components is not a version the agent decided.

    `audit` holds each component's audit entries since the run began. A change touching several
    components is several versions, one in each component's log; a change the agent refused at its
    checks has no version (the push stops at the first refusal) but leaves a rejection.
    """
    started = {name: [entry["changes"] for entry in entries if entry["event"] == "change_started"]
               for name, entries in audit.items()}
    rejected = any(entry["event"] == "rejected" for entries in audit.values() for entry in entries)
    missing = []
    for decision in decisions:
        parts = by_component({name: to for name, (_, to) in decision["change"].items()})
        found = [any(part.items() <= entry.items() for entry in started.get(name, [])) for name, part in parts.items()]
        refused = decision["reason"].startswith("apply failed") and (rejected or any(found))
        if not (all(found) or refused):
            missing.append(decision)
    return missing


def changes_for_agent(decisions: list[dict]) -> list[dict]:
    """The decisions that changed a parameter one of the agent's components owns."""
    return [d for d in decisions if by_component({name: to for name, (_, to) in d["change"].items()})]


def push(spec: PipelineSpec, old: Config, new: Config) -> list[ChangeResult]:
    """Send each agent component's changed parameters as its next version; stops at the first refusal."""
    changed = new.diff(old)
    results: list[ChangeResult] = []
    with client(spec) as agent:
        for name, params in by_component({p: new[p] for p in changed}).items():
            result = agent.put_config(name, agent.next_version(name), params)
            results.append(result)
            if result.status not in ("applied", "unchanged"):
                break
    return results
