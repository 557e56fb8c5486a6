"""Where replayed events go: a log file (with logrotate-style rotation), HTTP, a Kafka topic, stdout.

A sink takes a batch of prepared events and their write stamp, and never makes the scheduler wait
for an answer: the HTTP sink fires requests from its own event loop, the Kafka sink hands records to
the producer's background sender. `SinkSpec` describes a sink in plain data, so each replay process
can open its own.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Protocol, Sequence

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
    """

    def __init__(self, bootstrap: str, topic: str, properties: Mapping[str, str] | None = None) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self._producer = Producer({"client.id": "pipetune-replay", **PRODUCER_DEFAULTS, **(properties or {}),
                                   "bootstrap.servers": bootstrap})
        self._unacknowledged: set[str] = set()
        self._failed: list[str] = []
        self._delivered = 0

    def _on_delivery(self, error: KafkaError | None, record: Message) -> None:
        # Runs in `poll`/`flush`, on the thread that sends: no lock needed.
        request_id = record.key().decode()
        self._unacknowledged.discard(request_id)
        if error is None:
            self._delivered += 1
        else:
            self._failed.append(request_id)

    def send(self, batch: Sequence[PreparedEvent], ts_nginx: float) -> None:
        for event in batch:
            key, value = event.request_id.encode(), event.text(ts_nginx).rstrip("\n").encode()
            self._unacknowledged.add(event.request_id)
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
        return SinkStats(delivered=self._delivered, failed_request_ids=failed)


class HttpSink:
    """Send each event as its HTTP request to `base_url`, open-loop, from a background event loop.

    Requests carry `X-Request-ID` (for the server's access log) and the user's agent and address.
    At most `max_in_flight` requests are outstanding; an event that finds them all busy is not sent
    and is reported as failed, rather than delaying the schedule (no coordinated omission).
    """

    def __init__(self, base_url: str, max_in_flight: int = 512, timeout_s: float = 10.0) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.max_in_flight = max_in_flight
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pipetune-http-sink", daemon=True)
        self._thread.start()
        limits = httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight)
        self._client = asyncio.run_coroutine_threadsafe(self._make_client(limits, timeout_s), self._loop).result()
        self._in_flight = 0
        self._lock = threading.Lock()
        self._statuses: Counter[str] = Counter()
        self._failed: list[str] = []
        self._tasks: set[asyncio.Future] = set()

    @staticmethod
    async def _make_client(limits, timeout_s: float):
        import httpx

        return httpx.AsyncClient(limits=limits, timeout=timeout_s)

    async def _request(self, event: PreparedEvent, ts_nginx: float) -> None:
        fields = event.fields
        headers = {"X-Request-ID": event.request_id, "X-Pipetune-Ts": f"{ts_nginx:.3f}",
                   "User-Agent": fields.get("user_agent") or "pipetune-replay",
                   "X-Forwarded-For": fields.get("remote_addr") or "127.0.0.1"}
        try:
            response = await self._client.request(fields.get("method", "GET"), self.base_url + fields.get("uri", "/"),
                                                  headers=headers)
            self._statuses[f"{response.status_code // 100}xx"] += 1
        except Exception as exc:  # any transport failure is a failed delivery, reported by type
            self._statuses[type(exc).__name__] += 1
            self._failed.append(event.request_id)
        finally:
            with self._lock:
                self._in_flight -= 1

    def send(self, batch: Sequence[PreparedEvent], ts_nginx: float) -> None:
        for event in batch:
            with self._lock:
                busy = self._in_flight >= self.max_in_flight
                if not busy:
                    self._in_flight += 1
            if busy:
                self._statuses["skipped_in_flight_limit"] += 1
                self._failed.append(event.request_id)
                continue
            future = asyncio.run_coroutine_threadsafe(self._request(event, ts_nginx), self._loop)
            self._tasks.add(future)
            future.add_done_callback(self._tasks.discard)

    def close(self) -> SinkStats:
        for future in list(self._tasks):
            future.result()
        asyncio.run_coroutine_threadsafe(self._client.aclose(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        answered = sum(v for k, v in self._statuses.items() if k.endswith("xx"))
        return SinkStats(delivered=answered, failed_request_ids=list(self._failed), detail=dict(self._statuses))


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
