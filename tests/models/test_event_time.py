"""Reading an event's own write time in each format, its resolution, and what it cannot judge."""

from datetime import datetime, timezone

import pytest

from models.event_time import (COMBINED_TIME_REGEX, EventTimeSpec, below_resolution, format_time_local,
                               parse_value, resolution_floor_s)

T = datetime(2015, 5, 17, 10, 5, 3, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize("value, expected, resolution", [
    ("1431857103.123", T + 0.123, 0.001),  # nginx $msec as a quoted string
    (1431857103.123, T + 0.123, 0.001),  # ... as a JSON number
    ("1431857103", T, 1.0),  # whole seconds
    (1431857103, T, 1.0),
])
def test_epoch_seconds(value, expected, resolution):
    when = parse_value(value, "epoch_s")
    assert when.ts_s == pytest.approx(expected, abs=1e-6) and when.resolution_s == resolution


def test_epoch_milliseconds_are_not_read_as_seconds():
    when = parse_value(1431857103123, "epoch_ms")
    assert when.ts_s == pytest.approx(T + 0.123, abs=1e-6) and when.resolution_s == 0.001
    assert parse_value("1431857103123", "epoch_ms").ts_s == pytest.approx(T + 0.123, abs=1e-6)


@pytest.mark.parametrize("text, expected, resolution", [
    ("2015-05-17T10:05:03Z", T, 1.0),  # nginx $time_iso8601 style, no fraction: 1 s
    ("2015-05-17T10:05:03.123Z", T + 0.123, 0.001),  # Filebeat / an application's @timestamp
    ("2015-05-17T12:05:03.5+02:00", T + 0.5, 0.1),  # another zone
    ("2015-05-17T05:05:03.123456-05:00", T + 0.123456, 1e-6),
    ("2015-05-17 10:05:03,250+00:00", T + 0.25, 0.001),  # a comma before the fraction (log4j)
])
def test_iso8601_with_zones_and_fractions(text, expected, resolution):
    when = parse_value(text, "iso8601")
    assert when.ts_s == pytest.approx(expected, abs=1e-6) and when.resolution_s == pytest.approx(resolution)


def test_iso8601_without_a_zone_is_read_in_the_configured_one():
    spec = EventTimeSpec("iso8601", field="time", timezone="Europe/Paris")
    assert spec.read({"time": "2015-05-17T12:05:03"}).ts_s == T  # CEST is UTC+2 in May
    assert EventTimeSpec("iso8601", field="time").read({"time": "2015-05-17T10:05:03"}).ts_s == T


@pytest.mark.parametrize("text", ["[17/May/2015:10:05:03 +0000]", "17/May/2015:10:05:03 +0000",
                                  "17/May/2015:12:05:03 +0200", "17/May/2015:05:05:03 -0500"])
def test_time_local_in_any_zone_is_one_second_resolution(text):
    when = parse_value(text, "time_local")
    assert when.ts_s == T and when.resolution_s == 1.0


def test_time_local_across_a_day_boundary_in_its_zone():
    """01:30 on the 18th at +0200 is 23:30 on the 17th UTC; a latency across midnight stays small."""
    before = parse_value("17/May/2015:23:59:59 +0000", "time_local").ts_s
    after = parse_value("18/May/2015:01:59:59 +0200", "time_local").ts_s
    assert after == before
    midnight = parse_value("18/May/2015:00:00:00 +0000", "time_local").ts_s
    assert midnight - before == 1.0
    assert parse_value("01/Jan/2016:00:00:00 +0000", "time_local").ts_s - \
        parse_value("31/Dec/2015:23:59:59 +0000", "time_local").ts_s == 1.0


def test_time_local_is_written_as_apache_writes_it():
    assert format_time_local(T + 0.999) == "17/May/2015:10:05:03 +0000"
    assert parse_value(format_time_local(T + 0.999, utc_offset_s=7200), "time_local").ts_s == T


@pytest.mark.parametrize("value, fmt", [("yesterday", "epoch_s"), (True, "epoch_s"), ("17/Foo/2015:10:05:03 +0000",
                                         "time_local"), ("2015-05-17", "time_local"), (1431857103, "iso8601"),
                                        ("not a date", "iso8601"), ({"a": 1}, "epoch_ms")])
def test_malformed_values_name_the_format(value, fmt):
    with pytest.raises(ValueError, match=fmt):
        parse_value(value, fmt)


def test_a_field_or_a_dotted_path_of_a_json_line():
    spec = EventTimeSpec("epoch_s", field="ts_nginx")
    assert spec.read({"ts_nginx": 1431857103.123}).ts_s == pytest.approx(T + 0.123)
    nested = EventTimeSpec("iso8601", field="event.created")
    assert nested.read({"event": {"created": "2015-05-17T10:05:03Z"}}).ts_s == T
    assert EventTimeSpec("iso8601", field="@timestamp").read({"@timestamp": "2015-05-17T10:05:03Z"}).ts_s == T
    with pytest.raises(ValueError, match="no event time field 'ts_nginx'"):
        spec.read({"msec": "1"})
    with pytest.raises(ValueError, match="needs a JSON line"):
        spec.read("plain text")


def test_a_regex_group_of_a_combined_line():
    spec = EventTimeSpec("time_local", regex=COMBINED_TIME_REGEX)
    line = '203.0.113.9 - frank [17/May/2015:10:05:03 +0000] "GET /x?req=a-1 HTTP/1.1" 200 12 "-" "curl"'
    assert spec.read(line).ts_s == T
    first_group = EventTimeSpec("epoch_ms", regex=r"at=(\d+)")
    assert first_group.read("job done at=1431857103123 ok").ts_s == pytest.approx(T + 0.123)
    with pytest.raises(ValueError, match="does not match"):
        spec.read("garbage")


@pytest.mark.parametrize("kwargs, message", [
    ({"format": "rfc2822", "field": "t"}, "expected one of epoch_s, epoch_ms, iso8601, time_local"),
    ({"format": "epoch_s"}, "exactly one of a field or a regex"),
    ({"format": "epoch_s", "field": "t", "regex": "(x)"}, "exactly one"),
    ({"format": "epoch_s", "regex": "no group"}, "needs a group"),
    ({"format": "epoch_s", "regex": "(unclosed"}, "regex"),
    ({"format": "iso8601", "field": "t", "timezone": "Mars/Olympus"}, "Mars/Olympus"),
])
def test_bad_specs_are_refused_naming_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        EventTimeSpec(**kwargs)


def test_a_one_second_stamp_cannot_judge_a_50_ms_p95():
    assert resolution_floor_s(1.0) == 2.0
    reason = below_resolution(0.050, 1.0)
    assert reason is not None and "50.0 ms" in reason and "1000 ms" in reason
    assert below_resolution(2.5, 1.0) is None
    assert below_resolution(0.050, 0.001) is None  # $msec resolves it
