"""The pipeline file: which components run, on which loopback ports, with which topics, log paths and
starting config. What the controller needs of it is a deployment (`controller.deployment`), which
`testbed.endpoints.deployment` derives from it and `up` writes to `<run_dir>/deployment.yaml`. `load_pipeline` turns a YAML file into a validated `PipelineSpec`, or raises
`PipelineError` naming the file, the field and what is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from controller.deployment import DeploymentError, StartConfig
from models.space import Config
from models.yaml_doc import yaml_mapping
from testbed.install import cache_dir

DEFAULT_PIPELINE = Path(__file__).resolve().parent / "pipeline.yaml"

Port = Field(ge=1024, le=65535)


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

    @model_validator(mode="after")
    def _consistent(self) -> "PipelineSpec":
        topics = {t.name for t in self.kafka.topics}
        for field, topic in (("filebeat.topic", self.filebeat.topic), ("probe.topic", self.probe.topic)):
            if topic not in topics:
                raise ValueError(f"{field}: topic {topic!r} is not among kafka.topics ({', '.join(sorted(topics))})")
        ports: dict[int, str] = {}
        for field, port in self.ports().items():
            if port in ports:
                raise ValueError(f"{field} and {ports[port]} both use port {port}; each listener needs its own")
            ports[port] = field
        return self

    def ports(self) -> dict[str, int]:
        """Every loopback port the testbed listens on, by field name."""
        return {"kafka.port": self.kafka.port, "kafka.controller_port": self.kafka.controller_port,
                "filebeat.http_port": self.filebeat.http_port, "prometheus.port": self.prometheus.port,
                "probe.metrics_port": self.probe.metrics_port, "agent.port": self.agent.port}

    def resolved_run_dir(self) -> Path:
        """Where the testbed keeps its configs, data, pid files and logs."""
        return (self.run_dir or cache_dir() / "run" / self.name).expanduser().resolve()

    def log_path(self) -> Path:
        return self.log.path if self.log.path.is_absolute() else self.resolved_run_dir() / self.log.path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka.port}"

    def start_config(self) -> Config:
        """The pipeline's starting `Config`: the named preset with `config.set` applied (the deployment's schema)."""
        try:
            return self.config.config()
        except DeploymentError as err:
            raise PipelineError(str(err)) from None


def load_pipeline(path: Path | str = DEFAULT_PIPELINE) -> PipelineSpec:
    """Read and validate a pipeline file."""
    path = Path(path)
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


def _describe(error: dict) -> str:
    where = ".".join(str(part) for part in error["loc"])
    message = error["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message
