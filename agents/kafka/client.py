"""Kafka clients this node runs: a consumer (the probe) and a producer (`pipetune replay --kafka`).

Each reads a properties file in librdkafka's names when it starts; the agent patches the tuned keys of
that file in place (every other line stays). librdkafka checks every value when a client is created
from them, so that is the check; and a client's settings are fixed once it is
created, so a change recreates it by restarting the process.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Callable, ClassVar, Mapping

from confluent_kafka import Consumer, KafkaException, Producer

from agents.adapter import Applied, Health, Runtime, ValidationFailed, read_text, restart_if_needed
from agents.kafka import properties_file
from agents.rebase import OnDisk, to_rewrite
from models.space import PIPELINE_SPACE, ChangeCost, Config, Param, Value

FILE = "consumer.properties"  # the name the testbed gives the probe's file
# Only errors: a client made just to check its settings has no brokers, and librdkafka would say so.
_QUIET = {"log_level": "3"}


def create_consumer(properties: Mapping[str, str]) -> None:
    """Create a consumer from `properties` (no brokers: nothing is contacted) and close it."""
    Consumer({**_QUIET, "group.id": "pipetune-agent-check", **properties}).close()


def create_producer(properties: Mapping[str, str]) -> None:
    """Create a producer from `properties`; with no brokers it holds nothing to flush."""
    Producer({**_QUIET, **properties})


def check_properties(create: Callable[[Mapping[str, str]], None], properties: Mapping[str, str]) -> None:
    """Raise `ValidationFailed` naming the property librdkafka refuses when `create` makes a client of them."""
    reason = _refusal(create, properties)
    if reason is None:
        return
    # librdkafka names a property by its canonical name (linger.ms -> queue.buffering.max.ms): name the one
    # the file used, found by trying each alone; a refused combination names them all.
    culprit = next((f"{name}={value}" for name, value in properties.items() if _refusal(create, {name: value})),
                   ", ".join(f"{name}={value}" for name, value in properties.items()))
    raise ValidationFailed(f"librdkafka refused {culprit}: {reason}")


def _refusal(create: Callable[[Mapping[str, str]], None], properties: Mapping[str, str]) -> str | None:
    try:
        create(properties)
    except KafkaException as err:
        return err.args[0].str().strip()
    except ValueError as err:
        return str(err)
    return None


class KafkaClientAdapter:
    """One client process's settings: the keys `names` of its properties file patched, librdkafka's check
    (`create`), a restart to recreate the client, and health from an HTTP URL or, without one, the process.

    A subclass names its parameters (ours -> librdkafka's) and how a client is created.
    """

    names: ClassVar[dict[str, str]]
    fractional: ClassVar[frozenset[str]] = frozenset()  # librdkafka properties that take fractions
    create: ClassVar[Callable[[Mapping[str, str]], None]]
    params: tuple[Param, ...]

    def __init_subclass__(cls) -> None:
        cls.params = tuple(PIPELINE_SPACE[name] for name in cls.names)

    def __init__(self, name: str, properties: Path, health_url: str | None = None,
                 runtime: Runtime | None = None) -> None:
        if health_url is None and runtime is None:
            raise ValueError(f"{name}: health needs a health_url or the runtime to ask whether the process runs")
        self.name = name  # the component's name in agent.yaml (what the client is to this node: "probe")
        self.properties = properties
        self.health_url = health_url
        self.runtime = runtime

    def _on_disk(self, text: str) -> list[OnDisk]:
        last = {entry.key: entry for entry in properties_file.entries(text)}
        found = []
        for param in self.params:
            name = self.names[param.name]
            entry = last.get(name)
            where = f"{self.properties}:{entry.line} {name}" if entry else f"{self.properties} {name}"
            found.append(OnDisk(param.name, where, entry.value if entry else None,
                                _read_as(param, entry.value) if entry else param.default))
        return found

    def read(self) -> dict[str, Value]:
        """What the properties file holds now for each parameter (the parameter's default where it sets none)."""
        return {key.param: key.value for key in self._on_disk(read_text(self.properties)) if key.value is not None}

    def patch(self, config: Config, base: Config | None = None) -> dict[Path, str]:
        """The properties file with `config`'s values rebased onto it as it is now (agents/rebase.py)."""
        text = read_text(self.properties)
        target = {p.name: _read_as(p, self._text(p, config[p.name])) for p in self.params}
        written = None if base is None else {p.name: _read_as(p, self._text(p, base[p.name])) for p in self.params}
        rewrite = to_rewrite(self._on_disk(text), target, written)
        values = {self.names[key.param]: self._text(PIPELINE_SPACE[key.param], config[key.param]) for key in rewrite}
        return {self.properties: properties_file.patch(text, values)}

    def _text(self, param: Param, value: Value) -> str:
        if param.kind == "categorical":
            return str(value)
        if self.names[param.name] in self.fractional:  # to the microsecond, and "5" rather than "5.0"
            return f"{float(value):.3f}".rstrip("0").rstrip(".")
        # Other numbers are whole milliseconds and bytes to librdkafka: it would cut "2.5" to 2 without a word.
        return str(round(float(value)))

    def validate(self, files: Mapping[Path, str]) -> None:
        """librdkafka checks every property when a client is created from them: create one."""
        check_properties(self.create, properties_file.read(files[self.properties]))

    def apply(self, config: Config, runtime: Runtime | None, cost: ChangeCost) -> Applied:
        """A client's settings are fixed once it is created: a change restarts the process."""
        # Only a rollback over an unchanged version costs less than a restart: the running client is right.
        return restart_if_needed(runtime, cost, self.name) or Applied("already in force")

    def health(self) -> Health:
        """The process's health URL answers 200; without one, only that the process runs."""
        if self.health_url is None:
            assert self.runtime is not None
            running = self.runtime.running()
            return Health(running, "the process runs (no health_url: delivery is not checked)" if running
                          else "the process is not running")
        try:
            with urllib.request.urlopen(self.health_url, timeout=1.0) as response:
                return Health(response.status == 200, f"GET {self.health_url}: {response.status}")
        except OSError as err:
            return Health(False, f"GET {self.health_url}: {err}")


def _read_as(param: Param, text: str) -> Value | None:
    """A property's text as the parameter's value; None when it is not one."""
    try:
        return text if param.kind == "categorical" else int(text) if param.kind == "int" else float(text)
    except ValueError:
        return None


class KafkaConsumerAdapter(KafkaClientAdapter):
    """A consumer's `kafka.consumer.*` settings (the probe: its metrics endpoint is its health)."""

    # librdkafka's names (`fetch.max.wait.ms` is the Java client's).
    names = {"kafka.consumer.fetch.min.bytes": "fetch.min.bytes",
             "kafka.consumer.fetch.max.wait.ms": "fetch.wait.max.ms"}
    create = staticmethod(create_consumer)


class KafkaProducerAdapter(KafkaClientAdapter):
    """A producer's `kafka.producer.*` settings (`pipetune replay --kafka ... --producer-properties FILE`)."""

    names = {"kafka.producer.linger.ms": "linger.ms", "kafka.producer.batch.size": "batch.size",
             "kafka.producer.acks": "acks", "kafka.producer.compression.type": "compression.type"}
    fractional = frozenset({"linger.ms"})  # librdkafka's linger is a float (queue.buffering.max.ms)
    create = staticmethod(create_producer)
