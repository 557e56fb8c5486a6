"""agent.yaml: where the agent keeps its state, where it listens, and the components it manages.

`load_agent_config` returns a validated `AgentConfig` or raises `AgentConfigError` naming the file,
the field (`components.0.params.filebeat.backoff`) and what is allowed.
"""

from __future__ import annotations

from pathlib import Path
import math
from typing import Annotated, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from agents.yaml_patch import utf8_text
from models.space import PIPELINE_SPACE, ParamError, Value
from models.yaml_doc import yaml_mapping

Port = Annotated[int, Field(ge=1, le=65535)]


def _finite(value: Value) -> Value:
    """Every parameter compares its numbers as floats: NaN, infinities and integers no float holds are refused
    here, naming the field, rather than failing further in."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    try:
        if math.isfinite(float(value)):
            return value
    except OverflowError:
        pass
    shown = str(value)
    raise ValueError(f"{shown if len(shown) <= 24 else shown[:20] + '...'} is not a finite number a float holds")


# A parameter value as a file or a request gives it.
GivenValue = Annotated[Value, AfterValidator(_finite)]


class AgentConfigError(ValueError):
    """An agent.yaml that cannot be read or is not valid; the message names the field."""


def read_yaml_mapping(path: Path, what: str) -> dict:
    """The top-level mapping of a YAML file; `ValueError` naming the file (and the line, for a YAML error) when it
    is not UTF-8 text, not YAML, nested deeper than a parser follows, or not a mapping of `what` fields. `OSError`
    when it cannot be read."""
    text = utf8_text(path)
    try:
        return yaml_mapping(text, str(path), what)
    except RecursionError:
        raise ValueError(f"{path} is not valid YAML: nested too deeply to read") from None


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProcessRuntimeSpec(_Spec):
    kind: Literal["process"] = "process"
    argv: list[str] | None = Field(default=None, description="the component's command; the adapter's own when omitted")
    reload_signal: str | None = None
    stop_timeout_s: float = Field(default=15.0, gt=0)


class DockerRuntimeSpec(_Spec):
    kind: Literal["docker"]
    container: str = Field(description="an existing container whose config directory is bind-mounted")
    docker_host: str = "unix:///var/run/docker.sock"
    reload_signal: str | None = None
    stop_timeout_s: int = Field(default=15, gt=0)


class ClientRuntimeSpec(ProcessRuntimeSpec):
    """A process runtime whose command must be given (a Kafka client has no standard one)."""

    argv: list[str] = Field(min_length=1, description="the client's command: there is no default one")


RuntimeSpec = Annotated[Union[ProcessRuntimeSpec, DockerRuntimeSpec], Field(discriminator="kind")]


class _Component(_Spec):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    params: dict[str, GivenValue] = Field(default={}, description="starting values; the rest keep the defaults")

    @model_validator(mode="after")
    def _known_params(self) -> "_Component":
        for key, value in self.params.items():
            if key not in PIPELINE_SPACE or not key.startswith(f"{self.prefix()}."):
                raise ValueError(f"params.{key}: not a {self.prefix()} parameter")
            try:
                PIPELINE_SPACE[key].validate(value)
            except ParamError as err:
                raise ValueError(f"params.{key}: {err}") from None
        return self

    def prefix(self) -> str:
        return {"filebeat": "filebeat", "logstash": "logstash", "kafka": "kafka.broker",
                "kafka-consumer": "kafka.consumer",
                "kafka-producer": "kafka.producer", "spark-query": "spark"}[self.kind]  # type: ignore[attr-defined]


class InputSelectorSpec(_Spec):
    """One input to tune: a filestream input's `id`, or a glob one of a `log` input's paths matches."""

    id: str | None = Field(default=None, min_length=1)
    path: str | None = Field(default=None, min_length=1, description="a glob over the input's paths")

    @model_validator(mode="after")
    def _one(self) -> "InputSelectorSpec":
        if (self.id is None) == (self.path is None):
            raise ValueError("give one of id or path")
        return self


class FilebeatComponent(_Component):
    kind: Literal["filebeat"]
    binary: Path = Field(description="the filebeat binary, also used for `filebeat test config`")
    config: Path = Field(description="the operator's filebeat.yml; only the tuned keys are changed")
    inputs: list[InputSelectorSpec] = Field(min_length=1, description="the inputs whose keys are tuned")
    http_port: Port | None = Field(default=None, description="Filebeat's HTTP stats (health); else: the process runs")
    runtime: RuntimeSpec = ProcessRuntimeSpec()


class LogstashComponent(_Component):
    kind: Literal["logstash"]
    settings_dir: Path = Field(description="path.settings: the operator's pipelines.yml is read from here")
    pipeline_id: str = Field(min_length=1, description="the pipelines.yml entry whose pipeline.* keys are tuned")
    output_id: str = Field(min_length=1, description="the `id` of the kafka output whose settings are tuned")
    binary: Path | None = Field(default=None, description="bin/logstash, for --config.test_and_exit")
    api_port: Port = 9600
    runtime: RuntimeSpec = ProcessRuntimeSpec(reload_signal="SIGHUP")


class KafkaBrokerComponent(_Component):
    kind: Literal["kafka"]
    bootstrap: str
    broker_id: int = Field(default=1, ge=0)
    visible_timeout_s: float = Field(default=30.0, gt=0, description="longest wait for describe_configs to agree")


class _ClientComponent(_Component):
    """A Kafka client process: it reads its properties file when it starts."""

    properties: Path = Field(description="the client's own consumer/producer properties; the tuned keys are patched")
    runtime: ClientRuntimeSpec


class KafkaConsumerComponent(_ClientComponent):
    kind: Literal["kafka-consumer"]
    health_url: str = Field(pattern=r"^https?://", description="answers HTTP 200 while the client runs")


class KafkaProducerComponent(_ClientComponent):
    kind: Literal["kafka-producer"]
    # `pipetune replay` serves no HTTP: without a URL, health can only say the process runs.
    health_url: str | None = Field(default=None, pattern=r"^https?://",
                                   description="answers HTTP 200 while the client runs; else: the process runs")


class SparkQueryComponent(_Component):
    """A Spark Structured Streaming job (agents/spark.py): no process of the agent's, reloaded over its own HTTP."""

    kind: Literal["spark-query"]
    properties: Path = Field(description="the job's own properties file; the micro-batch keys are patched")
    url: str = Field(pattern=r"^https?://", description="the job's endpoints: POST /reload, GET /progress")
    reload_timeout_s: float = Field(default=120.0, gt=0, description="longest a reload (stop, restart) may take")


Component = Annotated[Union[FilebeatComponent, LogstashComponent, KafkaBrokerComponent, KafkaConsumerComponent,
                            KafkaProducerComponent, SparkQueryComponent], Field(discriminator="kind")]


class HeartbeatSpec(_Spec):
    """Heartbeat lines the agent writes for the probe (agents/heartbeat.py); agent.yaml's `canary` section."""

    path: Path = Field(description="a file the operator's selected Filebeat input reads (or, opted in, the real log)")
    canary_eps: float = Field(default=10.0, gt=0, le=1000, description="heartbeat lines per second")
    node: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,253}$",
                             description="the node's name in the probe's figures; default: the host name, "
                                         "as Filebeat's host.name")


class AgentConfig(_Spec):
    state_dir: Path = Field(description="versions, the current pointer and the audit log of every component")
    host: str = "127.0.0.1"
    port: Port = 8765
    health_timeout_s: float = Field(default=30.0, gt=0, description="how long a changed component may take to be healthy")
    settle_s: float = Field(default=1.0, ge=0, description="how long it must stay healthy before a change counts")
    supervise_interval_s: float = Field(default=5.0, gt=0, description="how often a stopped component is restarted")
    components: list[Component] = Field(min_length=1)
    canary: HeartbeatSpec | None = Field(default=None, description="write heartbeat lines; none when omitted")

    @model_validator(mode="after")
    def _unique_names(self) -> "AgentConfig":
        names = [c.name for c in self.components]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"components: the name {name!r} is used twice")
        return self


def load_agent_config(path: Path | str) -> AgentConfig:
    """Read and validate agent.yaml."""
    path = Path(path)
    try:
        raw = read_yaml_mapping(path, "agent")
    except OSError as err:
        raise AgentConfigError(f"cannot read agent config {path}: {err.strerror}") from None
    except ValueError as err:
        raise AgentConfigError(str(err)) from None
    try:
        return AgentConfig.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(_describe(e) for e in err.errors())
        raise AgentConfigError(f"{path}: {problems}") from None


_TAGS = {"filebeat", "logstash", "kafka", "kafka-consumer", "kafka-producer", "spark-query", "process", "docker"}


def _describe(error: dict) -> str:
    """`components.0.http_port: ...`: the field's path without the union tags pydantic puts in it."""
    loc = error["loc"]
    # A discriminated union puts the tag it chose after the position: components.0.filebeat.http_port.
    parts = [str(part) for i, part in enumerate(loc)
             if not (i and part in _TAGS and (isinstance(loc[i - 1], int) or loc[i - 1] == "runtime"))]
    return f"{'.'.join(parts)}: {error['msg'].removeprefix('Value error, ')}"
