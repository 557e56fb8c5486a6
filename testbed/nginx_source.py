"""nginx as a node's log source: Debian's nginx, run as a plain process, writing one JSON line per request into the
node's log, as the testbed's replay writes it (its own write time `ts_nginx`, nginx's `$msec`), plus the `X-Sent`
header its client sent (the client's clock: a test's truth of when the line was written, whatever nginx's clock
says)."""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Iterator
from unittest import mock

from confluent_kafka import Consumer

from testbed import processes
from testbed.faketime import NGINX_ENV, FakeClock
from testbed.install import install_nginx
from testbed.pipeline import NodeLayout, PipelineSpec
from testbed.processes import Service

LOG_FORMAT = '{"ts_nginx":$msec,"sent_s":"$http_x_sent"}'
# The paper pipeline's access log: nginx's own `$request_id` (32 hex digits, one per request) is the ledger's key
# from nginx to the warehouse table (testbed/spark_sink.py).
REQUEST_LOG_FORMAT = ('{"ts_nginx":$msec,"request_id":"$request_id","method":"$request_method","uri":"$uri",'
                      '"status":$status,"bytes":$body_bytes_sent,"rt":$request_time,"sent_s":"$http_x_sent"}')

CONFIG = """worker_processes 1;
{env}
pid {work}/nginx.pid;
error_log {work}/error.log error;
events {{ worker_connections 256; }}
http {{
    log_format pipetune escape=json '{log_format}';
    access_log {log} pipetune;
    client_body_temp_path {work}/tmp; proxy_temp_path {work}/tmp; fastcgi_temp_path {work}/tmp;
    uwsgi_temp_path {work}/tmp; scgi_temp_path {work}/tmp;
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 204; }}
    }}
}}
"""


def nginx_service(node: NodeLayout, port: int, env: dict[str, str] | None = None,
                  log_format: str = LOG_FORMAT) -> Service:
    """nginx logging into `node`'s log, listening on 127.0.0.1:`port`, its files under the node's home; `env` (a
    `testbed.faketime.FakeClock`'s) is handed on to its workers; `log_format` is its JSON access log line
    (`REQUEST_LOG_FORMAT` adds the request's id and fields)."""
    work = node.home / "nginx"
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    config = work / "nginx.conf"
    config.write_text(CONFIG.format(env="".join(f"env {name};\n" for name in NGINX_ENV), work=work,
                                    log=node.log_path, port=port, log_format=log_format))
    argv = (str(install_nginx()), "-p", str(work), "-c", str(config), "-e", str(work / "error.log"),
            "-g", "daemon off;")
    return Service(f"nginx-{node.name}", argv, work, env=env)


def answers(port: int) -> bool:
    """Whether nginx on 127.0.0.1:`port` answers (GET / is 204)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
    try:
        connection.request("GET", "/")
        return connection.getresponse().status == 204
    finally:
        connection.close()


@contextmanager
def clocked_node_testbed(spec: PipelineSpec, node: NodeLayout, clock: FakeClock, port: int) -> Iterator[None]:
    """`spec`'s testbed up, with `node`'s agent (whose clock the daemon measures) and nginx (its log source, on
    127.0.0.1:`port`) on `clock`; every other process on this host's. The probe runs on the first node: `node` should
    be another. Everything is stopped again when the block ends."""
    from testbed import agent, lifecycle  # here: lifecycle starts nginx sources of its own (an import cycle)

    planned = agent.agent_service

    def on_its_clock(spec_: PipelineSpec, node_: NodeLayout, *args: object) -> Service:
        service = planned(spec_, node_, *args)
        return replace(service, env=clock.python_env(service.env or dict(os.environ))) if node_ == node else service

    nginx = nginx_service(node, port, env={**os.environ, **clock.env()})
    try:
        with mock.patch.object(agent, "agent_service", on_its_clock):  # lifecycle builds each agent's through it
            lifecycle.up(spec)
        processes.start(nginx)
        processes.wait_ready(nginx, lambda: answers(port), 20.0)
        yield
    finally:
        processes.stop(nginx)
        lifecycle.down(spec)


class SentLoad:
    """Requests for `uri` to nginx at `rate_eps` from a thread, each with the `X-Sent` header (this host's clock as the
    request leaves), until the `with` block ends; `sent` counts those nginx answered."""

    def __init__(self, port: int, rate_eps: float, uri: str = "/") -> None:
        if not 0 < rate_eps <= 1000:
            raise ValueError(f"rate_eps: {rate_eps} requests/s, allowed (0, 1000]")
        self.port, self.rate_eps, self.uri = port, rate_eps, uri
        self.sent = 0
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"nginx-load-{port}", daemon=True)

    def _run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        start = time.monotonic()
        try:
            while not self._stop.is_set():
                # paced on the monotonic clock: the wall clock is what the fault moves
                due = start + self.sent / self.rate_eps
                if (wait := due - time.monotonic()) > 0:
                    self._stop.wait(wait)
                    continue
                connection.request("GET", self.uri, headers={"X-Sent": f"{time.time():.6f}"})
                connection.getresponse().read()
                self.sent += 1
        except BaseException as err:  # reported when the block ends
            self._error = err
        finally:
            connection.close()

    def __enter__(self) -> "SentLoad":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._error is not None:
            raise RuntimeError(f"requests to nginx on port {self.port} failed: {self._error}") from self._error


@dataclass(frozen=True)
class Arrival:
    """One nginx line as a consumer of its own read it: when it arrived (this host's clock), its client's `X-Sent`
    and nginx's own stamp (the node's clock)."""

    arrived_s: float
    sent_s: float
    ts_nginx_s: float

    @property
    def latency_s(self) -> float:
        """The truth: arrival minus the client's send time, both on this host's clock."""
        return self.arrived_s - self.sent_s

    @property
    def clock_ahead_s(self) -> float:
        """How far nginx's clock read ahead of the client's as it wrote the line (plus the request's way there)."""
        return self.ts_nginx_s - self.sent_s


class TruthReader:
    """A Kafka consumer of its own, in a thread, that notes when each nginx line of `node` (Filebeat's host.name)
    arrives: the independent reading the probe's latency is checked against."""

    def __init__(self, bootstrap: str, topic: str, node: str) -> None:
        self.node = node
        self.arrivals: list[Arrival] = []
        # from the topic's start, keeping the lines sent from now on: none is missed while the group forms
        self.since_s = time.time()
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"truth-{uuid.uuid4().hex[:8]}",
                                   "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                   "fetch.wait.max.ms": 10})
        self._consumer.subscribe([topic])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"truth-{node}", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            # one record at a time: a batch (`consume(n, timeout)`) waits out its timeout for n records, which
            # would add up to that wait to every arrival
            record = self._consumer.poll(0.05)
            arrived_s = time.time()
            if record is None or record.error() is not None:
                continue
            event = json.loads(record.value())
            if event.get("host", {}).get("name") != self.node:
                continue
            try:
                line = json.loads(event["message"])
                arrival = Arrival(arrived_s, float(line["sent_s"]), float(line["ts_nginx"]))
            except (KeyError, TypeError, ValueError):
                continue  # not one of SentLoad's requests
            if arrival.sent_s >= self.since_s:
                self.arrivals.append(arrival)

    def wait_for(self, count: float, timeout_s: float) -> None:
        """Until `count` lines have arrived; `TimeoutError` saying how many did after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while len(self.arrivals) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.arrivals)} of node {self.node}'s nginx lines arrived in "
                                   f"{timeout_s:g} s, waited for {count:g}")
            time.sleep(0.2)

    def between(self, start_s: float, end_s: float) -> list[Arrival]:
        return [a for a in list(self.arrivals) if start_s <= a.arrived_s < end_s]

    def __enter__(self) -> "TruthReader":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()
