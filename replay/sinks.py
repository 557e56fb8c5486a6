"""Where replayed events go: a log file (with logrotate-style rotation), HTTP, a Kafka topic, stdout.

A sink renders ahead what it will write of each event (`prepare`), takes a batch of them and their
write stamp (`send`), and never makes the scheduler wait for an answer: the HTTP sink writes requests on
non-blocking sockets and reads the answers while the scheduler has nothing due (`wait`), the Kafka sink
hands records to the producer's background sender. `SinkSpec` describes a sink in plain data, so each
replay process can open its own.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import ssl
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Protocol, Sequence
from urllib.parse import urlsplit

from replay.events import PreparedEvent, Request, prepare, request_id_of

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message


class Sink(Protocol):
    """One destination of replayed events."""

    def prepare(self, seq: int, run_id: str, ts_scheduled: float, request: Request, fmt: str) -> PreparedEvent:
        """Render, ahead of its time, all the sink will write of an event but its write stamp."""

    def send(self, batch: Sequence[PreparedEvent], ts_nginx: float) -> None: ...

    def wait(self, timeout_s: float) -> None:
        """Pass about `timeout_s` (the scheduler has nothing due), doing the sink's background work."""

    def close(self) -> "SinkStats": ...


@dataclass
class SinkStats:
    """What a sink can say about delivery once it is closed."""

    delivered: int = 0
    failed_request_ids: list[str] = field(default_factory=list)
    detail: dict[str, int] = field(default_factory=dict)  # e.g. HTTP status classes, rotations
    ack_latency_s: list[float] = field(default_factory=list)  # kafka: hand-over to the broker's acknowledgement


class FileSink:
    """Append events to a log file; past `rotate_bytes`, rotate as logrotate does (rename, reopen).

    Rotation renames `access.log` to `access.log.1` (shifting older ones up, keeping at most
    `rotate_keep` of them, or all when it is 0) and opens a fresh `access.log`. Files hold whole lines
    and stay within `rotate_bytes` (unless one line is larger); each write is one `write(2)` of whole
    lines on an O_APPEND descriptor, so a reader following the file (Filebeat) never sees half a line.
    """

    prepare = staticmethod(prepare)  # the event's log line in the run's format

    def __init__(self, path: str | Path, rotate_bytes: int = 0, rotate_keep: int = 0) -> None:
        self.path = Path(path)
        self.rotate_bytes = rotate_bytes
        self.rotate_keep = rotate_keep
        self._fd = self._open()
        self._size = os.fstat(self._fd).st_size
        self._rotations = 0
        self._written = 0

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def send(self, batch: Sequence[PreparedEvent], ts_nginx: float) -> None:
        data = "".join(event.text(ts_nginx) for event in batch).encode()
        if self.rotate_bytes and self._size + len(data) > self.rotate_bytes:
            self._send_rotating([event.text(ts_nginx).encode() for event in batch])
        else:
            self._write(data)
        self._written += len(batch)

    def _send_rotating(self, lines: list[bytes]) -> None:
        """Fill the file up to `rotate_bytes` with whole lines, rotate, go on with the rest."""
        chunk: list[bytes] = []
        room = self.rotate_bytes - self._size
        for line in lines:
            if len(line) > room and (chunk or self._size):
                self._write(b"".join(chunk))
                self._rotate()
                chunk, room = [], self.rotate_bytes
            chunk.append(line)
            room -= len(line)
        self._write(b"".join(chunk))

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        self._size += len(data)

    def _rotate(self) -> None:
        os.close(self._fd)
        highest = self.rotate_keep or self._rotations + 1
        oldest = self.path.with_name(f"{self.path.name}.{highest}")
        if self.rotate_keep and oldest.exists():
            oldest.unlink()
        for k in range(highest - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{k}")
            if older.exists():
                older.rename(self.path.with_name(f"{self.path.name}.{k + 1}"))
        self.path.rename(self.path.with_name(f"{self.path.name}.1"))
        self._fd = self._open()
        self._size = 0
        self._rotations += 1

    def wait(self, timeout_s: float) -> None:
        time.sleep(timeout_s)

    def close(self) -> SinkStats:
        os.close(self._fd)
        return SinkStats(delivered=self._written, detail={"rotations": self._rotations})


class StdoutSink:
    """Write events to standard output."""

    prepare = staticmethod(prepare)  # the event's log line in the run's format

    def __init__(self) -> None:
        self._written = 0

    def send(self, batch: Sequence[PreparedEvent], ts_nginx: float) -> None:
        sys.stdout.write("".join(event.text(ts_nginx) for event in batch))
        sys.stdout.flush()
        self._written += len(batch)

    def wait(self, timeout_s: float) -> None:
        time.sleep(timeout_s)

    def close(self) -> SinkStats:
        return SinkStats(delivered=self._written)


# What the sink sent with under kafka-python; the `kafka.producer.*` parameters' defaults say the same.
PRODUCER_DEFAULTS = {"acks": "1", "linger.ms": "5", "batch.size": "16384", "compression.type": "none"}


class KafkaSink:
    """Produce each event as one record (key: request_id) to a Kafka topic.

    `properties` are librdkafka producer properties over `PRODUCER_DEFAULTS` (the caller has checked
    them: a bad one raises `KafkaException` here). A record counts as delivered once the broker has
    acknowledged it; one it refused, or that is still unacknowledged when `close` gives up, is failed.
    Each acknowledged record's latency, from `produce` to the acknowledgement, is kept: what Kafka's
    own producer perf test reports as its latency.
    """

    prepare = staticmethod(prepare)  # the event's log line in the run's format

    def __init__(self, bootstrap: str, topic: str, properties: Mapping[str, str] | None = None) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self._producer = Producer({"client.id": "pipetune-replay", **PRODUCER_DEFAULTS, **(properties or {}),
                                   "bootstrap.servers": bootstrap})
        self._unacknowledged: dict[str, float] = {}  # request_id -> when it was handed to the producer
        self._failed: list[str] = []
        self._ack_latency_s: list[float] = []

    def _on_delivery(self, error: KafkaError | None, record: Message) -> None:
        # Runs in `poll`/`flush`, on the thread that sends: no lock needed.
        request_id = record.key().decode()
        produced = self._unacknowledged.pop(request_id, None)
        if error is None:
            if produced is not None:
                self._ack_latency_s.append(time.perf_counter() - produced)
        else:
            self._failed.append(request_id)

    def send(self, batch: Sequence[PreparedEvent], ts_nginx: float) -> None:
        produce, topic, on_delivery = self._producer.produce, self.topic, self._on_delivery  # looked up once a batch
        unacknowledged, clock = self._unacknowledged, time.perf_counter
        for event in batch:
            key, value = event.request_id.encode(), event.text(ts_nginx).rstrip("\n").encode()
            unacknowledged[event.request_id] = clock()
            while True:
                try:
                    produce(topic, value=value, key=key, on_delivery=on_delivery)
                    break
                except BufferError:  # the producer's queue is full: wait for the broker, as kafka-python did
                    self._producer.poll(0.05)
        self._producer.poll(0)  # serve delivery callbacks without waiting

    def wait(self, timeout_s: float) -> None:
        self._producer.poll(0)
        time.sleep(timeout_s)  # not poll(timeout): it returns at the first acknowledgement, and counts in ms

    def close(self) -> SinkStats:
        self._producer.flush(30)
        failed = self._failed + sorted(self._unacknowledged)
        return SinkStats(delivered=len(self._ack_latency_s), failed_request_ids=failed,
                         ack_latency_s=self._ack_latency_s)


class _Connection:
    """One kept-alive connection and the request it carries, if any (one at a time: no pipelining)."""

    __slots__ = ("sock", "connected", "watched", "out", "request_id", "request", "sent_at_s", "received", "reused")

    def __init__(self, sock: socket.socket, connected: bool) -> None:
        self.sock = sock
        self.connected = connected
        self.watched = selectors.EVENT_READ if connected else selectors.EVENT_WRITE  # what the selector waits for
        self.out = b""  # bytes of the request not yet taken by the kernel
        self.request_id = ""  # "" while idle
        self.request = b""
        self.sent_at_s = 0.0
        self.received = bytearray()
        self.reused = False  # it carried a request before this one


class HttpSink:
    """Send each event as its HTTP/1.1 request to `base_url`, open-loop, on kept-alive connections.

    Requests carry `X-Request-ID` (for the server's access log), `X-Pipetune-Ts` (the write stamp) and
    the user's agent and address. Each request takes an idle connection or opens one; at most
    `max_in_flight` are outstanding, and an event that finds them all busy is not sent and is reported
    as failed, rather than delaying the schedule (no coordinated omission). A kept-alive connection the
    server had closed meanwhile is retried once on a fresh one.

    Everything runs on the scheduler's thread, on non-blocking sockets: `send` writes the requests
    (after collecting the answers already there) and `wait` reads answers while the scheduler has
    nothing due. An earlier version ran asyncio streams on a thread of their own; the GIL handed back
    and forth between the two made sends up to 5 ms late, and a task per request cost ~150 µs of CPU.
    TLS connections are opened and shaken hands with blocking (bounded by `timeout_s`), then used
    non-blocking like the others.
    """

    # 2048: at 10,000 requests/s nginx on this shared 2-core machine stalls for 100-200 ms at times; 512
    # skipped 4-7 % of the events there (k6's constant-arrival-rate drops what its VUs cannot start).
    def __init__(self, base_url: str, max_in_flight: int = 2048, timeout_s: float = 10.0) -> None:
        url = urlsplit(base_url)
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._tls = ssl.create_default_context() if url.scheme == "https" else None
        self._authority = url.netloc
        self._prefix = url.path.rstrip("/")
        self.max_in_flight = max_in_flight
        self.timeout_s = timeout_s
        self._selector = selectors.DefaultSelector()
        self._idle: list[_Connection] = []
        self._busy: dict[int, _Connection] = {}  # fd -> connection with a request outstanding
        self._statuses: Counter[str] = Counter()
        self._failed: list[str] = []
        self._next_expiry_check_s = 0.0
        self._address: tuple | None = None  # resolved on first use

    def prepare(self, seq: int, run_id: str, ts_scheduled: float, request: Request, fmt: str) -> PreparedEvent:
        """The event's request (whatever the log format), up to the write stamp in `X-Pipetune-Ts`."""
        request_id = request_id_of(run_id, seq)
        fields = request.fields
        method = fields.get("method", "GET")
        body = "Content-Length: 0\r\n" if method in ("POST", "PUT", "PATCH") else ""
        head = (f"{method} {self._prefix}{fields.get('uri', '/')} HTTP/1.1\r\nHost: {self._authority}\r\n"
                f"X-Request-ID: {request_id}\r\nUser-Agent: {fields.get('user_agent') or 'pipetune-replay'}\r\n"
                f"X-Forwarded-For: {fields.get('remote_addr') or '127.0.0.1'}\r\n{body}X-Pipetune-Ts: ")
        return PreparedEvent(seq, request_id, head, "\r\n\r\n", "http")

    def send(self, batch: Sequence[PreparedEvent], ts_nginx: float) -> None:
        self._serve(0.0)  # answers already in: their connections are free again
        for event in batch:
            conn = self._idle.pop() if self._idle else None
            if conn is None and len(self._busy) >= self.max_in_flight:
                self._statuses["skipped_in_flight_limit"] += 1
                self._failed.append(event.request_id)
                continue
            self._start(conn, event.request_id, event.text(ts_nginx).encode())

    def wait(self, timeout_s: float) -> None:
        # epoll counts in whole milliseconds, rounded up: wake a millisecond early and sleep the rest exactly.
        deadline = time.perf_counter() + timeout_s
        self._serve(timeout_s - 0.001 if timeout_s > 0.0015 else 0.0)
        rest = deadline - time.perf_counter()
        if 0 < rest < 0.0015:
            time.sleep(rest)

    def _start(self, conn: _Connection | None, request_id: str, request: bytes, retry: bool = False) -> None:
        """Send one request on `conn` (an idle connection) or on a new one."""
        try:
            if conn is None:
                conn = self._open()
            else:
                conn.reused = not retry
        except OSError as exc:
            self._fail(request_id, exc)
            return
        conn.request_id, conn.request, conn.out = request_id, request, request
        conn.sent_at_s = time.perf_counter()
        conn.received.clear()
        self._busy[conn.sock.fileno()] = conn
        if conn.connected:
            self._flush(conn)

    def _open(self) -> _Connection:
        if self._address is None:
            self._address = socket.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM)[0]
        family, kind, proto, _, address = self._address
        if self._tls is not None:
            plain = socket.create_connection(address[:2], timeout=self.timeout_s)
            sock = self._tls.wrap_socket(plain, server_hostname=self._host)
            sock.setblocking(False)
            connected = True
        else:
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            code = sock.connect_ex(address)
            if code not in (0, errno.EINPROGRESS):
                sock.close()
                raise OSError(code, os.strerror(code))
            connected = code == 0
        conn = _Connection(sock, connected)
        self._selector.register(sock, conn.watched, conn)
        return conn

    def _flush(self, conn: _Connection) -> None:
        """Hand the kernel what it takes of the request; watch for room if some is left."""
        try:
            taken = conn.sock.send(conn.out)
        except (BlockingIOError, ssl.SSLWantWriteError):
            taken = 0
        except OSError as exc:
            self._lost(conn, exc)
            return
        conn.out = conn.out[taken:]
        watched = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out else 0)
        if watched != conn.watched:  # one system call less per request in the usual case: nothing changes
            conn.watched = watched
            self._selector.modify(conn.sock, watched, conn)

    def _serve(self, timeout_s: float) -> None:
        for key, mask in self._selector.select(timeout_s):
            conn: _Connection = key.data
            if conn.sock.fileno() < 0:  # closed by an earlier event of this round
                continue
            if mask & selectors.EVENT_WRITE:
                if not conn.connected:
                    code = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if code:
                        self._lost(conn, OSError(code, os.strerror(code)))
                        continue
                    conn.connected = True
                self._flush(conn)
            if mask & selectors.EVENT_READ and conn.sock.fileno() >= 0:
                self._read(conn)
        now = time.perf_counter()
        if now >= self._next_expiry_check_s:
            self._next_expiry_check_s = now + 0.1
            for conn in [c for c in self._busy.values() if now - c.sent_at_s > self.timeout_s]:
                self._lost(conn, TimeoutError(), retry=False)

    def _read(self, conn: _Connection) -> None:
        eof = False
        try:
            while True:  # to the end of what is there: TLS may hold decrypted bytes select() cannot see
                data = conn.sock.recv(65536)
                if not data:
                    eof = True
                    break
                conn.received += data
                if len(data) < 65536 and self._tls is None:
                    break
        except (BlockingIOError, ssl.SSLWantReadError):
            pass
        except OSError as exc:
            self._lost(conn, exc)
            return
        if not conn.request_id:  # an idle connection the server closed (or spoke on): done with it
            self._close(conn)
            return
        try:
            answer = parse_response(bytes(conn.received), conn.request.startswith(b"HEAD "), eof)
        except ConnectionError as exc:
            self._lost(conn, exc, retry=False)
            return
        if answer is None:
            if eof:
                self._lost(conn, ConnectionError("closed before a whole response"))
            return
        status, reusable = answer
        self._statuses[f"{status // 100}xx"] += 1
        del self._busy[conn.sock.fileno()]
        conn.request_id = ""
        if reusable and not eof:
            self._idle.append(conn)
        else:
            self._close(conn)

    def _lost(self, conn: _Connection, exc: Exception, retry: bool = True) -> None:
        """The connection broke: its request is failed, or sent once more on a fresh connection when the
        server had closed a kept-alive connection before answering anything."""
        request_id, request = conn.request_id, conn.request
        self._busy.pop(conn.sock.fileno(), None)
        again = retry and conn.reused and not conn.received
        self._close(conn)
        if not request_id:
            return
        if again:
            self._start(None, request_id, request, retry=True)
        else:
            self._fail(request_id, exc)

    def _fail(self, request_id: str, exc: Exception) -> None:
        self._statuses[type(exc).__name__] += 1  # any transport failure is a failed delivery, reported by type
        self._failed.append(request_id)

    def _close(self, conn: _Connection) -> None:
        if conn in self._idle:
            self._idle.remove(conn)
        self._selector.unregister(conn.sock)
        conn.sock.close()

    def close(self) -> SinkStats:
        deadline = time.perf_counter() + self.timeout_s + 1.0
        while self._busy and time.perf_counter() < deadline:
            self._serve(0.05)
        for conn in list(self._busy.values()):
            self._lost(conn, TimeoutError(), retry=False)
        for conn in list(self._idle):
            self._close(conn)
        self._selector.close()
        answered = sum(v for k, v in self._statuses.items() if k.endswith("xx"))
        return SinkStats(delivered=answered, failed_request_ids=list(self._failed), detail=dict(self._statuses))


def parse_response(data: bytes, head_request: bool, eof: bool) -> tuple[int, bool] | None:
    """One HTTP/1.1 response at the start of `data`: (status, whether the connection can be reused), or
    None while it is incomplete (`eof`: the server has closed, which ends a body without a length)."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        if eof and data:
            raise ConnectionError(f"not an HTTP response: {data[:80]!r}")
        return None
    status_line, *lines = data[:end].split(b"\r\n")
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise ConnectionError(f"not an HTTP response: {status_line[:80]!r}")
    status = int(parts[1])
    headers = {}
    for line in lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip().lower()
    reusable = headers.get(b"connection") != b"close" and parts[0] != b"HTTP/1.0"
    body = end + 4
    if head_request or status in (204, 304) or 100 <= status < 200:
        return status, reusable
    try:
        if headers.get(b"transfer-encoding", b"").endswith(b"chunked"):
            return (status, reusable) if _chunked_end(data, body) is not None else None
        if b"content-length" in headers:
            return (status, reusable) if len(data) - body >= int(headers[b"content-length"]) else None
    except ValueError:  # a chunk size or length that is no number
        raise ConnectionError(f"malformed HTTP response: {data[:160]!r}") from None
    return (status, False) if eof else None  # the body runs to the end of the connection


def _chunked_end(data: bytes, pos: int) -> int | None:
    """Where a chunked body starting at `pos` ends (after its trailers), or None if it is not all there."""
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(data[pos:eol].split(b";")[0], 16)
        pos = eol + 2
        if size == 0:
            if data.startswith(b"\r\n", pos):
                return pos + 2
            trailers = data.find(b"\r\n\r\n", pos)
            return None if trailers < 0 else trailers + 4
        pos += size + 2
        if pos > len(data):
            return None


@dataclass(frozen=True)
class SinkSpec:
    """A sink in plain data: `kind` is file, http, kafka or stdout."""

    kind: str
    target: str = ""  # path, URL, or HOST:PORT/TOPIC
    rotate_bytes: int = 0
    rotate_keep: int = 0
    producer_properties: tuple[tuple[str, str], ...] = ()  # kafka: librdkafka producer properties

    def open(self, process_index: int = 0, processes: int = 1) -> Sink:
        """Open the sink for one replay process; with several, each file sink writes its own file."""
        if self.kind == "file":
            path = Path(self.target)
            if processes > 1:
                path = path.with_name(f"{path.stem}-p{process_index}{path.suffix}")
            return FileSink(path, self.rotate_bytes, self.rotate_keep)
        if self.kind == "stdout":
            return StdoutSink()
        if self.kind == "http":
            return HttpSink(self.target)
        if self.kind == "kafka":
            bootstrap, topic = parse_kafka_target(self.target)
            return KafkaSink(bootstrap, topic, dict(self.producer_properties))
        raise ValueError(f"unknown sink kind {self.kind!r}; expected file, http, kafka or stdout")


def parse_kafka_target(target: str) -> tuple[str, str]:
    """Split `HOST:PORT/TOPIC`; raises ValueError naming the expected form."""
    bootstrap, _, topic = target.partition("/")
    host, _, port = bootstrap.rpartition(":")
    if not host or not port.isdigit() or not topic:
        raise ValueError(f"expected HOST:PORT/TOPIC, got {target!r}")
    return bootstrap, topic
