"""Units people type: durations such as `90`, `500ms`, `30s`, `10m`, `1m30s`, `2h`, `1d`."""

from __future__ import annotations

import re

SECONDS_PER_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# One or more NUMBER+UNIT parts, largest first by convention (k6 writes `1m30s`); `m(?!s)` keeps `ms` whole.
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+")
ACCEPTED = "a number of seconds or NUMBER+UNIT parts with units ms, s, m, h, d (e.g. 90, 500ms, 30s, 10m, 1m30s, 2h, 1d)"


def parse_duration_s(text: str | float | int) -> float:
    """Seconds in `text`: a plain number is seconds; otherwise one or more NUMBER+UNIT parts, summed."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    cleaned = str(text).strip().replace(" ", "")
    if _WHOLE.fullmatch(cleaned):
        return sum(float(number) * SECONDS_PER_UNIT[unit] for number, unit in _PART.findall(cleaned))
    try:
        seconds = float(cleaned)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration: expected {ACCEPTED}") from None
    if seconds != seconds:  # NaN is a float but no duration
        raise ValueError(f"{text!r} is not a duration: expected {ACCEPTED}")
    return seconds
