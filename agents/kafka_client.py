"""The Kafka consumer adapter: a consumer process this node runs (the probe) reads `consumer.properties`
when it starts; librdkafka checks the values, and a change recreates the client by restarting it."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, KafkaException

from agents.adapter import Applied, Health, Runtime, ValidationFailed, restart_if_needed
from models.space import PIPELINE_SPACE, ChangeCost, Config, Param

FILE = "consumer.properties"
# Our parameter names -> librdkafka's (`fetch.max.wait.ms` is the Java client's name).
PROPERTIES = {"kafka.consumer.fetch.min.bytes": "fetch.min.bytes", "kafka.consumer.fetch.max.wait.ms": "fetch.wait.max.ms"}


def read_properties(path: Path) -> dict[str, str]:
    """`name=value` lines; blank lines and `#` comments skipped."""
    lines = (line.strip() for line in path.read_text().splitlines())
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


class KafkaConsumerAdapter:
    """One consumer process's `kafka.consumer.*` settings; its metrics endpoint says it is well."""

    params: tuple[Param, ...] = tuple(PIPELINE_SPACE[name] for name in PROPERTIES)

    def __init__(self, name: str, config_dir: Path, health_url: str) -> None:
        self.name = name  # the component's name in agent.yaml (what the client is to this node: "probe")
        self.config_dir = config_dir
        self.health_url = health_url

    def render(self, config: Config) -> dict[str, str]:
        # librdkafka's values are whole milliseconds and bytes: it would cut "2.5" to 2 without a word.
        lines = [f"{PROPERTIES[p.name]}={round(config[p.name])}" for p in self.params]
        return {FILE: "# librdkafka consumer settings, read when the client starts\n" + "\n".join(lines) + "\n"}

    def validate(self, staged_dir: Path) -> None:
        """librdkafka checks every property when a consumer is created from it: create one and close it."""
        properties = read_properties(staged_dir / FILE)
        try:
            # No bootstrap servers: the check must not reach out to a broker.
            Consumer({"group.id": "pipetune-agent-check", **properties}).close()
        except (KafkaException, ValueError) as err:
            reason = err.args[0].str() if isinstance(err, KafkaException) else str(err)
            raise ValidationFailed(f"librdkafka refused {properties}: {reason}") from None

    def apply(self, config: Config, runtime: Runtime | None, cost: ChangeCost) -> Applied:
        """A client's settings are fixed once it is created: a change restarts the process."""
        # Only a rollback over an unchanged version costs less than a restart: the running client is right.
        return restart_if_needed(runtime, cost, self.name) or Applied("already in force")

    def health(self) -> Health:
        """The process's metrics endpoint answers."""
        try:
            with urllib.request.urlopen(self.health_url, timeout=1.0) as response:
                return Health(response.status == 200, f"GET {self.health_url}: {response.status}")
        except OSError as err:
            return Health(False, f"GET {self.health_url}: {err}")
