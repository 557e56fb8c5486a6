"""The HTTP sink's own HTTP/1.1 on non-blocking sockets: every way a server frames a response is read to
its end (however it arrives in pieces), so the connection can carry the next request, and each answer is
counted by its status class; a kept-alive connection the server has closed is retried once on a fresh
one, not counted as lost; requests go out without waiting for answers, up to the in-flight limit."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from replay import arrivals
from replay.engine import run
from replay.events import Request
from replay.sinks import HttpSink, SinkSpec, parse_response

# path prefix -> (status, headers, body) as the server writes them
_ANSWERS = {
    "/api/length": (200, {"Content-Length": "5"}, b"hello"),
    "/api/chunked": (200, {"Transfer-Encoding": "chunked"}, b"3\r\nabc\r\n4;x=y\r\ndefg\r\n0\r\nTrailer: t\r\n\r\n"),
    "/api/empty": (204, {}, b""),
    "/api/close": (503, {"Content-Length": "2", "Connection": "close"}, b"no"),
    "/api/eof": (404, {"Connection": "close"}, b"to the end of the connection"),
    "/api/dropped": (200, {"Content-Length": "2"}, b"ok"),  # then closed without a word, as idle servers do
}


@pytest.fixture
def framing_server():
    received: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as nginx speaks it

        def _answer(self):
            received.append(self.headers["X-Request-ID"])
            key = next((k for k in _ANSWERS if self.path.startswith(k)), "/api/length")
            status, headers, body = _ANSWERS[key]
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
            if headers.get("Connection") == "close" or key == "/api/dropped":
                self.close_connection = True

        do_GET = do_POST = do_DELETE = do_PUT = _answer

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], received
    server.shutdown()


@pytest.mark.parametrize("path, status_class", [("/api/length", "2xx"), ("/api/chunked", "2xx"),
                                                ("/api/empty", "2xx"), ("/api/close", "5xx"), ("/api/eof", "4xx"),
                                                ("/api/dropped", "2xx")])
def test_every_response_framing_is_read_and_counted(framing_server, monkeypatch, path, status_class):
    port, received = framing_server
    # Every request to the one path under test, whatever the shop user asked for.
    monkeypatch.setattr("replay.shop.ShopUsers.next_request", lambda self: Request.of({"method": "GET", "uri": path}))
    result = run(arrivals.steady(100, 1), SinkSpec("http", f"http://127.0.0.1:{port}"), run_id="f")
    assert result.sink.detail == {status_class: 100} and not result.sink.failed_request_ids
    assert sorted(received) == [f"f-{i:08d}" for i in range(100)]


def test_a_base_path_prefixes_every_request(framing_server, monkeypatch):
    port, received = framing_server
    monkeypatch.setattr("replay.shop.ShopUsers.next_request", lambda self: Request.of({"method": "POST", "uri": "/chunked"}))
    result = run(arrivals.steady(20, 1), SinkSpec("http", f"http://127.0.0.1:{port}/api/"), run_id="b")
    assert result.sink.detail == {"2xx": 20} and len(received) == 20


@pytest.mark.parametrize("response, head_request, expected", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", False, (200, True)),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4;x=y\r\ndefg\r\n0\r\nT: t\r\n\r\n", False,
     (200, True)),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", False, (200, True)),
    (b"HTTP/1.1 204 No Content\r\nServer: nginx\r\n\r\n", False, (204, True)),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", True, (200, True)),
    (b"HTTP/1.1 503 Busy\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno", False, (503, False)),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", False, (200, False)),
])
def test_a_response_is_whole_only_once_all_of_it_has_arrived(response, head_request, expected):
    # Answers arrive in pieces on non-blocking sockets: no prefix may pass for a whole response.
    for cut in range(len(response)):
        assert parse_response(response[:cut], head_request, eof=False) is None, cut
    assert parse_response(response, head_request, eof=False) == expected


def test_a_body_without_a_length_ends_with_the_connection():
    response = b"HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\nto the end"
    assert parse_response(response, False, eof=False) is None
    assert parse_response(response, False, eof=True) == (404, False)
    with pytest.raises(ConnectionError, match="not an HTTP response"):
        parse_response(b"SSH-2.0-OpenSSH\r\n\r\n", False, eof=False)
    with pytest.raises(ConnectionError, match="malformed"):
        parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", False, eof=False)


@pytest.fixture
def held_server():
    """A server that answers nothing until the test releases it; yields (port, received ids, release)."""
    received: list[str] = []
    released = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            received.append(self.headers["X-Request-ID"])
            assert released.wait(120), "the test never released the server"
            self.send_response(204)
            self.end_headers()

        do_POST = do_DELETE = do_GET

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], received, released
    released.set()
    server.shutdown()


def _wait_for(condition, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def test_requests_go_out_without_waiting_for_answers_and_the_in_flight_limit_skips_the_rest(held_server):
    port, received, released = held_server
    sink = HttpSink(f"http://127.0.0.1:{port}", max_in_flight=5)
    events = [sink.prepare(i, "held", 1.8e9, Request.of({"method": "GET", "uri": "/x"}), "json") for i in range(8)]
    for event in events:
        sink.send([event], 1.8e9)
    # Five requests are out on five connections though none is answered; the three beyond the limit were skipped.
    _wait_for(lambda: len(received) == 5)
    released.set()
    stats = sink.close()
    assert sorted(received) == [f"held-{i:08d}" for i in range(5)]
    assert stats.detail == {"2xx": 5, "skipped_in_flight_limit": 3}
    assert stats.failed_request_ids == [f"held-{i:08d}" for i in range(5, 8)]


def test_each_request_carries_its_id_user_and_write_stamp(framing_server):
    port, received = framing_server
    sink = HttpSink(f"http://127.0.0.1:{port}")
    fields = {"method": "POST", "uri": "/api/length", "user_agent": "ua/1", "remote_addr": "198.51.100.9"}
    event = sink.prepare(4, "stamp", 1.8e9, Request.of(fields), "json")
    assert event.text(1_800_000_000.1239).split("\r\n")[:6] == [
        "POST /api/length HTTP/1.1", f"Host: 127.0.0.1:{port}", "X-Request-ID: stamp-00000004", "User-Agent: ua/1",
        "X-Forwarded-For: 198.51.100.9", "Content-Length: 0"]
    assert "X-Pipetune-Ts: 1800000000.123\r\n\r\n" in event.text(1_800_000_000.1239)
    sink.send([event], 1_800_000_000.1239)
    assert sink.close().detail == {"2xx": 1} and received == ["stamp-00000004"]
