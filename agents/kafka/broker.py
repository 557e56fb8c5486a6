"""The Kafka broker adapter: per-broker dynamic configs through the admin API, checked by the broker
itself (validate-only), then altered and polled with describe_configs until the broker reports them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Mapping

from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from agents.adapter import Applied, Health, Runtime, ValidationFailed
from models.space import PIPELINE_PARAMS, ChangeCost, Config, Param, Value

PREFIX = "kafka.broker."
FILE = "broker-dynamic.properties"


def _parse(properties: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in properties.splitlines() if line and not line.startswith("#"))


def cluster_brokers(bootstrap: str) -> list[dict]:
    """The brokers of the cluster `bootstrap` reaches (`broker_id`, `host`, `port`)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="pipetune-agent", request_timeout_ms=10000)
    try:
        return admin.describe_cluster()["brokers"]
    finally:
        admin.close()


class KafkaBrokerAdapter:
    """One broker's dynamic configs (`num.io.threads`, `num.network.threads`); no process to restart."""

    params: tuple[Param, ...] = tuple(p for p in PIPELINE_PARAMS if p.name.startswith(PREFIX))

    def __init__(self, bootstrap: str, broker_id: int, record_dir: Path, *, visible_timeout_s: float = 30.0,
                 name: str = "kafka") -> None:
        self.name = name  # the component's name in agent.yaml: one agent may hold several brokers' configs
        self.bootstrap = bootstrap
        self.broker_id = broker_id
        self.record = record_dir / FILE  # the configs sent, as properties: the version's file
        self.visible_timeout_s = visible_timeout_s

    def _admin(self) -> KafkaAdminClient:
        return KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="pipetune-agent", request_timeout_ms=10000)

    def _resource(self, configs: dict[str, str] | None) -> ConfigResource:
        return ConfigResource(ConfigResourceType.BROKER, str(self.broker_id), configs=configs)

    def read(self) -> dict[str, Value]:
        """Nothing: the broker keeps its configs itself, and agent.yaml's starting values are what it reported
        to `agent init`."""
        return {}

    def patch(self, config: Config, base: Config | None = None) -> dict[Path, str]:
        """The broker keeps these configs itself: the file is only the agent's record of what it sent, so there
        is no operator's file to rebase onto (`base` is not needed)."""
        lines = [f"{p.name.removeprefix(PREFIX)}={config[p.name]}" for p in self.params]
        return {self.record: "# per-broker dynamic configs, set through the admin API\n" + "\n".join(lines) + "\n"}

    def validate(self, files: Mapping[Path, str]) -> None:
        """The broker's own check (AlterConfigs with validate_only): e.g. thread counts may at most double."""
        wanted = _parse(files[self.record])
        admin = self._admin()
        try:
            _raise_errors(admin.alter_configs([self._resource(wanted)], validate_only=True), wanted, self.broker_id)
        finally:
            admin.close()

    def described(self) -> dict[str, str]:
        """The broker's current values of the configs this adapter owns."""
        names = [p.name.removeprefix(PREFIX) for p in self.params]
        admin = self._admin()
        try:
            result = admin.describe_configs([self._resource({n: None for n in names})], config_filter="all")
        finally:
            admin.close()
        entries = _entries(result, str(self.broker_id))
        return {name: str(entries[name]["value"]) for name in names if name in entries}

    def apply(self, config: Config, runtime: Runtime | None, cost: ChangeCost) -> Applied:
        """Alter the dynamic configs, then poll describe_configs until the broker reports every value."""
        wanted = {p.name.removeprefix(PREFIX): str(config[p.name]) for p in self.params}
        started = time.monotonic()
        admin = self._admin()
        try:
            _raise_errors(admin.alter_configs([self._resource(wanted)]), wanted, self.broker_id)
        finally:
            admin.close()
        deadline = started + self.visible_timeout_s
        while True:
            seen = self.described()
            if all(seen.get(k) == v for k, v in wanted.items()):
                return Applied("broker configs altered", time.monotonic() - started)
            if time.monotonic() > deadline:
                raise TimeoutError(f"broker {self.broker_id} still reports {seen} {self.visible_timeout_s:g} s "
                                   f"after altering it to {wanted}")
            time.sleep(0.1)

    def health(self) -> Health:
        admin = None
        try:
            admin = self._admin()
            brokers = admin.describe_cluster()["brokers"]
            ids = [b["broker_id"] for b in brokers]
            return Health(self.broker_id in ids, f"brokers {ids}")
        except Exception as err:  # any client error means the broker cannot be reached
            return Health(False, f"{self.bootstrap}: {err}")
        finally:
            if admin is not None:
                admin.close()


def _raise_errors(result: dict, wanted: dict[str, str], broker_id: int) -> None:
    """kafka-python answers {"broker": {"<id>": "OK" or the error text}} instead of raising."""
    outcome = result.get("broker", {}).get(str(broker_id))
    if outcome != "OK":
        raise ValidationFailed(f"broker {broker_id} rejected {wanted}: {outcome}")


def _entries(result: dict, name: str) -> dict[str, dict]:
    """describe_configs' answer {"broker": {"<id>": {config: data}}} for one broker."""
    return result["broker"][name]
