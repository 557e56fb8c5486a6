"""`pipetune agent init`: look at what a node runs, write an agent.yaml that manages it and a 0600 token.

Every file named is read and understood before anything is written; an error names the file and line.
The starting values are read from the operator's own files, so the agent's first version rewrites none of the
values they hold and adds no key they lack (the agent reads such a key as the component's own default for it:
agents/filebeat/patch.py FILESTREAM_DEFAULTS). A Filebeat key holding what pipetune cannot tune from is left alone.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from ruamel.yaml.nodes import MappingNode, ScalarNode

from agents.adapter import atomic_write
from agents.filebeat import patch as filebeat_patch
from agents.filebeat.adapter import FilebeatAdapter
from agents.filebeat.patch import FilebeatConfigError, InputSelector
from agents.kafka.broker import KafkaBrokerAdapter, cluster_brokers
from agents.logstash.adapter import LogstashAdapter
from agents.logstash.conf import LogstashConfigError, read_plugins
from agents.logstash.patch import OUTPUT_PREFIX, PIPELINE_KEYS
from agents.rebase import OnDisk, same
from agents.yaml_patch import YamlPatchError, lookup, read_document
from models.space import PIPELINE_SPACE, ChangeCost, Param, ParamError, Value

METRICS_TOKEN = "metrics-token"  # beside the token: the one Prometheus scrapes /metrics with
DEFAULT_PORT = 8765  # the agent's; `agent init --port` for a node where it is taken (or that runs two agents)


class InitError(ValueError):
    """What `agent init` cannot use; the message names the file (and line) or the flag."""


@dataclass
class Managed:
    """One component as init found it: its agent.yaml entry and what to tell the operator."""

    entry: dict[str, object]
    summary: list[str] = field(default_factory=list)


def _starting(param: str, written: str, where: str, notes: list[str]) -> Value | None:
    """The value a file holds for `param`, if pipetune can take it as its starting value."""
    try:
        return PIPELINE_SPACE[param].validate(written)
    except ParamError as err:
        notes.append(f"{where}: {param}={written} cannot be tuned from ({err.allowed}); the first version writes "
                     f"{PIPELINE_SPACE[param].default}")
        return None


def _filebeat_values(adapter: FilebeatAdapter, notes: list[str]) -> dict[str, Value]:
    """Starting values: what the files write for each parameter the agent manages (the first selected input's,
    `queue.mem`'s and the output's); the notes say what it leaves alone and where selected inputs disagree."""
    found: dict[str, list[OnDisk]] = {}
    for key in filebeat_patch.on_disk(adapter.files):
        found.setdefault(key.param, []).append(key)
    notes += [f"{param} is left as it is: {why}" for param, why in adapter.left_alone.items()]
    for param, keys in found.items():
        if param not in adapter.left_alone and any(not same(k.value, keys[0].value) for k in keys):
            said = "; ".join(f"{k.where}: {k.written if k.written is not None else f'not set ({k.value:g})'}"
                             for k in keys)
            notes.append(f"the selected inputs disagree on {param} ({said}): the agent's first version writes the "
                         f"first one's value into the others (select one input, or make them agree, to keep them)")
    return {param: keys[0].value for param, keys in found.items()  # type: ignore[misc]
            if param not in adapter.left_alone and keys[0].written is not None}


def _http_port(config: Path) -> int | None:
    """Filebeat's HTTP stats port when its config enables the endpoint (5066 unless it says otherwise)."""
    _, root = read_document(config)
    enabled = lookup(root, "http.enabled") if isinstance(root, MappingNode) else None
    if not (isinstance(enabled, ScalarNode) and enabled.value == "true"):
        return None
    port = lookup(root, "http.port")
    return int(port.value) if isinstance(port, ScalarNode) else 5066


def _costs(params: tuple[Param, ...]) -> list[str]:
    """One line per cost of change (live, reload, restart), naming the keys it applies to."""
    return [f"  {cost.value}: {', '.join(p.name for p in params if p.cost is cost)}"
            for cost in ChangeCost if any(p.cost is cost for p in params)]


def _binary(path: Path, flag: str) -> Path:
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise InitError(f"{flag} {path}: not an executable file")
    return path.resolve()


def filebeat(config: Path, binary: Path, selectors: list[InputSelector]) -> Managed:
    """The Filebeat entry: the selected inputs, the output in use, and each key's cost on this node."""
    config = config.resolve()
    if not config.is_file():
        raise InitError(f"--filebeat-config {config}: no such file")
    if not selectors:
        raise InitError("give the inputs to tune: --input-id ID (a filestream input) or --input-path GLOB (a log input)")
    binary = _binary(binary, "--filebeat-binary")
    http_port = _http_port(config)
    adapter = FilebeatAdapter(config, selectors, binary, http_port=http_port)
    files = adapter.files
    notes: list[str] = []
    params = _filebeat_values(adapter, notes)
    argv = [str(binary), "-c", str(config), "--path.config", str(config.parent)]
    entry = {"name": "filebeat", "kind": "filebeat", "binary": str(binary), "config": str(config),
             "inputs": [{"id": s.id} if s.id is not None else {"path": s.path_glob} for s in selectors],
             "http_port": http_port, "params": params, "runtime": {"kind": "process", "argv": argv}}
    summary = [f"filebeat: {config}, output.{files.output}"]
    summary += [f"  input {t.id or list(t.paths)} ({t.type}, {t.file}:{t.line})" for t in files.inputs]
    summary += _costs(adapter.params) + [f"  note: {note}" for note in notes]
    summary.append(f"  health: {f'GET http://127.0.0.1:{http_port}/stats' if http_port else 'the process runs (no http.enabled)'}")
    summary.append(f"  the agent starts and restarts Filebeat itself: {' '.join(argv)}")
    return Managed({k: v for k, v in entry.items() if v is not None}, summary)


def logstash(settings_dir: Path, pipeline_id: str, output_id: str) -> Managed:
    """The Logstash entry: one pipeline's `pipeline.*` keys and one kafka output's settings."""
    settings_dir = settings_dir.resolve()
    adapter = LogstashAdapter(settings_dir, pipeline_id, output_id)
    files = adapter.files
    notes: list[str] = []
    params: dict[str, Value] = {}
    entry = read_document(files.pipelines_yml)[1].value[files.entry_index]
    for param, key in PIPELINE_KEYS.items():
        node = lookup(entry, key)
        if isinstance(node, ScalarNode):
            value = _starting(param, node.value, f"{files.pipelines_yml}:{node.start_mark.line + 1}", notes)
            params |= {} if value is None else {param: value}
    [output] = [p for p in read_plugins(files.conf.read_text(), str(files.conf)) if p.id == output_id]
    for param in (p.name for p in adapter.params if p.name.startswith(OUTPUT_PREFIX)):
        setting = output.settings.get(param.removeprefix(OUTPUT_PREFIX))
        if setting is not None:
            value = _starting(param, setting.text.strip("\"'"), f"{files.conf}:{output.line}", notes)
            params |= {} if value is None else {param: value}
    summary = [f"logstash: pipeline {pipeline_id!r} ({files.pipelines_yml}), kafka output {output_id!r} ({files.conf})",
               *_costs(adapter.params), *(f"  note: {note}" for note in notes)]
    return Managed({"name": "logstash", "kind": "logstash", "settings_dir": str(settings_dir),
                    "pipeline_id": pipeline_id, "output_id": output_id, "params": params}, summary)


def kafka_broker(bootstrap: str) -> Managed:
    """The broker that answers at `bootstrap`: its dynamic configs, starting from the values it reports."""
    with tempfile.TemporaryDirectory() as scratch:
        try:
            brokers = cluster_brokers(bootstrap)
        except Exception as err:  # any client error: the broker cannot be reached
            raise InitError(f"--kafka-bootstrap {bootstrap}: {err}") from None
        matching = [b for b in brokers if f"{b['host']}:{b['port']}" == bootstrap] or (brokers if len(brokers) == 1 else [])
        if len(matching) != 1:
            listed = ", ".join(f"{b['broker_id']} at {b['host']}:{b['port']}" for b in brokers)
            raise InitError(f"--kafka-bootstrap {bootstrap}: which broker runs here? the cluster has {listed}")
        broker_id = int(matching[0]["broker_id"])
        described = KafkaBrokerAdapter(bootstrap, broker_id, Path(scratch)).described()
    notes: list[str] = []
    params = {}
    for name, text in described.items():
        value = _starting(f"kafka.broker.{name}", text, f"broker {broker_id}", notes)
        params |= {} if value is None else {f"kafka.broker.{name}": value}
    summary = [f"kafka: broker {broker_id} at {bootstrap}, dynamic configs through the admin API",
               *_costs(KafkaBrokerAdapter.params), *(f"  note: {note}" for note in notes)]
    return Managed({"name": "kafka", "kind": "kafka", "bootstrap": bootstrap, "broker_id": broker_id,
                    "params": params}, summary)


def write_token(path: Path) -> None:
    """A fresh bearer token at `path`, 0600 from the moment the file exists."""
    atomic_write(path, secrets.token_urlsafe(32) + "\n", mode=0o600)


def write(out: Path, components: list[Managed], port: int = DEFAULT_PORT) -> tuple[Path, Path]:
    """agent.yaml (the agent listening on loopback at `port`), the token and the metrics token (`METRICS_TOKEN`,
    for Prometheus: it reads /metrics only), each 0600, in `out`; refuses to replace an agent.yaml that is there."""
    agent_yaml, token = out / "agent.yaml", out / "token"
    if agent_yaml.exists():
        raise InitError(f"{agent_yaml} exists: remove it or give another --out")
    document = {"state_dir": str((out / "state").resolve()), "host": "127.0.0.1", "port": port,
                "components": [c.entry for c in components]}
    out.mkdir(parents=True, exist_ok=True)
    write_token(token)
    write_token(out / METRICS_TOKEN)
    atomic_write(agent_yaml, yaml.safe_dump(document, sort_keys=False), mode=0o600)
    return agent_yaml, token


def init(out: Path, filebeat_config: Path, filebeat_binary: Path | None, selectors: list[InputSelector], *,
         logstash_settings: Path | None = None, pipeline_id: str | None = None, output_id: str | None = None,
         kafka_bootstrap: str | None = None, port: int = DEFAULT_PORT) -> tuple[Path, Path, list[str]]:
    """Find what the node runs, write agent.yaml and the token; (agent.yaml, token, what it will manage).
    Raises `InitError` (nothing written) for a file or flag it cannot use."""
    try:
        binary = filebeat_binary or shutil.which("filebeat")
        if binary is None:
            raise InitError("no filebeat on PATH: give --filebeat-binary")
        components = [filebeat(filebeat_config, Path(binary), selectors)]
        if logstash_settings is not None:
            if pipeline_id is None or output_id is None:
                raise InitError("--logstash-settings needs --pipeline-id and --output-id")
            components.append(logstash(logstash_settings, pipeline_id, output_id))
        if kafka_bootstrap is not None:
            components.append(kafka_broker(kafka_bootstrap))
        agent_yaml, token = write(out, components, port)
    except (FilebeatConfigError, LogstashConfigError, YamlPatchError) as err:
        raise InitError(str(err)) from None
    except OSError as err:
        raise InitError(f"{err.filename}: {err.strerror}") from None
    return agent_yaml, token, [line for c in components for line in c.summary]
