"""Event bodies: what each replayed request says, rendered ahead of time, stamped at write time.

Everything but the write stamp is rendered before the event is due, so the write path only inserts
it. The stamp is the actual write time, truncated as nginx truncates it. Formats:
- `json` / `multiline-json`: pipetune's own event, an nginx-style JSON object with `request_id`,
  `ts_scheduled`, the request fields, and `ts_nginx` last (epoch seconds, ms: nginx's `$msec`); the
  probe's ledger accounts for every `request_id`.
- `combined`: the Apache/nginx default access-log line, `time_local` at 1 s resolution.
- `nginx-json`: what an operator's nginx JSON `log_format` writes: `msec` first, then `remote_addr`,
  `request`, `status`, `body_bytes_sent`, `request_time`, `http_user_agent`.
The last two carry no pipetune field. Their URIs end in a unique `req=` query parameter (as real
access logs have unique-ish URIs) so a bench can match what arrived to when it was written; the probe
reads only the line's time.
"""

from __future__ import annotations

import functools
import itertools
import json
from json.encoder import encode_basestring_ascii
from typing import Iterator, NamedTuple, Protocol

from models.event_time import format_time_local
from replay.trace import TraceRecord

REQUEST_ID_FORMAT = "{run_id}-{seq:08d}"
FORMATS = ("json", "multiline-json", "combined", "nginx-json")
STAMPED_FORMATS = ("json", "multiline-json")  # lines that carry request_id and ts_nginx
TRUTH_PARAM = "req"  # the query parameter of a stamp-free line that names its request_id


class Request(NamedTuple):
    """A request's fields (method, uri, status, ...) and the same as JSON object members, rendered by the
    source that knows them (`json.dumps(fields)` without its braces: the costliest step of an event)."""

    fields: dict
    json: str

    @classmethod
    def of(cls, fields: dict) -> "Request":
        return cls(fields, json.dumps(fields)[1:-1])


class RequestSource(Protocol):
    """Anything that yields requests one after another."""

    def next_request(self) -> Request: ...


class TraceRequests:
    """The requests of a real log, in order, over and over (each rendered once)."""

    def __init__(self, records: list[TraceRecord]) -> None:
        self._cycle: Iterator[Request] = itertools.cycle([Request.of(
            {"method": r.method, "uri": r.uri, "endpoint": r.uri.split("?", 1)[0], "status": r.status,
             "bytes": r.bytes, "rt": r.rt, "remote_addr": r.remote_addr, "user_agent": r.user_agent})
            for r in records])

    def next_request(self) -> Request:
        return next(self._cycle)


@functools.lru_cache(maxsize=8)
def msec(ts_s: float) -> str:
    """nginx's `$msec`: epoch seconds with the milliseconds truncated, not rounded."""
    ms = int(ts_s * 1000)
    return f"{ms // 1000}.{ms % 1000:03d}"


@functools.lru_cache(maxsize=8)
def _time_local(ts_s: float) -> str:
    return format_time_local(ts_s)


class PreparedEvent(NamedTuple):
    """An event rendered up to its write stamp (a tuple: rendered ahead for every event, so made cheaply)."""

    seq: int
    request_id: str
    head: str  # the text up to the stamp
    tail: str  # what follows the stamp
    fmt: str = "json"  # a log format, or "http" (the HTTP sink's request, stamped in X-Pipetune-Ts)

    def text(self, ts_nginx: float) -> str:
        """The event as written: one line, the multi-line JSON object, or the HTTP request."""
        if self.fmt == "combined":
            return f"{self.head}{_time_local(ts_nginx)}{self.tail}"
        return f"{self.head}{msec(ts_nginx)}{self.tail}"


def traced_uri(uri: str, request_id: str) -> str:
    """The URI with the request's unique query parameter appended."""
    return f"{uri}{'&' if '?' in uri else '?'}{TRUTH_PARAM}={request_id}"


def request_id_of(run_id: str, seq: int) -> str:
    return f"{run_id}-{seq:08d}"  # REQUEST_ID_FORMAT, without str.format's parsing per event


def prepare(seq: int, run_id: str, ts_scheduled: float, request: Request, fmt: str) -> PreparedEvent:
    """Render everything of an event's log line but its write stamp."""
    request_id = request_id_of(run_id, seq)
    fields = request.fields
    if fmt in ("combined", "nginx-json"):
        method, uri = fields.get("method", "GET"), traced_uri(fields.get("uri", "/"), request_id)
        addr, agent = fields.get("remote_addr") or "127.0.0.1", fields.get("user_agent") or "-"
        status, size = fields.get("status", 200), fields.get("bytes", 0)
        if fmt == "combined":
            agent = agent.replace('"', "'")
            return PreparedEvent(seq, request_id, f"{addr} - - [",
                                 f'] "{method} {uri} HTTP/1.1" {status} {size} "-" "{agent}"\n', fmt)
        rest = {"remote_addr": addr, "request": f"{method} {uri} HTTP/1.1", "status": status,
                "body_bytes_sent": size, "request_time": fields.get("rt", 0.0), "http_user_agent": agent}
        return PreparedEvent(seq, request_id, '{"msec": "', '", ' + json.dumps(rest)[1:] + "\n", fmt)
    if fmt == "multiline-json":
        doc = {"request_id": request_id, "ts_scheduled": round(ts_scheduled, 3), **fields}
        return PreparedEvent(seq, request_id, json.dumps(doc, indent=2)[:-2] + ',\n  "ts_nginx": ', "\n}\n", fmt)
    members = f"{request.json}, " if request.json else ""
    # ts_scheduled to the ms, as f"{:.3f}" writes it (round() and repr() cost four times as much)
    head = (f'{{"request_id": {encode_basestring_ascii(request_id)}, "ts_scheduled": {ts_scheduled:.3f}, '
            f'{members}"ts_nginx": ')
    return PreparedEvent(seq, request_id, head, "}\n", fmt)
