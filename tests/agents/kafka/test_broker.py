"""The Kafka broker adapter against the session's real broker: a change is visible through
describe_configs when the agent reports it done, and the broker's own check refuses a bad one."""

from __future__ import annotations

import pytest

from agents.adapter import ConfigStore
from agents.component import ManagedComponent
from agents.kafka.broker import KafkaBrokerAdapter
from models.space import PIPELINE_SPACE

pytestmark = pytest.mark.slow


def test_broker_config_change_is_visible_when_reported_and_a_refused_one_changes_nothing(testbed, tmp_path):
    adapter = KafkaBrokerAdapter(testbed.bootstrap, 1, tmp_path / "record")
    original = adapter.described()
    start = {f"kafka.broker.{k}": PIPELINE_SPACE[f"kafka.broker.{k}"].validate(v) for k, v in original.items()}
    kafka = ManagedComponent(adapter, None, ConfigStore(tmp_path / "state", "kafka"), start, settle_s=0)
    kafka.start()
    io_threads = int(original["num.io.threads"])
    try:
        result = kafka.change(1, {"kafka.broker.num.io.threads": io_threads + 2})
        assert (result.status, result.action) == ("applied", "broker configs altered")
        # apply() returns only once describe_configs agrees, so the value is visible right away.
        assert adapter.described()["num.io.threads"] == str(io_threads + 2)
        assert result.elapsed_s > 0

        # Kafka refuses to more than double a thread pool at once; the agent asks it (validate-only) first.
        refused = kafka.change(2, {"kafka.broker.num.io.threads": (io_threads + 2) * 2 + 1})
        assert refused.status == "rejected" and "double" in refused.message
        assert adapter.described()["num.io.threads"] == str(io_threads + 2)
        assert kafka.state()["version"] == 1 and kafka.state()["health"]["ok"]
    finally:
        kafka.rollback()
        assert adapter.described() == original
