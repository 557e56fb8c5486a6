"""Event bodies: what each replayed request says, rendered ahead of time, stamped at write time.

An event is one nginx-style JSON object: `request_id`, `ts_scheduled`, the request fields, and
`ts_nginx` last. Everything but `ts_nginx` is rendered before the event is due, so the write path
only appends the stamp: `ts_nginx` is the actual write time (epoch seconds, ms resolution), as nginx
writes `$msec`.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Iterator, Protocol

from replay.trace import TraceRecord

REQUEST_ID_FORMAT = "{run_id}-{seq:08d}"
FORMATS = ("json", "multiline-json")


class RequestSource(Protocol):
    """Anything that yields request fields (method, uri, status, ...) one after another."""

    def next_request(self) -> dict: ...


class TraceRequests:
    """The requests of a real log, in order, over and over."""

    def __init__(self, records: list[TraceRecord]) -> None:
        self._cycle: Iterator[TraceRecord] = itertools.cycle(records)

    def next_request(self) -> dict:
        r = next(self._cycle)
        return {"method": r.method, "uri": r.uri, "endpoint": r.uri.split("?", 1)[0], "status": r.status,
                "bytes": r.bytes, "rt": r.rt, "remote_addr": r.remote_addr, "user_agent": r.user_agent}


@dataclass(frozen=True)
class PreparedEvent:
    """An event rendered up to its write stamp."""

    seq: int
    request_id: str
    fields: dict
    head: str  # the JSON text up to the `ts_nginx` member
    tail: str  # what closes the object after the stamp

    def text(self, ts_nginx: float) -> str:
        """The event as written to a log: one line, or the multi-line JSON object."""
        return f'{self.head}"ts_nginx": {ts_nginx:.3f}{self.tail}'


def prepare(seq: int, run_id: str, ts_scheduled: float, fields: dict, fmt: str) -> PreparedEvent:
    """Render everything of an event but its write stamp."""
    request_id = REQUEST_ID_FORMAT.format(run_id=run_id, seq=seq)
    doc = {"request_id": request_id, "ts_scheduled": round(ts_scheduled, 3), **fields}
    if fmt == "multiline-json":
        return PreparedEvent(seq, request_id, doc, json.dumps(doc, indent=2)[:-2] + ",\n  ", "\n}\n")
    return PreparedEvent(seq, request_id, doc, json.dumps(doc)[:-1] + ", ", "}\n")
