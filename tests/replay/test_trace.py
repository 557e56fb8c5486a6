"""Reading real access logs: combined and nginx JSON lines, malformed lines counted and skipped."""

import json

import pytest

from replay.trace import TraceError, parse_lines, read_trace

COMBINED = [
    '203.0.113.7 - - [21/Nov/2026:07:26:21 +0000] "GET /api/products?category=books&page=2 HTTP/1.1" 200 14833 '
    '"https://shop.example/" "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0"',
    '198.51.100.23 - alice [21/Nov/2026:07:26:22 +0000] "POST /api/cart/items HTTP/2.0" 201 351 "-" "okhttp/4.12.0"',
    '192.0.2.1 - - [21/Nov/2026:07:26:22 +0900] "GET /favicon.ico HTTP/1.1" 404 - "-" "curl/8.5.0"',
    '127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326',  # common log format
]
NGINX_JSON = [
    json.dumps({"msec": "1795246312.436", "remote_addr": "203.0.113.9", "request": "GET /api/cart HTTP/1.1",
                "status": "200", "body_bytes_sent": "1904", "request_time": "0.025",
                "http_user_agent": "Mozilla/5.0"}),
    json.dumps({"time_iso8601": "2026-11-21T07:26:23+00:00", "method": "DELETE", "uri": "/api/cart/items/7",
                "status": 200, "bytes": 240, "rt": 0.03}),
    json.dumps({"request_id": "r-1", "ts_nginx": 1795246313.5, "method": "GET", "uri": "/api/search?q=tent",
                "status": 200, "bytes": 9800, "rt": 0.12}),
]


def test_combined_lines_parse_into_requests():
    report = parse_lines(COMBINED)
    assert report.malformed == 0 and len(report.records) == 4
    first, second, third, common = report.records
    assert (first.method, first.uri, first.status, first.bytes) == ("GET", "/api/products?category=books&page=2", 200, 14833)
    assert first.user_agent.startswith("Mozilla/5.0") and first.remote_addr == "203.0.113.7"
    assert second.ts_s - first.ts_s == 1.0
    assert third.bytes == 0 and third.ts_s == second.ts_s - 9 * 3600  # the zone offset is honoured
    assert common.uri == "/apache_pb.gif" and common.user_agent == ""


def test_nginx_json_lines_parse_with_their_own_field_names():
    report = parse_lines(NGINX_JSON)
    assert report.malformed == 0
    a, b, c = report.records
    assert (a.method, a.uri, a.status, a.bytes, a.rt) == ("GET", "/api/cart", 200, 1904, 0.025)
    assert a.ts_s == pytest.approx(1795246312.436)
    assert (b.method, b.uri) == ("DELETE", "/api/cart/items/7")
    assert c.ts_s == 1795246313.5


def test_malformed_lines_are_counted_skipped_and_reported():
    lines = [COMBINED[0], "garbage", "", "{not json", '{"no": "timestamp"}', NGINX_JSON[0], '[1, 2]']
    report = parse_lines(lines)
    assert len(report.records) == 2
    assert report.malformed == 4
    assert report.malformed_examples == [2, 4, 5, 7]
    assert "2 of 6 lines parsed, 4 malformed skipped" in report.summary()


def test_a_trace_with_nothing_parseable_is_an_error(tmp_path):
    bad = tmp_path / "bad.log"
    bad.write_text("hello\nworld\n")
    with pytest.raises(TraceError, match="no line"):
        read_trace(bad)
    with pytest.raises(TraceError, match="cannot read"):
        read_trace(tmp_path / "missing.log")
