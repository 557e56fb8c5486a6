"""Reading one Kafka record as Filebeat's Kafka output writes it: the line, the hop stamps, the node.

The pipeline gives two stamps for free: Filebeat's `@timestamp` (when it read the line) and the Kafka
record timestamp (when the broker appended it, on a `LogAppendTime` topic). The line's own write time is
read by an `EventTimeSpec` (models/event_time.py); a heartbeat line carries its own (`heartbeat_of`).

On a `CreateTime` topic (Kafka's default) the record timestamp is the producer's: Filebeat sets it to the
event's `@timestamp`, its own read time, so it marks no hop and the append time is not known. The stages on
both sides of a stamp not known are then measured as one, named by both (`PUBLISH_CONSUME`), never split by a
guess: Filebeat's queue and batching waits would otherwise be counted as the consumer's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import orjson

# Stage names, in pipeline order; each is the time between two consecutive stamps.
STAGES = ("filebeat_read", "filebeat_publish", "kafka_consume")
MERGED = "+"  # joins the names of the stages one span covers, where the stamp between them is not known
PUBLISH_CONSUME = MERGED.join(STAGES[1:])  # Filebeat's read → consumed: a CreateTime topic's records
E2E = "e2e"
HEARTBEAT_KEY = "pipetune_canary"  # agents/heartbeat.py writes it; the key deployments already ship
HEARTBEAT_MARK = HEARTBEAT_KEY.encode()  # found in a record's bytes before decoding anything


@dataclass(frozen=True)
class Record:
    """One consumed record: the log line (a decoded JSON object, or the plain text), when Filebeat
    read it and Kafka appended it (epoch seconds, None when not known), and the node it came from."""

    line: dict | str
    ts_filebeat: float | None
    ts_kafka: float | None
    node: str


@dataclass(frozen=True)
class Heartbeat:
    """A heartbeat line an agent wrote: its node, sequence number and write time."""

    node: str
    seq: int
    ts_s: float


def decode_record(value: bytes, kafka_timestamp_ms: int | None, json_lines: bool = True) -> Record:
    """The parts of one record; raises `ValueError` when it is not a JSON event. `kafka_timestamp_ms` is the
    broker's append time (None: the record carries none, as on a CreateTime topic).

    Filebeat ships the raw line in `message`; a pipeline that decodes the JSON on the way puts the
    fields at the top level instead, so both shapes are read. With `json_lines` the message is decoded
    as a JSON object (a message that is not one stays text, and its time is then unreadable).
    """
    try:
        event = orjson.loads(value)
    except orjson.JSONDecodeError:
        raise ValueError("record is not JSON") from None
    if not isinstance(event, dict):
        raise ValueError("record is not a JSON object")
    message = event.get("message")
    line: dict | str = event
    if isinstance(message, str):
        line = message
        if json_lines or message.startswith("{\"" + HEARTBEAT_KEY):
            try:
                decoded = orjson.loads(message)
            except orjson.JSONDecodeError:
                decoded = None
            line = decoded if isinstance(decoded, dict) else message
    stamp = event.get("@timestamp")
    try:
        ts_filebeat = datetime.fromisoformat(stamp).timestamp() if isinstance(stamp, str) else None
    except ValueError:
        ts_filebeat = None
    ts_kafka = kafka_timestamp_ms / 1000.0 if kafka_timestamp_ms and kafka_timestamp_ms > 0 else None
    return Record(line, ts_filebeat, ts_kafka, _node(event))


def _node(event: dict) -> str:
    """Filebeat's `host.name`, else `agent.name`; "" when the pipeline dropped both."""
    for key in ("host", "agent"):
        part = event.get(key)
        if isinstance(part, dict) and isinstance(part.get("name"), str):
            return part["name"]
    return ""


def heartbeat_of(line: dict | str) -> Heartbeat | None:
    """The heartbeat a line carries, or None for any other line; raises `ValueError` for a broken one."""
    if not isinstance(line, dict) or HEARTBEAT_KEY not in line:
        return None
    body = line[HEARTBEAT_KEY]
    try:
        return Heartbeat(str(body["node"]), int(body["seq"]), float(body["ts_ms"]) / 1000.0)
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"heartbeat line without a valid {err}") from None


def latencies(ts_event: float, record: Record, received_at: float, clock_offset_s: float = 0.0
              ) -> dict[str, float]:
    """Seconds end to end and between each two consecutive stamps known: a stage, or the stages a stamp not
    known divides, as one (`filebeat_publish+kafka_consume` without the append time); none when no stamp is
    known between the write and the arrival. The event's write time and Filebeat's read time are on the node's
    clock: `clock_offset_s` (node − here) is taken off both."""
    ts_filebeat = None if record.ts_filebeat is None else record.ts_filebeat - clock_offset_s
    out = {E2E: received_at - ts_event}
    start, spanned = ts_event, []
    for stage, end in zip(STAGES, (ts_filebeat, record.ts_kafka, received_at)):
        spanned.append(stage)
        if end is not None:
            if len(spanned) < len(STAGES):  # all of them: that is e2e
                out[MERGED.join(spanned)] = end - start
            start, spanned = end, []
    return out
