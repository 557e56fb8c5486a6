"""An event's own write time, read from one field or regex group of a log line, and what it can show.

Formats: `epoch_s` (nginx `$msec`: epoch seconds with ms; an integer is whole seconds), `epoch_ms`,
`iso8601` (`time`, `timestamp`, an application's `@timestamp`, nginx `$time_iso8601`), `time_local`
(Apache/nginx `17/May/2015:10:05:03 +0000`, brackets optional). A time with no zone (some ISO 8601
writers) is read in `spec.timezone`.

Each reading carries its resolution: the step of the clock that wrote it (1 s for `time_local` and an
ISO time without fraction, 1 ms for `$msec`). A P95 below twice the resolution cannot be told apart
from the truncation of the stamp, so `below_resolution` says when a latency figure must not be
optimised (`resolution_floor_s`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

Format = Literal["epoch_s", "epoch_ms", "iso8601", "time_local"]
FORMATS: tuple[str, ...] = ("epoch_s", "epoch_ms", "iso8601", "time_local")

_MONTHS = {m: k for k, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                       "Dec"), start=1)}
_TIME_LOCAL = re.compile(r"\[?(\d{1,2})/([A-Z][a-z]{2})/(\d{4}):(\d{2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2})\]?$")
_FRACTION = re.compile(r"[T ]\d{2}:\d{2}:\d{2}[.,](\d+)")
# The regex group a plain line's time is read from: Apache/nginx combined and common log formats.
COMBINED_TIME_REGEX = r"^\S+ \S+ \S+ \[(?P<time>[^\]]+)\]"


@dataclass(frozen=True)
class EventTime:
    """When an event was written (epoch seconds, on the writer's clock) and the step of that clock."""

    ts_s: float
    resolution_s: float


@dataclass(frozen=True)
class EventTimeSpec:
    """Where a line's write time is and how it is written: a JSON field (a dotted path) or a regex
    group (named `time`, else the first) of a plain line."""

    format: Format
    field: str | None = None
    regex: str | None = None
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"event time format {self.format!r}: expected one of {', '.join(FORMATS)}")
        if (self.field is None) == (self.regex is None):
            raise ValueError("event time: give exactly one of a field or a regex")
        if self.regex is not None:
            try:
                compiled = re.compile(self.regex)
            except re.error as err:
                raise ValueError(f"event time regex {self.regex!r}: {err}") from None
            if compiled.groups < 1:
                raise ValueError(f"event time regex {self.regex!r}: needs a group around the time")
            object.__setattr__(self, "_compiled", compiled)
        try:
            object.__setattr__(self, "_zone", timezone.utc if self.timezone == "UTC" else ZoneInfo(self.timezone))
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"event time timezone {self.timezone!r}: not a known IANA zone") from None

    def read(self, line: dict | str) -> EventTime:
        """The write time of one line: a decoded JSON object (for a field) or its text (for a regex).
        Raises `ValueError` saying what is missing or malformed."""
        return parse_value(self._raw(line), self.format, self._zone)  # type: ignore[attr-defined]

    def _raw(self, line: dict | str) -> object:
        if self.regex is not None:
            if not isinstance(line, str):
                raise ValueError("event time regex needs a plain line")
            match = self._compiled.search(line)  # type: ignore[attr-defined]
            if match is None:
                raise ValueError(f"line does not match the event time regex {self.regex!r}")
            return match.group("time") if "time" in match.re.groupindex else match.group(1)
        if not isinstance(line, dict):
            raise ValueError(f"event time field {self.field!r} needs a JSON line")
        value: object = line
        for part in (self.field.split(".") if self.field not in line else [self.field]):  # type: ignore[union-attr]
            if not isinstance(value, dict) or part not in value:
                raise ValueError(f"line has no event time field {self.field!r}")
            value = value[part]
        return value


def nominal_resolution_s(fmt: str) -> float:
    """The resolution a format has at best (`iso8601` and `epoch_s` may be coarser per value)."""
    return 1.0 if fmt == "time_local" else 0.001


def parse_value(value: object, fmt: str, zone: timezone | ZoneInfo = timezone.utc) -> EventTime:
    """Read one raw time value written in `fmt`; raises `ValueError` naming the format and the value."""
    try:
        if fmt == "epoch_s":
            return _epoch(value, 1.0)
        if fmt == "epoch_ms":
            return _epoch(value, 0.001)
        if not isinstance(value, str):
            raise ValueError("not a string")
        if fmt == "iso8601":
            return _iso8601(value, zone)
        if fmt == "time_local":
            return _time_local(value)
    except (ValueError, TypeError, OverflowError) as err:
        raise ValueError(f"{value!r} is not an {fmt} time ({err})") from None
    raise ValueError(f"event time format {fmt!r}: expected one of {', '.join(FORMATS)}")


def _epoch(value: object, unit_s: float) -> EventTime:
    if isinstance(value, bool):
        raise ValueError("a boolean")
    if isinstance(value, (int, float)):
        # A JSON number has lost its trailing zeros: an integer is whole units, a fraction is nginx's ms.
        return EventTime(float(value) * unit_s, unit_s if isinstance(value, int) else min(unit_s, 0.001))
    if not isinstance(value, str):
        raise ValueError(f"a {type(value).__name__}")
    text = value.strip()
    seconds = float(text) * unit_s
    _, dot, fraction = text.partition(".")
    resolution = unit_s * 10.0 ** -len(fraction) if dot else unit_s
    return EventTime(seconds, max(resolution, 1e-6))


def _iso8601(text: str, zone: timezone | ZoneInfo) -> EventTime:
    fraction = _FRACTION.search(text)
    stamp = datetime.fromisoformat(text.strip().replace(",", "."))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=zone)
    resolution = 10.0 ** -min(len(fraction.group(1)), 6) if fraction else 1.0
    return EventTime(stamp.timestamp(), resolution)


@functools.lru_cache(maxsize=256)  # a busy log repeats each second's stamp thousands of times
def _time_local(text: str) -> EventTime:
    m = _TIME_LOCAL.match(text.strip())
    if m is None:
        raise ValueError("expected DD/Mon/YYYY:HH:MM:SS +ZZZZ")
    day, month, year, hour, minute, second, sign, tz_h, tz_m = m.groups()
    if month not in _MONTHS:
        raise ValueError(f"unknown month {month!r}")
    offset = (1 if sign == "+" else -1) * timedelta(hours=int(tz_h), minutes=int(tz_m))
    stamp = datetime(int(year), _MONTHS[month], int(day), int(hour), int(minute), int(second),
                     tzinfo=timezone(offset))
    return EventTime(stamp.timestamp(), 1.0)


def format_time_local(ts_s: float, utc_offset_s: int = 0) -> str:
    """`17/May/2015:10:05:03 +0000`: how Apache and nginx write `time_local` (truncated to the second)."""
    zone = timezone(timedelta(seconds=utc_offset_s))
    stamp = datetime.fromtimestamp(int(ts_s // 1), tz=zone)
    sign, minutes = ("+" if utc_offset_s >= 0 else "-"), abs(utc_offset_s) // 60
    month = tuple(_MONTHS)[stamp.month - 1]
    return f"{stamp.day:02d}/{month}/{stamp.year}:{stamp:%H:%M:%S} {sign}{minutes // 60:02d}{minutes % 60:02d}"


def resolution_floor_s(resolution_s: float) -> float:
    """The lowest latency a source of this resolution can judge: twice its step."""
    return 2.0 * resolution_s


def below_resolution(p95_s: float, resolution_s: float) -> str | None:
    """Why a P95 must not be optimised further, or None when the event time resolves it."""
    floor = resolution_floor_s(resolution_s)
    if p95_s >= floor:
        return None
    return (f"P95 {p95_s * 1000:.1f} ms is below twice the event time's resolution ({resolution_s * 1000:g} ms): "
            f"the stamp cannot show a change there; holding")
