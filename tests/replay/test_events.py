"""The replay's log lines: pipetune's stamped JSON and the two formats with no pipetune field."""

import json

import pytest

from models.event_time import COMBINED_TIME_REGEX, EventTimeSpec
from replay.events import TRUTH_PARAM, Request, msec, prepare
from replay.trace import parse_lines

FIELDS = {"method": "GET", "uri": "/search?q=red+shoes", "status": 200, "bytes": 5120, "rt": 0.012,
          "remote_addr": "198.51.100.7", "user_agent": 'Mozilla/5.0 "quoted"', "session_id": "s1"}
WRITTEN = 1_800_000_000.1239


def test_msec_truncates_as_nginx_does():
    assert msec(WRITTEN) == "1800000000.123"
    assert msec(1_800_000_000.0) == "1800000000.000"


def test_stamped_json_carries_request_id_and_ts_nginx():
    line = json.loads(prepare(7, "run", WRITTEN, Request.of(FIELDS), "json").text(WRITTEN))
    assert line["request_id"] == "run-00000007" and line["ts_nginx"] == 1800000000.123


@pytest.mark.parametrize("run_id, fields", [('a "quoted" run', FIELDS), ("run", {})])
def test_a_stamped_json_line_is_valid_json_whatever_the_run_id_and_fields(run_id, fields):
    line = json.loads(prepare(3, run_id, WRITTEN, Request.of(fields), "json").text(WRITTEN))
    assert line == {"request_id": f"{run_id}-00000003", "ts_scheduled": round(WRITTEN, 3), **fields,
                    "ts_nginx": 1800000000.123}
    assert list(line)[-1] == "ts_nginx"


@pytest.mark.parametrize("fmt, spec", [
    ("combined", EventTimeSpec("time_local", regex=COMBINED_TIME_REGEX)),
    ("nginx-json", EventTimeSpec("epoch_s", field="msec")),
])
def test_stamp_free_lines_carry_their_time_and_a_unique_uri_only(fmt, spec):
    text = prepare(7, "run", WRITTEN, Request.of(FIELDS), fmt).text(WRITTEN)
    assert text.endswith("\n") and text.count("\n") == 1
    assert "request_id" not in text and "ts_nginx" not in text and "session_id" not in text
    line = json.loads(text) if fmt == "nginx-json" else text
    when = spec.read(line)
    assert when.ts_s == (1_800_000_000.0 if fmt == "combined" else pytest.approx(1_800_000_000.123))
    record = parse_lines([text]).records[0]  # a real access-log reader reads it back
    assert record.uri == f"/search?q=red+shoes&{TRUTH_PARAM}=run-00000007"
    assert (record.method, record.status, record.bytes) == ("GET", 200, 5120)
