"""Where replayed events go: a log file (with logrotate-style rotation), HTTP, a Kafka topic, stdout.

A sink takes a batch of prepared events and their write stamp, and never makes the scheduler wait
for an answer: the HTTP sink fires requests from its own event loop, the Kafka sink hands records to
the producer's background sender. `SinkSpec` describes a sink in plain data, so each replay process
can open its own.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Protocol, Sequence
from urllib.parse import urlsplit

from replay.events import PreparedEvent

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message


class Sink(Protocol):
    """One destination of replayed events."""

    def send(self, batch: Sequence[PreparedEvent], ts_nginx: float) -> None: ...

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

    def close(self) -> SinkStats:
        os.close(self._fd)
        return SinkStats(delivered=self._written, detail={"rotations": self._rotations})


class StdoutSink:
    """Write events to standard output."""

    def __init__(self) -> None:
        self._written = 0

    def send(self, batch: Sequence[PreparedEvent], ts_nginx: float) -> None:
        sys.stdout.write("".join(event.text(ts_nginx) for event in batch))
        sys.stdout.flush()
        self._written += len(batch)

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
        for event in batch:
            key, value = event.request_id.encode(), event.text(ts_nginx).rstrip("\n").encode()
            self._unacknowledged[event.request_id] = time.perf_counter()
            while True:
                try:
                    self._producer.produce(self.topic, value=value, key=key, on_delivery=self._on_delivery)
                    break
                except BufferError:  # the producer's queue is full: wait for the broker, as kafka-python did
                    self._producer.poll(0.05)
        self._producer.poll(0)  # serve delivery callbacks without waiting

    def close(self) -> SinkStats:
        self._producer.flush(30)
        failed = self._failed + sorted(self._unacknowledged)
        return SinkStats(delivered=len(self._ack_latency_s), failed_request_ids=failed,
                         ack_latency_s=self._ack_latency_s)


class HttpSink:
    """Send each event as its HTTP/1.1 request to `base_url`, open-loop, from a background event loop.

    Requests carry `X-Request-ID` (for the server's access log) and the user's agent and address.
    At most `max_in_flight` requests are outstanding; an event that finds them all busy is not sent
    and is reported as failed, rather than delaying the schedule (no coordinated omission).
    Connections are kept alive and reused; the client is asyncio's streams and a few lines of HTTP/1.1
    (with httpx, the sink skipped 81-88 % of the events at 1k requests/s here, for its in-flight limit).
    """

    def __init__(self, base_url: str, max_in_flight: int = 512, timeout_s: float = 10.0) -> None:
        url = urlsplit(base_url)
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._tls = ssl.create_default_context() if url.scheme == "https" else None
        self._authority = url.netloc
        self._prefix = url.path.rstrip("/")
        self.max_in_flight = max_in_flight
        self.timeout_s = timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pipetune-http-sink", daemon=True)
        self._thread.start()
        self._in_flight = 0
        self._lock = threading.Lock()
        self._statuses: Counter[str] = Counter()
        self._failed: list[str] = []
        # Touched only on the loop's thread:
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._tasks: set[asyncio.Task] = set()

    def _encode(self, event: PreparedEvent, ts_nginx: float) -> bytes:
        fields = event.fields
        method = fields.get("method", "GET")
        lines = [f"{method} {self._prefix}{fields.get('uri', '/')} HTTP/1.1", f"Host: {self._authority}",
                 f"X-Request-ID: {event.request_id}", f"X-Pipetune-Ts: {ts_nginx:.3f}",
                 f"User-Agent: {fields.get('user_agent') or 'pipetune-replay'}",
                 f"X-Forwarded-For: {fields.get('remote_addr') or '127.0.0.1'}"]
        if method in ("POST", "PUT", "PATCH"):
            lines.append("Content-Length: 0")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    async def _request(self, event: PreparedEvent, request: bytes) -> None:
        try:
            try:
                reused = bool(self._idle)
                status = await self._exchange(request)
            except (ConnectionError, asyncio.IncompleteReadError):
                if not reused:
                    raise
                # A kept-alive connection the server had closed meanwhile: once more on a fresh one.
                status = await self._exchange(request, fresh=True)
            self._statuses[f"{status // 100}xx"] += 1
        except Exception as exc:  # any transport failure is a failed delivery, reported by type
            self._statuses[type(exc).__name__] += 1
            self._failed.append(event.request_id)
        finally:
            with self._lock:
                self._in_flight -= 1

    async def _exchange(self, request: bytes, fresh: bool = False) -> int:
        """One request and its response on an idle connection (or a new one); returns the status."""
        # asyncio.timeout, not wait_for: no extra task per request.
        if self._idle and not fresh:
            reader, writer = self._idle.pop()
        else:
            async with asyncio.timeout(self.timeout_s):
                reader, writer = await asyncio.open_connection(self._host, self._port, ssl=self._tls)
        try:
            writer.write(request)
            async with asyncio.timeout(self.timeout_s):
                status, reusable = await _read_response(reader, request.startswith(b"HEAD "))
        except BaseException:
            writer.close()
            raise
        if reusable:
            self._idle.append((reader, writer))
        else:
            writer.close()
        return status

    def _start(self, batch: list[tuple[PreparedEvent, bytes]]) -> None:
        for event, request in batch:
            task = self._loop.create_task(self._request(event, request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def send(self, batch: Sequence[PreparedEvent], ts_nginx: float) -> None:
        admitted = []
        for event in batch:
            with self._lock:
                busy = self._in_flight >= self.max_in_flight
                if not busy:
                    self._in_flight += 1
            if busy:
                self._statuses["skipped_in_flight_limit"] += 1
                self._failed.append(event.request_id)
            else:
                admitted.append((event, self._encode(event, ts_nginx)))
        if admitted:
            self._loop.call_soon_threadsafe(self._start, admitted)  # one wake-up of the loop per batch

    async def _drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for _, writer in self._idle:
            writer.close()

    def close(self) -> SinkStats:
        asyncio.run_coroutine_threadsafe(self._drain(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        answered = sum(v for k, v in self._statuses.items() if k.endswith("xx"))
        return SinkStats(delivered=answered, failed_request_ids=list(self._failed), detail=dict(self._statuses))


async def _read_response(reader: asyncio.StreamReader, head_request: bool) -> tuple[int, bool]:
    """Read one HTTP/1.1 response (its body skipped); its status and whether the connection can be reused."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")  # the status line and headers in one read
    except asyncio.IncompleteReadError as exc:
        raise ConnectionError(f"not an HTTP response: {exc.partial[:80]!r}") from None
    status_line, *lines = head[:-4].split(b"\r\n")
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
        raise ConnectionError(f"not an HTTP response: {status_line[:80]!r}")
    status = int(parts[1])
    headers = {}
    for line in lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip().lower()
    reusable = headers.get(b"connection") != b"close" and parts[0] != b"HTTP/1.0"
    if head_request or status in (204, 304) or 100 <= status < 200:
        return status, reusable
    if headers.get(b"transfer-encoding", b"").endswith(b"chunked"):
        while (size := int((await reader.readline()).split(b";")[0], 16)) > 0:
            await reader.readexactly(size + 2)
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):  # trailers
            pass
    elif b"content-length" in headers:
        await reader.readexactly(int(headers[b"content-length"]))
    else:  # the body runs to the end of the connection
        await reader.read()
        reusable = False
    return status, reusable


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
