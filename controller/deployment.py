"""The deployment file: a pipeline as its operator runs it, and the `LivePipeline` built from it.

Nodes (name, agent URL, token file, CA file), the pools they are tuned in, the Kafka bootstrap and the consumer group whose lag
matters, Prometheus, where latency comes from, and the config to assume for parameters no agent takes.
`load_deployment` returns a validated `Deployment` or raises `DeploymentError` naming the file and the
field (`nodes.0.token_file`) and what is allowed. Relative paths are relative to the file's directory.

Pools group nodes of the same role and comparable traffic: each pool has one config and one learner.
Without `pools:` every node is in one pool, `default`; with it, every node is in exactly one pool.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, ValidationError, model_validator

from agents.client import AgentClient
from agents.config import GivenValue, read_yaml_mapping
from controller.kafka_lag import GroupLag, LagWatch
from controller.live import LivePipeline, managers
from controller.realizer import Driven
from controller.rollout import CanaryPool, LivePoolWindows
from controller.state import DEFAULT_POOL, PoolDir, plan_pool_dirs
from controller.telemetry import PrometheusTelemetry
from controller.tuned_space import Managers
from models.presets import preset
from models.rollout import plan_rollout
from models.space import PIPELINE_SPACE, Config, ParamError


class DeploymentError(ValueError):
    """A deployment file that cannot be read or is not valid; the message names the file and the field."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NodeSpec(_Spec):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    agent_url: AnyHttpUrl = Field(description="the node agent's base URL: https off loopback")
    token_file: Path = Field(description="file holding the agent's bearer token (mode 0600)")
    ca_file: Path | None = Field(default=None, description="PEM CA bundle that signed the agent's certificate")


class KafkaSpec(_Spec):
    bootstrap: str = Field(min_length=1, description="host:port[,host:port...] of the brokers")
    consumer_group: str = Field(min_length=1, description="the consumer group whose lag says whether output keeps up")
    commit_interval_s: float = Field(default=5.0, gt=0, le=600,
                                     description="how often the group commits its offsets (auto.commit.interval.ms, "
                                                 "a batch interval): its lag is the floor over twice this span")


class PrometheusSpec(_Spec):
    url: AnyHttpUrl


class LatencySpec(_Spec):
    source: Literal["event_time", "canary", "worst"] = Field(
        default="event_time", description="which of the probe's latencies the learner optimises: each event's own "
                                          "write time, the agents' canary lines, or the worse of both per window")
    stage: Literal["e2e", "warehouse"] = Field(
        default="e2e", description="the latency optimised: to the probe's read from Kafka (e2e), or to a Spark job's "
                                   "micro-batch committed into its table (warehouse; source event_time only)")
    clock_offsets_file: Path | None = Field(
        default=None, description="the file the probe reads node clock offsets from (its --clock-offsets); the "
                                  "daemon measures each node's offset every window and writes it there")

    @model_validator(mode="after")
    def _warehouse_of_events(self) -> "LatencySpec":
        if self.stage == "warehouse" and self.source != "event_time":
            raise ValueError(f"stage warehouse: only events reach the table, so source must be event_time, "
                             f"not {self.source}")
        return self


class PoolSpec(_Spec):
    """Nodes tuned together: one config, one learner; a change goes to `canary_nodes` of them first."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    nodes: list[str] = Field(min_length=1, description="names from `nodes:`; every node in exactly one pool")
    canary_nodes: int = Field(default=1, ge=1, description="nodes a candidate goes to first; fewer than the "
                                                           "pool's nodes when it has more than one")
    max_unavailable: int = Field(default=1, ge=1, description="nodes restarting at once during a promotion")
    canary_max_windows: int = Field(default=3, ge=1, le=10, description="windows a canary runs at most while its "
                                    "judgement is unclear, judged again over all of them after each")


class StartConfig(_Spec):
    """The config to assume at start: a named preset with single parameters overridden. It fills the parameters no
    agent takes, which the daemon holds at these values: it never searches them (`controller.tuned_space`)."""

    preset: str = "defaults"
    set: dict[str, GivenValue] = {}

    def config(self) -> Config:
        try:
            return PIPELINE_SPACE.config(self.set, base=preset(self.preset))
        except (KeyError, ParamError) as err:
            raise DeploymentError(f"config: {err.args[0] if isinstance(err, KeyError) else err}") from None


class Deployment(_Spec):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    nodes: list[NodeSpec] = Field(min_length=1)
    pools: list[PoolSpec] | None = Field(default=None, min_length=1,
                                         description=f"absent: one pool, {DEFAULT_POOL!r}, of every node")
    kafka: KafkaSpec
    prometheus: PrometheusSpec
    latency: LatencySpec = LatencySpec()
    config: StartConfig = StartConfig()
    testbed: Path | None = Field(default=None, description="set by `pipetune testbed up`: the testbed's pipeline "
                                                           "file, whose replay autotune drives; none for an operator's")

    @model_validator(mode="after")
    def _unique_nodes(self) -> "Deployment":
        names = [n.name for n in self.nodes]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ValueError(f"nodes.{i}.name: {name!r} is used by another node; each node needs its own name")
        return self

    @model_validator(mode="after")
    def _every_node_in_one_pool(self) -> "Deployment":
        nodes = {n.name for n in self.nodes}
        owner: dict[str, str] = {}
        for i, pool in enumerate(self.pools or ()):
            if any(p.name == pool.name for p in self.pools[:i]):
                raise ValueError(f"pools.{i}.name: {pool.name!r} is used by another pool; each pool needs its own name")
            for j, node in enumerate(pool.nodes):
                if node not in nodes:
                    raise ValueError(f"pools.{i}.nodes.{j}: {node!r} is not a node of this deployment; "
                                     f"nodes: {', '.join(sorted(nodes))}")
                if node in owner:
                    raise ValueError(f"pools.{i}.nodes.{j}: {node!r} is already in pool {owner[node]!r}; "
                                     "every node is in exactly one pool")
                owner[node] = pool.name
            if len(pool.nodes) > 1 and pool.canary_nodes >= len(pool.nodes):
                raise ValueError(f"pools.{i}.canary_nodes: {pool.canary_nodes} leaves no control node in a pool of "
                                 f"{len(pool.nodes)} nodes; allowed: 1 to {len(pool.nodes) - 1}")
        left = [n.name for n in self.nodes if n.name not in owner]
        if self.pools and left:
            raise ValueError(f"pools: {', '.join(left)} in no pool; every node is in exactly one pool")
        return self

    def pool_specs(self) -> list[PoolSpec]:
        """The pools as written, or the one pool `default` of every node when the file has none."""
        return list(self.pools or [PoolSpec(name=DEFAULT_POOL, nodes=[n.name for n in self.nodes])])

    def pool(self, name: str) -> PoolSpec:
        """The pool called `name`; `KeyError` naming the known ones."""
        pools = self.pool_specs()
        for pool in pools:
            if pool.name == name:
                return pool
        raise KeyError(f"no pool {name!r} in deployment {self.name!r}; pools: {', '.join(p.name for p in pools)}")

    def resolved(self, base: Path) -> "Deployment":
        """The same deployment with relative file paths made relative to `base` (the file's directory)."""
        def at(path: Path | None) -> Path | None:
            return None if path is None else path if path.is_absolute() else (base / path).resolve()
        nodes = [n.model_copy(update={"token_file": at(n.token_file), "ca_file": at(n.ca_file)}) for n in self.nodes]
        latency = self.latency.model_copy(update={"clock_offsets_file": at(self.latency.clock_offsets_file)})
        return self.model_copy(update={"nodes": nodes, "testbed": at(self.testbed), "latency": latency})


def load_deployment(path: Path | str) -> Deployment:
    """Read and validate a deployment file (its nodes' token and CA files must be readable)."""
    path = Path(path)
    try:
        raw = read_yaml_mapping(path, "deployment")
    except OSError as err:
        raise DeploymentError(f"cannot read deployment file {path}: {err.strerror}") from None
    except ValueError as err:
        raise DeploymentError(str(err)) from None
    try:
        deployment = Deployment.model_validate(raw).resolved(path.resolve().parent)
    except ValidationError as err:
        raise DeploymentError(f"{path}: {'; '.join(_describe(e) for e in err.errors())}") from None
    try:
        deployment.config.config()
    except DeploymentError as err:
        raise DeploymentError(f"{path}: {err}") from None
    for i, node in enumerate(deployment.nodes):
        for field, file in (("token_file", node.token_file), ("ca_file", node.ca_file)):
            if file is not None and not file.is_file():
                raise DeploymentError(f"{path}: nodes.{i}.{field}: {file} is not a readable file (node {node.name})")
    return deployment


def is_deployment_file(path: Path) -> bool:
    """Whether `path` is a deployment file (it lists `nodes`) rather than a testbed pipeline file. One that is not
    UTF-8 text or is nested too deeply to read is taken for one: `load_deployment` says what is wrong with it."""
    try:
        raw = yaml.safe_load(path.read_bytes().decode())
    except (OSError, yaml.YAMLError):
        return False  # let the loader of the other format say what is wrong
    except (UnicodeDecodeError, RecursionError):
        return True
    return isinstance(raw, dict) and "nodes" in raw


def write_deployment(deployment: Deployment, path: Path) -> Path:
    """Write `deployment` as YAML (the same schema `load_deployment` reads)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(deployment.model_dump(mode="json", exclude_none=True), sort_keys=False))
    return path


def agent_client(node: NodeSpec, *, timeout_s: float = 120.0) -> AgentClient:
    """A client of `node`'s agent with its token and CA. `OSError` when the token file cannot be read."""
    token = node.token_file.read_text().strip()
    return AgentClient(str(node.agent_url).rstrip("/"), token, node.ca_file, timeout_s=timeout_s, node=node.name)


def live_pipeline(deployment: Deployment, pool: str | None = None) -> LivePipeline:
    """One agent client per node (of `pool` only, when named); the telemetry in Prometheus (latency from
    `latency.source`) and the consumer group's lag (sampled from now on, until the pipeline is closed), from
    the deployment alone. In a deployment of several pools, a pool's telemetry reads its own nodes' series
    only (the group's lag stays the topic's); with one pool it reads every series, as without pools."""
    members = set(deployment.pool(pool).nodes) if pool is not None else {n.name for n in deployment.nodes}
    agents = [agent_client(node) for node in deployment.nodes if node.name in members]
    kafka = deployment.kafka
    lag = LagWatch(GroupLag(kafka.bootstrap, kafka.consumer_group), span_s=2 * kafka.commit_interval_s)
    scoped = pool is not None and len(deployment.pool_specs()) > 1
    telemetry = PrometheusTelemetry(str(deployment.prometheus.url).rstrip("/"), deployment.latency.source, lag,
                                    nodes=tuple(deployment.pool(pool).nodes) if scoped else None,
                                    latency_stage=deployment.latency.stage)
    return LivePipeline(agents, telemetry, deployment.config.config(), deployment.latency.clock_offsets_file)


def pool_managers(deployment: Deployment, pool: str) -> Managers:
    """Each parameter some agent of `pool` takes -> who takes it ("node/component"), asked of its agents now;
    `PipelineUnavailable` when one does not answer, `OSError` when a token file cannot be read."""
    agents = [agent_client(node) for node in deployment.nodes if node.name in deployment.pool(pool).nodes]
    try:
        return managers(agents)
    finally:
        for agent in agents:
            agent.close()


def pool_pipeline(deployment: Deployment, pool: PoolSpec, directory: Path) -> Driven:
    """What the daemon drives for `pool`: a pool of one node is its `LivePipeline`, changed directly; a pool
    of several rolls each change out canary first (`controller.rollout`), its rollout state in `directory`."""
    pipeline = live_pipeline(deployment, pool.name)
    if len(pool.nodes) == 1:
        return Driven.direct(pipeline, pipeline.node_versions)
    base = deployment.config.config()
    nodes = {agent.node: LivePipeline([agent], pipeline.telemetry, base) for agent in pipeline.agents}
    plan = plan_rollout(pool.nodes, pool.canary_nodes, pool.max_unavailable)
    canary = CanaryPool(nodes, LivePoolWindows(pipeline, pipeline.telemetry), plan, directory / "rollout.json",
                        max_windows=pool.canary_max_windows, node_versions=pipeline.node_versions)
    return Driven(canary, canary)


def pool_pipelines(deployment: Deployment, directory: Path) -> list[tuple[PoolDir, Driven]]:
    """Each pool's state directory under `directory` and its pipeline over only its nodes."""
    dirs = plan_pool_dirs(directory, {p.name: p.nodes for p in deployment.pool_specs()})
    return [(pool, pool_pipeline(deployment, deployment.pool(pool.name), pool.directory)) for pool in dirs]


def _describe(error: dict) -> str:
    where = ".".join(str(part) for part in error["loc"])
    message = error["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message
