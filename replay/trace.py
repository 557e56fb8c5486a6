"""Read real access logs: nginx/Apache "combined" (or "common") lines and nginx JSON lines.

Malformed lines are counted, skipped and reported; only a log in which no line parses is an error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Iterable

_COMBINED = re.compile(
    r'^(?P<addr>\S+) \S+ \S+ \[(?P<time>[^\]]+)\] "(?P<method>[A-Z]+) (?P<uri>\S+)(?: [^"]*)?" '
    r'(?P<status>\d{3}) (?P<bytes>\d+|-)(?: "[^"]*" "(?P<agent>[^"]*)")?'
)
_CLF_TIME = "%d/%b/%Y:%H:%M:%S %z"
_JSON_TIME_KEYS = ("ts_nginx", "msec", "timestamp", "time_iso8601", "time_local", "@timestamp", "time")


class TraceError(ValueError):
    """A trace that cannot be used at all (unreadable, or no line parses)."""


@dataclass(frozen=True)
class TraceRecord:
    """One request of a real log: when, what, and how it was answered."""

    ts_s: float
    method: str
    uri: str
    status: int
    bytes: int
    rt: float | None = None
    user_agent: str = ""
    remote_addr: str = ""


@dataclass
class TraceReport:
    """The parsed records and an account of what was skipped."""

    records: list[TraceRecord]
    lines: int
    malformed: int
    malformed_examples: list[int] = field(default_factory=list)  # 1-based line numbers

    def summary(self) -> str:
        skipped = f", {self.malformed} malformed skipped" if self.malformed else ""
        where = f" (e.g. lines {', '.join(map(str, self.malformed_examples))})" if self.malformed else ""
        return f"{len(self.records)} of {self.lines} lines parsed{skipped}{where}"


def _parse_time(value: object) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value)
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.strptime(text, _CLF_TIME).timestamp()
    except ValueError:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _parse_json(line: str) -> TraceRecord:
    doc = json.loads(line)
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    ts_key = next(k for k in _JSON_TIME_KEYS if k in doc)
    method, uri = doc.get("method"), doc.get("uri") or doc.get("request_uri")
    if (method is None or uri is None) and "request" in doc:
        method, uri = str(doc["request"]).split(" ")[:2]
    rt = doc.get("rt", doc.get("request_time"))
    return TraceRecord(
        ts_s=_parse_time(doc[ts_key]),
        method=str(method or "GET"),
        uri=str(uri or "/"),
        status=int(doc.get("status", 200)),
        bytes=int(doc.get("bytes", doc.get("body_bytes_sent", 0)) or 0),
        rt=float(rt) if rt not in (None, "", "-") else None,
        user_agent=str(doc.get("user_agent", doc.get("http_user_agent", ""))),
        remote_addr=str(doc.get("remote_addr", "")),
    )


def _parse_combined(line: str) -> TraceRecord:
    m = _COMBINED.match(line)
    if not m:
        raise ValueError("not a combined log line")
    return TraceRecord(
        ts_s=datetime.strptime(m["time"], _CLF_TIME).timestamp(),
        method=m["method"],
        uri=m["uri"],
        status=int(m["status"]),
        bytes=0 if m["bytes"] == "-" else int(m["bytes"]),
        user_agent=m["agent"] or "",
        remote_addr=m["addr"],
    )


def parse_lines(lines: Iterable[str], max_examples: int = 5) -> TraceReport:
    """Parse each non-empty line as JSON (if it starts with `{`) or as a combined log line."""
    report = TraceReport(records=[], lines=0, malformed=0)
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        report.lines += 1
        try:
            record = _parse_json(line) if line.startswith("{") else _parse_combined(line)
        except (ValueError, KeyError, StopIteration, TypeError):
            report.malformed += 1
            if len(report.malformed_examples) < max_examples:
                report.malformed_examples.append(number)
            continue
        report.records.append(record)
    return report


def read_trace(path: str | Path) -> TraceReport:
    """Parse an access log file; raises `TraceError` if it cannot be read or nothing in it parses."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            report = parse_lines(handle)
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror}") from None
    if not report.records:
        raise TraceError(f"no line of {path} is a combined or JSON access-log line ({report.summary()})")
    return report
