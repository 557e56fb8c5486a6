"""The pipeline file: which components run, on which loopback ports, with which topics, log paths and
starting config. What the controller needs of it is a deployment (`controller.deployment`), which
`testbed.endpoints.deployment` derives from it and `up` writes to `<run_dir>/deployment.yaml`. `load_pipeline` turns a YAML file into a validated `PipelineSpec`, or raises
`PipelineError` naming the file, the field and what is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from controller.deployment import DeploymentError, StartConfig
from models.space import Config
from models.yaml_doc import yaml_mapping
from testbed.install import cache_dir

DEFAULT_PIPELINE = Path(__file__).resolve().parent / "pipeline.yaml"
# The pipelines `--pipeline` also takes by name: the default, and the paper's whole pipeline (nginx in front, Spark
# writing into a Hive table at the end).
NAMED_PIPELINES = {"local": DEFAULT_PIPELINE, "paper": DEFAULT_PIPELINE.with_name("paper.yaml")}
SPARK_TABLE = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
SPARK_MASTER = r"^(local(\[(\*|[1-9][0-9]*)(,[1-9][0-9]*)?\])?|spark://\S+|yarn|k8s://\S+)$"

Port = Field(ge=1024, le=65535)
MAX_NODES, MAX_BROKERS = 16, 5
MAX_IDLE_FILES = 100_000
# Where the simulated hosts listen when there are several: node i's agent on 127.0.1.i, broker j on 127.0.2.j.
NODE_NET, BROKER_NET = "127.0.1", "127.0.2"


class PipelineError(ValueError):
    """A pipeline file that cannot be read or is not valid; the message names the field."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TopicSpec(_Spec):
    name: str = Field(pattern=r"^[A-Za-z0-9._-]{1,200}$")
    partitions: int = Field(default=1, ge=1, le=64)
    # The broker's append time is the Kafka stamp the probe reads, so it marks when Kafka had the event.
    configs: dict[str, str] = {"message.timestamp.type": "LogAppendTime"}


class KafkaSpec(_Spec):
    port: int = Port
    controller_port: int = Port
    heap_mb: int = Field(default=512, ge=128, le=8192)
    topics: list[TopicSpec] = Field(min_length=1)


class LogSpec(_Spec):
    path: Path = Field(description="the replayed access log; relative paths are under the run dir")
    format: Literal["json", "multiline-json", "combined", "nginx-json"] = "json"
    idle_files: int = Field(default=0, ge=0, le=MAX_IDLE_FILES,
                            description="rotated files beside the log that no longer grow (`access.log.1` ...), "
                                        "which the Filebeat input's globs match: each scan stats them")


class FilebeatSpec(_Spec):
    input: Literal["filestream", "log"] = "filestream"
    topic: str
    http_port: int = Port


class PrometheusSpec(_Spec):
    port: int = Port
    scrape_interval_s: float = Field(default=1.0, gt=0, le=60)


class ProbeSpec(_Spec):
    topic: str
    metrics_port: int = Port
    group_id: str = "pipetune-probe"
    late_after_s: float = Field(default=10.0, gt=0, description="grace after a run's end before missing events count as lost")


class AgentSpec(_Spec):
    port: int = Port
    health_timeout_s: float = Field(default=30.0, gt=0, description="how long a changed component may take to be healthy")
    settle_s: float = Field(default=1.0, ge=0, description="how long it must stay healthy before a change counts")
    canary_eps: float | None = Field(default=None, gt=0, le=1000,
                                     description="each agent writes this many canaries a second into its node's "
                                                 "log, the probe's loss signal (agents/heartbeat.py); none when omitted")
    canary_file: bool = Field(default=False, description="canaries go into a file of their own beside each node's "
                                                         "log (`canary.log`), which its Filebeat input reads too; "
                                                         "else into the busy log")


class NginxSpec(_Spec):
    """Debian's nginx in front of each node (testbed/nginx_source.py), on 127.0.0.1 (`PipelineSpec.nginx_port`): its
    access log, one JSON line per request with nginx's own `$request_id`, is the node's log."""

    port: int = Port


class SparkSpec(_Spec):
    """The Structured Streaming job at the end (testbed/spark_job.py): the topic into a Hive-format table."""

    metrics_port: int = Port
    master: str = Field(default="local[2]", pattern=SPARK_MASTER,
                        description="local[N] on this node, or an operator's spark://, yarn or k8s:// master")
    trigger_interval_s: float = Field(default=1.0, ge=0.05, le=3600)
    max_offsets_per_trigger: int | None = Field(default=None, ge=1)
    shuffle_partitions: int = Field(default=2, ge=1, le=10_000)
    table: str = Field(default="nginx_access", pattern=SPARK_TABLE)
    driver_memory_mb: int = Field(default=1024, ge=256, le=65536)
    ready_timeout_s: float = Field(default=300.0, gt=0, description="how long the job may take to start its query")


class PipelineSpec(_Spec):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    run_dir: Path | None = None
    log: LogSpec
    kafka: KafkaSpec
    filebeat: FilebeatSpec
    prometheus: PrometheusSpec
    probe: ProbeSpec
    agent: AgentSpec = AgentSpec(port=18765)
    config: StartConfig = StartConfig()
    nodes: int = Field(default=1, ge=1, le=MAX_NODES, description="Filebeat nodes, each with its own agent and log")
    brokers: int = Field(default=1, ge=1, le=MAX_BROKERS, description="Kafka brokers (KRaft, each also a controller)")
    nginx: NginxSpec | None = Field(default=None, description="nginx in front of each node, writing its log")
    spark: SparkSpec | None = Field(default=None, description="a Spark job at the end, the topic into a table")

    @model_validator(mode="after")
    def _consistent(self) -> "PipelineSpec":
        topics = {t.name for t in self.kafka.topics}
        for field, topic in (("filebeat.topic", self.filebeat.topic), ("probe.topic", self.probe.topic)):
            if topic not in topics:
                raise ValueError(f"{field}: topic {topic!r} is not among kafka.topics ({', '.join(sorted(topics))})")
        taken: dict[tuple[str, int], str] = {}
        for field, (host, port) in self.listeners().items():
            if (host, port) in taken:
                raise ValueError(f"{field} and {taken[host, port]} both use port {port}{self._sized()}; "
                                 "each listener needs its own")
            taken[host, port] = field
        return self

    def beside(self, name: str, port_shift: int) -> "PipelineSpec":
        """This pipeline under another name (so another run dir), every port `port_shift` higher: a
        testbed that runs beside this one (a bench's own)."""
        k, fb, pr, pb, ag = self.kafka, self.filebeat, self.prometheus, self.probe, self.agent
        return self.model_copy(update={
            "name": name,
            "kafka": k.model_copy(update={"port": k.port + port_shift,
                                          "controller_port": k.controller_port + port_shift}),
            "filebeat": fb.model_copy(update={"http_port": fb.http_port + port_shift}),
            "prometheus": pr.model_copy(update={"port": pr.port + port_shift}),
            "probe": pb.model_copy(update={"metrics_port": pb.metrics_port + port_shift}),
            "agent": ag.model_copy(update={"port": ag.port + port_shift}),
            "nginx": self.nginx and self.nginx.model_copy(update={"port": self.nginx.port + port_shift}),
            "spark": self.spark and self.spark.model_copy(
                update={"metrics_port": self.spark.metrics_port + port_shift})})

    def _sized(self) -> str:
        """How the node and broker counts spread the ports, for a collision's message."""
        if self.nodes == 1 and self.brokers == 1:
            return ""
        return (f" (with nodes={self.nodes} (--nodes) Filebeat i uses filebeat.http_port + i - 1; "
                f"with brokers={self.brokers} (--brokers) broker j listens on {BROKER_NET}.j)")

    def listeners(self) -> dict[str, tuple[str, int]]:
        """Every loopback address and port the testbed listens on, by field (and node or broker)."""
        out = {"prometheus.port": ("127.0.0.1", self.prometheus.port),
               "probe.metrics_port": ("127.0.0.1", self.probe.metrics_port)}
        for broker in self.broker_layouts():
            which = f" (broker {broker.node_id})" if self.brokers > 1 else ""
            out[f"kafka.port{which}"] = (broker.host, broker.port)
            out[f"kafka.controller_port{which}"] = (broker.host, broker.controller_port)
        for node in self.node_layouts():
            suffix = f" ({node.name})" if self.nodes > 1 else ""
            out[f"agent.port{suffix}"] = (node.host, node.agent_port)
            out[f"filebeat.http_port{suffix}"] = ("127.0.0.1", node.filebeat_http_port)
            if self.nginx is not None:
                out[f"nginx.port{suffix}"] = ("127.0.0.1", self.nginx_port(node))
        if self.spark is not None:
            out["spark.metrics_port"] = ("127.0.0.1", self.spark.metrics_port)
        return out

    def node_layouts(self) -> tuple["NodeLayout", ...]:
        """The testbed's nodes. One node is today's testbed: named after the pipeline, on 127.0.0.1, its
        files at the run dir's top; several are node-1..node-N, each on its own address and in its own dir."""
        run = self.resolved_run_dir()
        if self.nodes == 1:
            return (NodeLayout(self.name, "127.0.0.1", self.agent.port, self.filebeat.http_port, run,
                               self._log_under(run)),)
        return tuple(NodeLayout(f"node-{i}", f"{NODE_NET}.{i}", self.agent.port, self.filebeat.http_port + i - 1,
                                run / "nodes" / f"node-{i}", self._log_under(run / "nodes" / f"node-{i}"))
                     for i in range(1, self.nodes + 1))

    def nginx_port(self, node: "NodeLayout") -> int:
        """Where a node's nginx listens on 127.0.0.1: `nginx.port`, + i - 1 for node-i of several (as Filebeat's)."""
        if self.nginx is None:
            raise ValueError(f"nginx: the pipeline {self.name!r} has no nginx in front")
        return self.nginx.port + node.filebeat_http_port - self.filebeat.http_port

    def node_process(self, node: "NodeLayout", component: str) -> str:
        """The name `up` records a node's process under: `agent`, or `agent-node-2` when there are several nodes."""
        return component if self.nodes == 1 else f"{component}-{node.name}"

    def broker_layouts(self) -> tuple["BrokerLayout", ...]:
        """The Kafka brokers: one is today's (127.0.0.1, `<run>/kafka`); several each on their own address."""
        home = self.resolved_run_dir() / "kafka"
        if self.brokers == 1:
            return (BrokerLayout("kafka", 1, "127.0.0.1", self.kafka.port, self.kafka.controller_port, home),)
        return tuple(BrokerLayout(f"kafka-{j}", j, f"{BROKER_NET}.{j}", self.kafka.port, self.kafka.controller_port,
                                  home / f"broker-{j}") for j in range(1, self.brokers + 1))

    def _log_under(self, node_dir: Path) -> Path:
        """A node's log: `log.path` under its dir, or an absolute `log.path` with the node's name as a dir."""
        if not self.log.path.is_absolute():
            return node_dir / self.log.path
        return self.log.path if self.nodes == 1 else self.log.path.parent / node_dir.name / self.log.path.name

    def sized(self, nodes: int, brokers: int) -> "PipelineSpec":
        """This pipeline with `nodes` Filebeat nodes and `brokers` brokers (`--nodes`, `--brokers`), validated:
        a `PipelineError` names the flag and the allowed range, or the ports the sizes make collide."""
        for flag, value, most in (("--nodes", nodes, MAX_NODES), ("--brokers", brokers, MAX_BROKERS)):
            _check_range(flag, value, 1, most)
        try:
            return PipelineSpec.model_validate(self.model_dump() | {"nodes": nodes, "brokers": brokers})
        except ValidationError as err:
            raise PipelineError("; ".join(_describe(e) for e in err.errors())) from None

    def with_idle_files(self, count: int) -> "PipelineSpec":
        """This pipeline with `count` idle rotated files beside each node's log (`--idle-files`); out of range,
        a `PipelineError` names the flag and the allowed range."""
        _check_range("--idle-files", count, 0, MAX_IDLE_FILES)
        return self.model_copy(update={"log": self.log.model_copy(update={"idle_files": count})})

    def resolved_run_dir(self) -> Path:
        """Where the testbed keeps its configs, data, pid files and logs."""
        return (self.run_dir or cache_dir() / "run" / self.name).expanduser().resolve()

    def log_path(self) -> Path:
        """The first node's log (the only one's, on a one-node testbed)."""
        return self.node_layouts()[0].log_path

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{b.host}:{b.port}" for b in self.broker_layouts())

    @property
    def replication_factor(self) -> int:
        """Every topic's (and Kafka's internal topics'): three copies when there are three brokers."""
        return min(3, self.brokers)

    @property
    def min_insync_replicas(self) -> int:
        """With two, `acks=all` waits for a second copy, as in production."""
        return min(2, self.brokers)

    def start_config(self) -> Config:
        """The pipeline's starting `Config`: the named preset with `config.set` applied (the deployment's schema)."""
        try:
            return self.config.config()
        except DeploymentError as err:
            raise PipelineError(str(err)) from None


@dataclass(frozen=True)
class NodeLayout:
    """One simulated host: its agent on its own address, its Filebeat, its log, its files under `home`."""

    name: str  # the deployment's node name, and Filebeat's `name` (the host.name the probe labels it by)
    host: str
    agent_port: int
    filebeat_http_port: int  # Filebeat's stats listen on 127.0.0.1, where the agent's health check looks
    home: Path
    log_path: Path

    @property
    def canary_path(self) -> Path:
        """The canaries' own file (`agent.canary_file`), harvested beside the log."""
        return self.log_path.parent / "canary.log"

    @property
    def agent_url(self) -> str:
        return f"http://{self.host}:{self.agent_port}"


@dataclass(frozen=True)
class BrokerLayout:
    """One Kafka broker (also a KRaft controller): its process's name, node id, address, ports and storage."""

    service_name: str  # `kafka` for a lone broker, `kafka-j` for broker j
    node_id: int
    host: str
    port: int
    controller_port: int
    home: Path


def pipeline_file(path: Path | str) -> Path:
    """`path`, or the named pipeline's file when `path` is one of `NAMED_PIPELINES`'s names and no such file exists."""
    path = Path(path)
    return NAMED_PIPELINES[str(path)] if str(path) in NAMED_PIPELINES and not path.exists() else path


def load_pipeline(path: Path | str = DEFAULT_PIPELINE) -> PipelineSpec:
    """Read and validate a pipeline file (or a named one: `NAMED_PIPELINES`)."""
    path = pipeline_file(path)
    try:
        raw = yaml_mapping(path.read_text(), str(path), "pipeline")
    except OSError as err:
        raise PipelineError(f"cannot read pipeline file {path}: {err.strerror}") from None
    except ValueError as err:
        raise PipelineError(str(err)) from None
    try:
        spec = PipelineSpec.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(_describe(e) for e in err.errors())
        raise PipelineError(f"{path}: {problems}") from None
    spec.start_config()  # a bad preset or value fails here, at load time
    return spec


def _check_range(flag: str, value: int, least: int, most: int) -> None:
    if not least <= value <= most:
        raise PipelineError(f"{flag}: {value} is out of range; allowed {least} to {most}")


def _describe(error: dict) -> str:
    where = ".".join(str(part) for part in error["loc"])
    message = error["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message
