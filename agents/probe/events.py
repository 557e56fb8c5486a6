"""Reading the stamps out of one record as Filebeat's Kafka output writes it."""

from __future__ import annotations

import orjson
from dataclasses import dataclass
from datetime import datetime

# Stage names, in pipeline order; each is the time between two consecutive stamps.
STAGES = ("filebeat_read", "filebeat_publish", "kafka_consume")
E2E = "e2e"


@dataclass(frozen=True)
class Stamps:
    """When one event passed each point of the pipeline, in epoch seconds."""

    request_id: str
    ts_nginx: float  # the replay wrote the line
    ts_filebeat: float | None  # Filebeat read it (the event's @timestamp)
    ts_kafka: float | None  # Kafka appended it (the record timestamp)

    def latencies(self, received_at: float) -> dict[str, float]:
        """Seconds spent end to end and in each stage whose two stamps are known."""
        out = {E2E: received_at - self.ts_nginx}
        points = (self.ts_nginx, self.ts_filebeat, self.ts_kafka, received_at)
        for stage, start, end in zip(STAGES, points, points[1:]):
            if start is not None and end is not None:
                out[stage] = end - start
        return out


def parse_record(value: bytes, kafka_timestamp_ms: int | None) -> Stamps:
    """The stamps of one Kafka record; raises `ValueError` when it is not a replayed event.

    Filebeat ships the raw line in `message`; a pipeline that decodes the JSON on the way puts the
    fields at the top level instead, so both shapes are read.
    """
    event = orjson.loads(value)
    if not isinstance(event, dict):
        raise ValueError("record is not a JSON object")
    line = event if "request_id" in event else orjson.loads(event["message"]) if "message" in event else event
    try:
        request_id = line["request_id"]
        ts_nginx = float(line["ts_nginx"])
    except (KeyError, TypeError) as err:
        raise ValueError(f"record has no {err}") from None
    stamp = event.get("@timestamp")
    ts_filebeat = datetime.fromisoformat(stamp).timestamp() if isinstance(stamp, str) else None
    ts_kafka = kafka_timestamp_ms / 1000.0 if kafka_timestamp_ms and kafka_timestamp_ms > 0 else None
    return Stamps(str(request_id), ts_nginx, ts_filebeat, ts_kafka)
