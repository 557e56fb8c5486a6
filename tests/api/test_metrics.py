"""A standalone API's /metrics: the last window's cost, read from the decision log as the daemon exports it."""

from __future__ import annotations

import math

from fastapi.testclient import TestClient
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from controller.daemon import DaemonMetrics
from controller.state import Action, Cost, Decision, StateStore


def _samples(text: str) -> dict[tuple[str, str], float]:
    return {(s.name, s.labels.get("part", "")): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_last_windows_cost_is_served_as_the_daemon_serves_it(client: TestClient, store: StateStore) -> None:
    cost = Cost(cpu_cores={"filebeat": 0.41, "broker-1": 0.05}, busiest_cpu_share=0.3, produce_requests_per_s=2841.0)
    observed = {"p95_s": 0.009, "throughput_ratio": 1.0, **cost.model_dump()}
    store.append_decision(Decision(window=0, t_s=30.0, config={}, observed=observed, action=Action.HOLD, reason="x"))
    daemon = DaemonMetrics()
    daemon.show_cost(observed)
    for text in (client.get("/metrics").text, generate_latest(daemon.registry).decode()):
        samples = _samples(text)
        assert samples["pipetune_window_cpu_cores", "filebeat"] == 0.41
        assert samples["pipetune_window_cpu_cores", "broker-1"] == 0.05
        assert samples["pipetune_window_busiest_cpu_share", ""] == 0.3
        assert samples["pipetune_window_produce_requests_per_second", ""] == 2841.0
        # the brokers export no bytes: no figure from the decision log, NaN from the daemon's gauge
        assert math.isnan(samples.get(("pipetune_window_kafka_bytes_in_per_second", ""), math.nan))
