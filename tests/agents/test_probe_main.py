"""`python -m agents.probe` on an operator's pipeline (docs/agents.md): no replay of pipetune's, so no
`--manifests`/`--reports`; the operator's own event time (`msec`) is read, and a line of another input shipped to
the same topic counts as untimed, out of the histograms."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from tests.agents.conftest import own_topic
from tests.agents.test_probe_scale_out import _samples, _wait_until
from tests.conftest import free_ports

pytestmark = pytest.mark.slow


def _record(fields: dict) -> bytes:
    """What Filebeat's Kafka output writes for a line its input decoded (ndjson) or kept whole (`message`)."""
    read_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    return orjson.dumps({"@timestamp": read_at, "host": {"name": "web-1"}, **fields})


def test_the_probe_runs_without_replay_directories_and_counts_other_inputs_lines_as_untimed(testbed, tmp_path: Path):
    [port] = free_ports(1)
    with own_topic(testbed.bootstrap) as topic:
        command = [sys.executable, "-m", "agents.probe", "--bootstrap", testbed.bootstrap, "--topic", topic,
                   "--group-id", "operator-probe", "--metrics-port", str(port),
                   "--event-time-field", "msec", "--event-time-format", "epoch_s"]
        with open(tmp_path / "probe.log", "w") as log:
            probe = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, cwd=tmp_path)
        try:
            _wait_until(lambda: probe.poll() is not None or _samples(port).get(("pipetune_probe_partitions", ())) == 1,
                        "the partition assigned")
            assert probe.poll() is None, (tmp_path / "probe.log").read_text()
            producer = Producer({"bootstrap.servers": testbed.bootstrap})
            for i in range(3):  # the access log's input: nginx's own JSON, decoded by an ndjson parser
                producer.produce(topic, _record({"msec": f"{time.time():.3f}", "request_id": f"{i:032x}"}))
            producer.produce(topic, _record({"message": "2026/11/27 14:56:31 [error] 7#7: upstream timed out"}))
            assert producer.flush(30) == 0
            _wait_until(lambda: _samples(port).get(("pipetune_untimed_events_total", ())) == 1.0,
                        "the error log's line counted as untimed")
            samples = _samples(port)
            assert samples[("pipetune_events_total", ())] == 3
            assert samples[("pipetune_e2e_latency_seconds_count", (("node", "web-1"), ("source", "event_time"),
                                                                   ("stage", "e2e")))] == 3
            assert probe.poll() is None, (tmp_path / "probe.log").read_text()
        finally:
            probe.send_signal(signal.SIGTERM)
            assert probe.wait(30) == 0, (tmp_path / "probe.log").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probe.log"]  # no replay directories, no checkpoint
