"""The HTTP sink's own HTTP/1.1: every way a server frames a response is read to its end, so the
connection can carry the next request, and each answer is counted by its status class; a kept-alive
connection the server has closed is retried once on a fresh one, not counted as lost."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from replay import arrivals
from replay.engine import run
from replay.events import Request
from replay.sinks import SinkSpec

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
