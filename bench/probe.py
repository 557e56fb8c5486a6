"""The probe's sustained consume-and-parse rate (goal: >= 50k events/s, the rate up to which it reads
every event).

Fills a fresh topic on the running testbed's broker with records shaped as Filebeat ships them,
then times one `Probe` draining it: Kafka fetch, the envelope's JSON decode, the line's event time
(`--format json`: pipetune's events, `ts_nginx`, plus a ledger entry; `nginx-json`: `msec`;
`combined`: the `time_local` regex), four histogram observations per event.

    python -m bench.probe [--pipeline FILE] [--events 200000] [--format json|nginx-json|combined] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import secrets
import time
from datetime import datetime, timezone
from pathlib import Path

from confluent_kafka import Producer
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from agents.probe.consumer import Probe, ProbeOptions, consumer_settings
from agents.probe.ledger import Ledger
from agents.probe.metrics import ProbeMetrics
from bench.result import BenchResult
from replay.events import FORMATS, Request, prepare
from testbed.pipeline import DEFAULT_PIPELINE, load_pipeline
from testbed.probe import event_time_spec

FIELDS = {"method": "GET", "uri": "/product/123", "endpoint": "product", "status": 200, "bytes": 5120, "rt": 0.012,
          "session_id": "s1", "user_id": 42, "remote_addr": "198.51.100.7",
          "user_agent": "Mozilla/5.0 (X11; Linux x86_64) Chrome/124.0"}


def _record(run_id: str, seq: int, now: float, fmt: str) -> bytes:
    line = prepare(seq, run_id, now, Request.of(FIELDS), fmt).text(now).rstrip("\n")
    stamp = datetime.fromtimestamp(now, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    event = {"@timestamp": stamp, "@metadata": {"beat": "filebeat", "type": "_doc", "version": "7.17.29"},
             "message": line, "host": {"name": "web-1"}, "log": {"offset": seq * 400, "file": {"path": "/var/log/access.log"}},
             "input": {"type": "filestream"}, "agent": {"type": "filebeat", "version": "7.17.29"}}
    return json.dumps(event).encode()


def _admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="pipetune-bench")


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = _admin(bootstrap)
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()


def fill(bootstrap: str, topic: str, events: int, run_id: str, fmt: str = "json") -> None:
    """Create `topic` and produce `events` Filebeat-shaped records of run `run_id` into it."""
    admin = _admin(bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4"})
    now = time.time()
    for seq in range(events):
        while True:
            try:
                producer.produce(topic, _record(run_id, seq, now, fmt))
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)


def drain(bootstrap: str, topic: str, events: int, fmt: str = "json") -> tuple[int, float]:
    """(records, seconds): how long one probe takes to consume and parse all but its first batch."""
    metrics = ProbeMetrics()
    probe = Probe(consumer_settings(bootstrap, f"bench-{secrets.token_hex(3)}") | {"fetch.wait.max.ms": 100}, topic, metrics,
                  Ledger(late_after_s=60), ProbeOptions(event_time_spec(fmt), sample_above_eps=0))
    try:
        consumed = 0
        while consumed == 0:  # group join and first fetch are not the probe's rate
            consumed = probe.poll()
        first, started = consumed, time.perf_counter()
        while consumed < events:
            consumed += probe.poll()
        seconds = time.perf_counter() - started
        if metrics.registry.get_sample_value("pipetune_events_total") != consumed:
            raise RuntimeError("the probe failed to parse some of the bench's records")
        return consumed - first, seconds
    finally:
        probe.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default=str(DEFAULT_PIPELINE))
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--format", choices=FORMATS, default="json")
    parser.add_argument("--json", type=Path, help="also write the result (bench/result.py) here")
    args = parser.parse_args()
    result = BenchResult.start("bench.probe")
    spec = load_pipeline(args.pipeline)
    run_id = "bench" + secrets.token_hex(3)
    topic = f"pipetune-bench-{run_id}"
    try:
        fill(spec.bootstrap, topic, args.events, run_id, args.format)
        parsed, seconds = drain(spec.bootstrap, topic, args.events, args.format)
    finally:
        delete_topic(spec.bootstrap, topic)
    print(f"probe ({args.format} lines): {parsed} events consumed and parsed in {seconds:.2f} s = {parsed / seconds:,.0f} ev/s "
          f"(goal >= 50,000)")
    if args.json:
        result.finish([{"format": args.format, "events": parsed, "seconds": seconds,
                        "events_per_s": parsed / seconds}]).write(args.json)


if __name__ == "__main__":
    main()
