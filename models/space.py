"""The tunable parameters of the pipeline, their hard limits, and what changing each one costs.

Keys are spelled as the components spell them, prefixed with the component
(`filebeat.queue.mem.flush.timeout`). Values use the component's own unit: durations that the
component writes as `1s`, `10ms` are float seconds here (`unit="s"`); parameters whose name carries
a unit keep it (`logstash.pipeline.batch.delay` is milliseconds in logstash.yml, so `unit="ms"`;
`kafka.consumer.fetch.max.wait.ms` and `kafka.producer.linger.ms` are milliseconds). Filebeat's `log`
input names are canonical; the Filebeat adapter maps them onto `filestream` names (scan_frequency ->
prospector.scanner.check_interval, backoff -> backoff.init, max_backoff -> backoff.max) when the
pipeline uses that input.

Defaults are the components' documented 7.17 / 3.x defaults (Filebeat 7.17 reference; Logstash 7.17
logstash.yml reference; Kafka 3.7 broker/consumer configs; the producer's are the replay sink's own
settings, see below); `logstash.pipeline.workers` defaults to the node's cores (2 on the paper's node).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable, Iterator, Mapping, Union

Value = Union[int, float, str, bool]


class ChangeCost(str, Enum):
    """What applying a new value takes on the running component, cheapest first."""

    LIVE = "live"  # changes while the component runs (Kafka dynamic broker config)
    RELOAD = "reload"  # the component reloads its pipeline (Logstash SIGHUP / automatic reload)
    RESTART = "restart"  # the process restarts (Filebeat, a recreated producer)

    @classmethod
    def dearest(cls, costs: Iterable["ChangeCost"]) -> "ChangeCost":
        """What a change made of `costs` takes: the dearest of them (LIVE for no change at all)."""
        order = list(cls)  # declaration order is cost order
        return max(costs, key=order.index, default=cls.LIVE)


class ParamError(ValueError):
    """A value outside a parameter's allowed range or choices; the message names both."""

    def __init__(self, name: str, value: object, allowed: str) -> None:
        super().__init__(f"{name}={value!r} is not allowed: expected {allowed}")
        self.name = name
        self.value = value
        self.allowed = allowed


@dataclass(frozen=True)
class Param:
    """One tunable setting: kind, hard limits, default, unit and cost of change."""

    name: str
    component: str
    kind: str  # "float" | "int" | "bool" | "categorical"
    default: Value
    low: float | None = None
    high: float | None = None
    log_scale: bool = False
    unit: str = ""
    cost: ChangeCost = ChangeCost.RESTART
    choices: tuple[str, ...] = ()
    help: str = ""
    step: float | None = None  # finest resolution the component accepts (1.0: whole units); None: any value

    def snap(self, value: float, low: float, high: float) -> float:
        """`value` on this parameter's resolution (`step`) within [low, high], or clipped into it when no
        step of the resolution falls in between."""
        if self.step is None:
            return min(max(value, low), high)
        first, last = math.ceil(low / self.step) * self.step, math.floor(high / self.step) * self.step
        if first > last:
            return min(max(value, low), high)
        return min(max(round(value / self.step) * self.step, first), last)

    def allowed(self) -> str:
        """Human-readable description of the allowed values."""
        if self.kind == "categorical":
            return "one of " + ", ".join(self.choices)
        if self.kind == "bool":
            return "true or false"
        unit = f" {self.unit}" if self.unit else ""
        kind = "an integer" if self.kind == "int" else "a number"
        return f"{kind} in [{_fmt(self.low)}, {_fmt(self.high)}]{unit}"

    def validate(self, value: object) -> Value:
        """Return `value` coerced to this parameter's type, or raise `ParamError`."""
        if self.kind == "categorical":
            text = str(value)
            if text not in self.choices:
                raise ParamError(self.name, value, self.allowed())
            return text
        if self.kind == "bool":
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "false"):
                return str(value).lower() == "true"
            raise ParamError(self.name, value, self.allowed())
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ParamError(self.name, value, self.allowed()) from None
        if isinstance(value, bool) or not math.isfinite(number):
            raise ParamError(self.name, value, self.allowed())
        if self.kind == "int":
            if number != int(number):
                raise ParamError(self.name, value, self.allowed())
            number = int(number)
        assert self.low is not None and self.high is not None
        if not self.low <= number <= self.high:
            raise ParamError(self.name, value, self.allowed())
        return number


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


@dataclass(frozen=True)
class Config(Mapping[str, Value]):
    """A complete, validated assignment of every parameter of a `SearchSpace`."""

    values: Mapping[str, Value] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Value:
        return self.values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, repr(v)) for k, v in self.values.items())))

    def diff(self, other: Mapping[str, Value]) -> dict[str, tuple[Value, Value]]:
        """Parameters whose value differs: name -> (this value, other value)."""
        return {k: (v, other[k]) for k, v in self.values.items() if other.get(k) != v}


class SearchSpace:
    """An ordered set of `Param`s; builds and validates `Config`s over them."""

    def __init__(self, params: Iterable[Param]) -> None:
        self.params: dict[str, Param] = {p.name: p for p in params}

    def __contains__(self, name: object) -> bool:
        return name in self.params

    def __getitem__(self, name: str) -> Param:
        return self.params[name]

    def __iter__(self) -> Iterator[Param]:
        return iter(self.params.values())

    def defaults(self) -> Config:
        """Every parameter at its component's default."""
        return Config({p.name: p.default for p in self})

    def config(self, changes: Mapping[str, object] | None = None, base: Mapping[str, Value] | None = None) -> Config:
        """`base` (the defaults when omitted) with `changes` applied, every value validated.

        Raises `ParamError` for a value out of range and `KeyError` naming an unknown parameter.
        """
        values = dict(base if base is not None else self.defaults())
        for name, value in (changes or {}).items():
            if name not in self.params:
                raise KeyError(f"unknown parameter {name!r}; known: {', '.join(self.params)}")
            values[name] = self.params[name].validate(value)
        return Config(values)


def _p(name: str, kind: str, default: Value, low: float | None = None, high: float | None = None, *,
       log: bool = False, unit: str = "", cost: ChangeCost = ChangeCost.RESTART,
       choices: tuple[str, ...] = (), help: str = "", step: float | None = None) -> Param:
    return Param(name, name.split(".", 1)[0], kind, default, low, high, log, unit, cost, choices, help, step)


LIVE, RELOAD, RESTART = ChangeCost.LIVE, ChangeCost.RELOAD, ChangeCost.RESTART


def _producer(prefix: str, names: tuple[str, str, str, str], linger_ms: float, cost: ChangeCost,
              linger_step_ms: float | None) -> tuple[Param, ...]:
    """A Kafka producer's linger, batch size, acks and compression, named as its configuration names them;
    acks 1, 16384-byte batches and no compression by default. `linger_step_ms`: 1.0 for the Java client
    (linger.ms is a long), None for librdkafka (a double)."""
    linger, batch, acks, compression = (prefix + name for name in names)
    return (
        _p(linger, "float", linger_ms, 0.0, 10000.0, unit="ms", cost=cost, step=linger_step_ms,
           help="producer wait for more records before a send"),
        _p(batch, "int", 16384, 1, 16777216, log=True, unit="bytes", cost=cost,
           help="producer batch size per partition"),
        _p(acks, "categorical", "1", cost=cost, choices=("0", "1", "all"),
           help="acknowledgements the producer waits for"),
        _p(compression, "categorical", "none", cost=cost, choices=("none", "gzip", "snappy", "lz4", "zstd"),
           help="producer compression"),
    )


PIPELINE_PARAMS: tuple[Param, ...] = (
    # Filebeat 7.17, `log` input. Its live input reload can drop a line (bench/reload_loss.py), so a
    # change restarts Filebeat, which resumes from acknowledged offsets.
    _p("filebeat.scan_frequency", "float", 10.0, 0.001, 60.0, log=True, unit="s",
       help="how often the prospector looks for new files"),
    _p("filebeat.backoff", "float", 1.0, 0.001, 10.0, log=True, unit="s",
       help="first wait after a harvester reaches EOF"),
    _p("filebeat.max_backoff", "float", 10.0, 0.001, 60.0, log=True, unit="s",
       help="longest wait at EOF; backoff doubles up to it"),
    _p("filebeat.backoff_factor", "int", 2, 1, 10, help="growth of the EOF wait"),
    _p("filebeat.close_inactive", "float", 300.0, 1.0, 3600.0, log=True, unit="s",
       help="close a file's harvester after this long without new lines"),
    _p("filebeat.harvester_buffer_size", "int", 16384, 1024, 1048576, log=True, unit="bytes",
       help="bytes each harvester reads at once"),
    _p("filebeat.multiline.timeout", "float", 5.0, 0.001, 60.0, log=True, unit="s",
       help="longest wait for the rest of a multi-line event"),
    # Filebeat memory queue and output.
    _p("filebeat.queue.mem.events", "int", 4096, 32, 1048576, log=True, unit="events",
       help="memory queue capacity; a full queue pushes back on the harvesters"),
    _p("filebeat.queue.mem.flush.min_events", "int", 2048, 0, 1048576, unit="events",
       help="events to gather before a batch goes to the output (0 or 1: no waiting)"),
    _p("filebeat.queue.mem.flush.timeout", "float", 1.0, 0.0, 60.0, unit="s",
       help="longest wait for flush.min_events"),
    _p("filebeat.output.bulk_max_size", "int", 2048, 1, 65536, log=True, unit="events",
       help="largest batch per request"),
    _p("filebeat.output.pipelining", "int", 2, 0, 16, help="batches in flight per worker (0: synchronous)"),
    _p("filebeat.output.worker", "int", 1, 1, 16, help="output workers (connections)"),
    # Logstash 7.17 pipeline and kafka output: a change reloads the pipeline.
    _p("logstash.pipeline.workers", "int", 2, 1, 64, cost=RELOAD, help="filter+output worker threads"),
    _p("logstash.pipeline.batch.size", "int", 125, 1, 10000, log=True, unit="events", cost=RELOAD,
       help="events a worker takes per batch"),
    _p("logstash.pipeline.batch.delay", "float", 50.0, 0.0, 10000.0, unit="ms", cost=RELOAD, step=1.0,
       help="longest wait for a partial batch (logstash.yml takes whole milliseconds)"),
    # Logstash's kafka output is the Java producer.
    *_producer("logstash.output.kafka.", ("linger_ms", "batch_size", "acks", "compression_type"), 0.0, RELOAD, 1.0),
    # Kafka 3.x broker dynamic configs and the consumer.
    _p("kafka.broker.num.io.threads", "int", 8, 1, 64, cost=LIVE, help="broker request-handler threads"),
    _p("kafka.broker.num.network.threads", "int", 3, 1, 32, cost=LIVE, help="broker network threads"),
    _p("kafka.consumer.fetch.min.bytes", "int", 1, 1, 10485760, log=True, unit="bytes", cost=RESTART,
       help="bytes the broker waits for before answering a fetch"),
    _p("kafka.consumer.fetch.max.wait.ms", "float", 500.0, 0.0, 10000.0, unit="ms", cost=RESTART, step=1.0,
       help="longest the broker holds a fetch waiting for fetch.min.bytes (an int)"),
    # A Kafka producer the node runs (librdkafka: the replay engine's Kafka sink). Its settings are fixed once
    # it is created, so a change recreates it. Defaults: what the replay sink sent with under kafka-python
    # (linger 5 ms, which is librdkafka's default too).
    *_producer("kafka.producer.", ("linger.ms", "batch.size", "acks", "compression.type"), 5.0, RESTART, None),
    # Spark Structured Streaming sink (the paper's Kafka -> Spark -> Hive stage); a change restarts the query.
    _p("spark.trigger.interval", "float", 0.0, 0.0, 60.0, unit="s", cost=RESTART, step=0.001,
       help="micro-batch trigger interval (0: start the next batch as soon as the previous one ends)"),
)

PIPELINE_SPACE = SearchSpace(PIPELINE_PARAMS)

# Pairs (a, b) whose values a component refuses when a > b: Filebeat 7.17's memory queue
# (libbeat/publisher/queue/memqueue/config.go Validate: "flush.min_events must be less events").
NOT_ABOVE: tuple[tuple[str, str], ...] = (("filebeat.queue.mem.flush.min_events", "filebeat.queue.mem.events"),)
