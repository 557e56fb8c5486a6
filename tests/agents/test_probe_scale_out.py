"""Two probes in one consumer group on the real broker: each consumes its share of the partitions, and
their counters and histograms add up to what was produced, with no canary called lost or duplicated
(each node's lines on one partition, as Filebeat's `partition.hash` on `host.name` places them)."""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from agents.heartbeat import heartbeat_line
from tests.agents.conftest import own_topic
from tests.conftest import free_ports

pytestmark = pytest.mark.slow
NODES = ("node-a", "node-b")  # node i's lines go to partition i
EVENTS_PER_NODE, CANARY_EVERY = 300, 10  # a canary among every 10 events of a node


def _wait_until(condition, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:.0f} s: {what}")
        time.sleep(0.3)


def _samples(port: int) -> dict[tuple[str, tuple], float]:
    """Every sample a probe exports, by (name, sorted labels); empty while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return {}
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _total(ports: list[int], name: str, **labels: str) -> float:
    """The sum over both probes of `name`'s samples whose labels include `labels` (as a Prometheus sum would)."""
    return sum(value for port in ports for (sample, sample_labels), value in _samples(port).items()
               if sample == name and set(labels.items()) <= set(sample_labels))


@pytest.fixture
def two_partitions(testbed) -> Iterator[str]:
    with own_topic(testbed.bootstrap, partitions=2) as name:
        yield name


@pytest.fixture
def probes(testbed, two_partitions: str, tmp_path: Path) -> Iterator[list[int]]:
    ports = free_ports(2)
    group = f"probe-scale-{secrets.token_hex(4)}"
    started = []
    for i, port in enumerate(ports):
        command = [sys.executable, "-m", "agents.probe", "--bootstrap", testbed.bootstrap, "--topic", two_partitions,
                   "--group-id", group, "--metrics-port", str(port), "--manifests", str(tmp_path / f"m{i}"),
                   "--reports", str(tmp_path / f"r{i}"), "--canary-grace-s", "3"]
        with open(tmp_path / f"probe{i}.log", "w") as log:
            started.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log))
    try:
        yield ports
    finally:
        for process in started:
            process.send_signal(signal.SIGTERM)
        for process in started:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def _filebeat_record(node: str, message: bytes) -> bytes:
    """What Filebeat's Kafka output writes for one line read on `node`."""
    read_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    return orjson.dumps({"@timestamp": read_at, "message": message.decode(), "host": {"name": node}})


def test_two_probes_share_the_partitions_and_their_figures_add_up(testbed, two_partitions, probes):
    _wait_until(lambda: [_samples(port).get(("pipetune_probe_partitions", ())) for port in probes] == [1.0, 1.0],
                "each probe of the group assigned one of the two partitions")
    producer = Producer({"bootstrap.servers": testbed.bootstrap})
    for partition, node in enumerate(NODES):
        for i in range(EVENTS_PER_NODE):
            line = orjson.dumps({"ts_nginx": round(time.time(), 3), "uri": f"/item?req={node}-{i}"})
            producer.produce(two_partitions, _filebeat_record(node, line), partition=partition)
            if i % CANARY_EVERY == 0:
                canary = heartbeat_line(node, i // CANARY_EVERY, time.time()).rstrip()
                producer.produce(two_partitions, _filebeat_record(node, canary), partition=partition)
    assert producer.flush(30) == 0
    produced = EVENTS_PER_NODE * len(NODES)
    _wait_until(lambda: _total(probes, "pipetune_events_total") == produced, "every event counted once by the group")
    canaries = EVENTS_PER_NODE // CANARY_EVERY * len(NODES)
    _wait_until(lambda: _total(probes, "pipetune_canary_received_total") == canaries, "every canary received")
    # Both members did part of the work, and the histograms merge to one count per event.
    assert all(_samples(port).get(("pipetune_events_total", ())) == EVENTS_PER_NODE for port in probes)
    assert _total(probes, "pipetune_e2e_latency_seconds_count", stage="e2e", source="event_time") == produced
    for node in NODES:
        assert _total(probes, "pipetune_e2e_latency_seconds_count", stage="e2e", source="event_time",
                      node=node) == EVENTS_PER_NODE
    # Past the grace, no sequence gap is open anywhere: a node's canaries were all seen by one member.
    grace_over = time.monotonic() + 5
    _wait_until(lambda: time.monotonic() > grace_over, "the canary grace to pass", 30)
    assert _total(probes, "pipetune_canary_lost_total") == 0
    assert _total(probes, "pipetune_canary_duplicate_total") == 0
