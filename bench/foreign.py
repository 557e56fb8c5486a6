"""pipetune on a pipeline it did not build, onboarded as the docs say, against an independent truth.

    python -m bench.foreign [--runs 3] [--quick] [--cpu-budget C] [--out DIR]
                                         # writes result.json (bench/result.py), foreign.png

An operator's log pipeline, from the operator's own files (bench/foreign/: nginx.conf, filebeat.yml, load.js,
prometheus.yml, deployment.yaml; docs/foreign.md walks through them), all on loopback:

    k6 (load.js, 800 req/s) -> nginx (JSON log_format: time, msec, request_id ...; 200 rotated files beside it)
      -> Filebeat (two filestream inputs, processors, output.kafka gzip round-robin)
      -> Kafka (the testbed's broker; topic web-access, 3 partitions, CreateTime) -> the `indexer` group

1. Onboarding, per run, from the operator's files as written: `pipetune agent init`, `pipetune agent run`
   (which starts Filebeat), the probe reading `msec`, Prometheus scraping both every second, then
   `pipetune autotune --pipeline deployment.yaml --load none --window W --windows N` as a subprocess.
2. During the run the operator's world goes on: k6 stops for two windows and starts again (a lull), and the
   operator edits filebeat.yml by hand (a processor's field, a comment) and restarts Filebeat to load it.
3. The truth: a consumer of the bench's own (group `bench-truth`, not the probe) reads every record and notes
   when it arrived; arrival - msec (taken mid-millisecond) is each request's latency, and a request nginx
   logged that the truth never read is lost.
4. After the runs, on fresh windows side by side (interleaved, then in reverse): the defaults (the operator's
   file as written), a small hand sweep of the same knobs, and each run's final config, each put in force by
   the agent, its P95 from the truth and Filebeat's CPU from /proc.

Goals, reported as met or MISSED with their figures, never tuned towards: in every run the final P95 >= 100x
below the defaults' and within 2x of the hand sweep's best at the same Filebeat CPU; pipetune's P95 within 5 %
of the truth's in every window compared; 0 requests lost; the hand edit kept byte for byte.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import multiprocessing as mp
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
from rich.console import Console

from agents.client import AgentClient
from agents.probe.metrics import LATENCY_BUCKETS_S
from agents.process_stats import cpu_seconds, read_pid
from bench.peers import _table, free_port, kafka_broker, pipetune_argv
from bench.result import RESULT_FILE, BenchResult
from controller.agent_changes import owned_params
from controller.state import StateStore
from models.latency_bounds import lull_wait_s
from models.space import Value
from testbed import processes
from testbed.install import install_all, install_peers
from testbed.processes import Service

TEMPLATES = Path(__file__).resolve().parent / "foreign"
TOPIC, NODE, INPUT_ID = "web-access", "web-1", "nginx-access"
ROTATED_FILES = 200  # logrotate's days of history beside the live access log
STAMP_STEP_S = 0.001  # $msec's step: a line stamped msec was written within [msec, msec + 1 ms); taken mid-step
GOAL_BELOW_DEFAULTS = 100.0
GOAL_OF_SWEEP_BEST = 2.0
GOAL_AGREEMENT = 0.05
CPU_TOLERANCE = 0.10  # "the same CPU budget": a sweep config's Filebeat CPU at most 10 % above the final's
# The operator's hand edits during a run: (a line as filebeat.yml has it, what the operator makes of it).
HAND_EDITS = (("        environment: staging\n", "        environment: production   # OPS-4711: the shop went live\n"),
              ("output.kafka:\n", "# OPS-4711: gzip keeps the indexer's disk in budget; do not turn it off\n"
                                  "output.kafka:\n"))
# Keys of filebeat.yml the agent may write (their last dotted segment): a line of the file that changes during a
# run and is none of these is the agent's change to a byte it does not own.
TUNED_KEYS = frozenset({"check_interval", "init", "max", "inactive", "buffer_size", "events", "min_events", "timeout",
                        "bulk_max_size", "worker", "pipelining", "scan_frequency", "backoff", "max_backoff",
                        "backoff_factor", "close_inactive", "harvester_buffer_size"})
# The hand sweep: what an operator reading Filebeat's reference tries on these knobs (seconds, as pipetune
# names them), on top of the file as written; backoff.init <= backoff.max <= check_interval holds in each.
SWEEP: dict[str, dict[str, Value]] = {
    "flush 10ms": {"filebeat.queue.mem.flush.timeout": 0.01},
    "backoff 10ms": {"filebeat.backoff": 0.01, "filebeat.max_backoff": 1.0},
    "flush+backoff 10ms": {"filebeat.queue.mem.flush.timeout": 0.01, "filebeat.backoff": 0.01,
                           "filebeat.max_backoff": 1.0},
    "flush+backoff 1ms": {"filebeat.queue.mem.flush.timeout": 0.001, "filebeat.backoff": 0.001,
                          "filebeat.max_backoff": 1.0},
}
QUICK_SWEEP = ("flush+backoff 10ms",)


# ---- the operator's files -------------------------------------------------------------------------------

def fill(template: str, values: Mapping[str, object]) -> str:
    """`template` with each `__NAME__` replaced by values[NAME]; a placeholder left unfilled is an error."""
    text = re.sub(r"__([A-Z_]+)__", lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0),
                  template)
    left = sorted(set(re.findall(r"__[A-Z_]+__", text)))
    if left:
        raise ValueError(f"placeholders not filled: {', '.join(left)}")
    return text


def write_from_template(name: str, path: Path, values: Mapping[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(fill((TEMPLATES / name).read_text(), values))
    return path


def access_line(msec: float, request_id: str, path: str = "/", status: int = 200) -> str:
    """One line as nginx.conf's log_format shop_json writes it."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(msec))
    return json.dumps({"time": stamp, "msec": round(msec, 3), "request_id": request_id, "remote_addr": "127.0.0.1",
                       "method": "GET", "path": path, "status": status, "bytes": 11, "request_time": 0.0,
                       "user_agent": "k6/1.1.0"}, separators=(",", ":")) + "\n"


def write_rotated(log_dir: Path, count: int, now_s: float) -> None:
    """access.log.1 ... access.log.N, day i's file i days old (mtime and lines), a few lines each."""
    for day in range(1, count + 1):
        path = log_dir / f"access.log.{day}"
        then = now_s - day * 86400.0
        path.write_text("".join(access_line(then + k, secrets.token_hex(16), "/product/7") for k in range(5)))
        os.utime(path, (then + 5, then + 5))


def apply_hand_edits(text: str) -> str:
    """filebeat.yml as the operator leaves it after the edits (each line found exactly once)."""
    for old, new in HAND_EDITS:
        if text.count(old) != 1:
            raise ValueError(f"the hand edit expects {old.strip()!r} once in filebeat.yml")
        text = text.replace(old, new)
    return text


@dataclass(frozen=True)
class EditCheck:
    """Whether the operator's edit survived: its lines as written, and no line but a tuned key's changed."""

    missing: tuple[str, ...]  # edited lines no longer in the file, as the operator wrote them
    changed: tuple[str, ...]  # lines of the file that changed since the edit and are not a tuned key

    @property
    def kept(self) -> bool:
        return not self.missing and not self.changed


def _tuned_line(line: str) -> bool:
    match = re.match(r"\s*(?:-\s+)?([A-Za-z_][\w.]*)\s*:", line)
    return match is not None and match.group(1).rsplit(".", 1)[-1] in TUNED_KEYS


def check_edit(edited: str, final: str) -> EditCheck:
    """`final` (the file at the run's end) against `edited` (as the operator left it)."""
    wanted = [line for _, new in HAND_EDITS for line in new.splitlines(keepends=True)]
    present = final.splitlines(keepends=True)
    diff = difflib.ndiff(edited.splitlines(keepends=True), present)
    changed = [d[2:].rstrip("\n") for d in diff if d[:1] in "+-" and not _tuned_line(d[2:])]
    return EditCheck(tuple(line.rstrip("\n") for line in wanted if line not in present), tuple(changed))


# ---- the truth ------------------------------------------------------------------------------------------

def parse_event(value: bytes) -> tuple[float, str, str] | None:
    """(msec, request_id, service.environment) of an access-log event as Filebeat shipped it; None for every
    other record (the error log's lines)."""
    try:
        event = json.loads(value)
    except ValueError:
        return None
    if not isinstance(event, dict):
        return None
    msec, request_id = event.get("msec"), event.get("request_id")
    if not isinstance(msec, (int, float)) or not isinstance(request_id, str):
        return None
    service = event.get("service")
    return float(msec), request_id, service.get("environment", "") if isinstance(service, dict) else ""


def truth_line(arrival_s: float, value: bytes) -> str:
    """One record as the truth writes it down: arrival, then msec, request_id, environment (empty: not an access
    event)."""
    event = parse_event(value)
    return f"{arrival_s:.6f}\t\t\t\n" if event is None else f"{arrival_s:.6f}\t{event[0]!r}\t{event[1]}\t{event[2]}\n"


@dataclass(frozen=True)
class Truth:
    """Every record the independent consumer read: when it arrived and, for access events, msec, request_id and
    service.environment (NaN and "" for the other records)."""

    arrival_s: np.ndarray
    msec_s: np.ndarray
    request_ids: list[str]
    environments: list[str]

    @classmethod
    def parse(cls, lines: Iterable[str]) -> Truth:
        arrival, msec, ids, environments = [], [], [], []
        for line in lines:
            if line.strip():
                a, m, rid, env = line.rstrip("\n").split("\t")
                arrival.append(float(a))
                msec.append(float(m) if m else math.nan)
                ids.append(rid)
                environments.append(env)
        return cls(np.array(arrival), np.array(msec), ids, environments)

    @classmethod
    def read(cls, path: Path) -> Truth:
        with open(path) as lines:
            return cls.parse(lines)

    @property
    def latency_s(self) -> np.ndarray:
        return self.arrival_s - (self.msec_s + STAMP_STEP_S / 2)

    def arrived(self, start_s: float, end_s: float, since_s: float) -> np.ndarray:
        """Access events that arrived in (start, end], written after `since_s` (the rotated days' lines are
        history: the probe counts them as backfill, outside its histograms)."""
        return (self.arrival_s > start_s) & (self.arrival_s <= end_s) & (self.msec_s >= since_s)

    def written(self, start_s: float, end_s: float) -> np.ndarray:
        """Access events nginx wrote in [start, end)."""
        return (self.msec_s >= start_s) & (self.msec_s < end_s)

    def seen(self) -> set[str]:
        return {rid for rid in self.request_ids if rid}

    def other_records(self) -> int:
        return int(np.count_nonzero(np.isnan(self.msec_s)))


def p95(values: np.ndarray) -> float:
    return float(np.percentile(values, 95)) if values.size else math.nan


def read_access_log(path: Path) -> dict[str, float]:
    """request_id -> msec of every request nginx logged."""
    logged = {}
    with open(path) as lines:
        for line in lines:
            entry = json.loads(line)
            logged[entry["request_id"]] = float(entry["msec"])
    return logged


def lost_requests(logged: Mapping[str, float], seen: set[str], start_s: float, end_s: float) -> list[str]:
    """Requests nginx logged in [start, end) that the truth never read."""
    return sorted(rid for rid, msec in logged.items() if start_s <= msec < end_s and rid not in seen)


def _consume_truth(bootstrap: str, out: str, ready, stop, count) -> None:
    """The truth (its own process): every record of the topic from its first, and when its fetch arrived. It does
    nothing else while consuming, so its arrival times are as early as a consumer's can be."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-truth", "enable.auto.commit": False})
    partitions = consumer.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in partitions])
    ready.set()
    with open(out, "w") as written:
        while not stop.is_set():
            records = consumer.consume(2000, 0)
            if not records:  # as the probe does: block only when idle
                first = consumer.poll(0.05)
                records = [first] if first is not None else []
            now = time.time()
            lines = [truth_line(now, r.value()) for r in records if r.error() is None]
            written.write("".join(lines))
            written.flush()
            with count.get_lock():
                count.value += len(lines)
    consumer.close()


def _consume_indexer(bootstrap: str, stop) -> None:
    """The shop's own consumer, group `indexer`: reads the topic and commits every 5 s (its lag is the deployment's
    Kafka backlog)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "indexer", "auto.offset.reset": "earliest",
                         "enable.auto.commit": True, "auto.commit.interval.ms": 5000})
    consumer.subscribe([TOPIC])
    while not stop.is_set():
        consumer.consume(500, 0.5)
    consumer.close()


# ---- windows, contenders and goals ------------------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    """One tuning window: pipetune's P95 as the daemon read it, the truth's over the same span."""

    run: int
    window: int
    action: str
    start_s: float
    end_s: float
    p95_s: float  # pipetune's (NaN: the window could not be read)
    truth_p95_s: float = math.nan
    truth_events: int = 0
    filebeat_cores: float = math.nan  # the probe's --cpu-of filebeat, as the window's cost
    # Where the error comes from: the span Prometheus's samples of the probe's histogram cover (what increase()
    # reads), and the truth's P95 of the arrivals in it through the probe's buckets, as histogram_quantile reads it
    scraped_s: tuple[float, float] | None = None
    as_read_p95_s: float = math.nan

    @property
    def error(self) -> float:
        """pipetune's P95 over the truth's, less 1 (NaN where either is missing)."""
        return _ratio_error(self.p95_s, self.truth_p95_s)

    @property
    def read_error(self) -> float:
        """pipetune's P95 over the truth's as the probe's histogram reads it over the scraped span, less 1: the part
        of the error the probe itself makes (its stamps and counts), without the window's edges and buckets."""
        return _ratio_error(self.p95_s, self.as_read_p95_s)


def _ratio_error(measured: float, truth: float) -> float:
    ok = math.isfinite(measured) and math.isfinite(truth) and truth > 0
    return measured / truth - 1 if ok else math.nan


def histogram_quantile(q: float, values: np.ndarray, bounds: Sequence[float] = LATENCY_BUCKETS_S) -> float:
    """Prometheus's histogram_quantile over `values` counted into buckets of upper bounds `bounds`: linear within
    the bucket the rank falls in (from 0 in the first), the highest finite bound past the last."""
    if values.size == 0:
        return math.nan
    cumulative = np.searchsorted(np.sort(values), np.asarray(bounds), side="right")
    rank = q * values.size
    b = int(np.searchsorted(cumulative, rank, side="left"))
    if b == len(bounds):
        return float(bounds[-1])
    lower, below = (bounds[b - 1], cumulative[b - 1]) if b else (0.0, 0)
    return float(lower + (bounds[b] - lower) * (rank - below) / (cumulative[b] - below))


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and value is not None else math.nan


def windows_of(decisions: Sequence[Mapping], run: int) -> list[Window]:
    """Each logged window's span: the daemon logs a decision and measures the next window at once, so a window
    starts as the decision before it was logged and lasts its `duration_s`. The first one follows the daemon's
    warm-up, which is not logged: its start is unknown and it is left out."""
    out = []
    for before, decision in zip(decisions, decisions[1:]):
        observed = decision["observed"]
        start = float(before["wall_time"])
        cores = observed.get("cpu_cores") or {}
        out.append(Window(run, int(decision["window"]), str(decision["action"]), start,
                          start + _number(observed.get("duration_s")), _number(observed.get("p95_s")),
                          filebeat_cores=_number(cores.get("filebeat"))))
    return out


def with_truth(windows: Sequence[Window], truth: Truth, since_s: float) -> list[Window]:
    rows = []
    for w in windows:
        inside = truth.arrived(w.start_s, w.end_s, since_s) if math.isfinite(w.end_s) else np.zeros(0, bool)
        latency = truth.latency_s[inside] if inside.size else np.zeros(0)
        read = truth.latency_s[truth.arrived(*w.scraped_s, since_s)] if w.scraped_s else np.zeros(0)
        rows.append(Window(**{**asdict(w), "truth_p95_s": p95(latency), "truth_events": int(latency.size),
                              "as_read_p95_s": histogram_quantile(0.95, read)}))
    return rows


def scraped_span(prometheus: str, window: Window) -> tuple[float, float] | None:
    """The first and last sample of the probe's latency histogram that increase() reads for `window`, as the
    daemon queried it at its end (None: fewer than two samples)."""
    from prometheus_api_client import PrometheusConnect

    w = f"{max(round(window.end_s - window.start_s), 1)}s"
    query = f'pipetune_e2e_latency_seconds_count{{stage="e2e",source=~"event_time|"}}[{w}]'
    client = PrometheusConnect(url=prometheus, disable_ssl=True)
    result = client.custom_query(query, params={"time": f"{window.end_s:.3f}"})
    samples = result[0]["values"] if result else []
    return (float(samples[0][0]), float(samples[-1][0])) if len(samples) >= 2 else None


@dataclass(frozen=True)
class Agreement:
    compared: int
    within: int
    worst: float  # the largest |error|; NaN when no window was compared

    @classmethod
    def of(cls, errors: Iterable[float]) -> Agreement:
        """Of each window's error (NaN: not compared)."""
        compared = [abs(e) for e in errors if math.isfinite(e)]
        return cls(len(compared), sum(e <= GOAL_AGREEMENT for e in compared), max(compared) if compared else math.nan)


@dataclass(frozen=True)
class Contender:
    """One config on one fresh window: the truth's latency of what nginx wrote in it, Filebeat's CPU."""

    name: str
    round: int
    start_s: float
    end_s: float
    filebeat_cores: float
    p95_s: float = math.nan
    p50_s: float = math.nan
    out_in: float = math.nan  # requests the truth read over requests nginx wrote in the window


def contender_figures(rows: Sequence[Contender]) -> dict[str, dict[str, float]]:
    """Per contender, the median over its rounds of P95, P50, out/in and Filebeat's CPU."""
    by: dict[str, list[Contender]] = {}
    for row in rows:
        by.setdefault(row.name, []).append(row)
    return {name: {"p95_s": float(np.median([r.p95_s for r in rs])), "p50_s": float(np.median([r.p50_s for r in rs])),
                   "out_in": float(np.median([r.out_in for r in rs])),
                   "filebeat_cores": float(np.median([r.filebeat_cores for r in rs])),
                   "p95_rounds_s": [r.p95_s for r in rs]} for name, rs in by.items()}


def best_within_budget(sweep: Mapping[str, Mapping[str, float]], cores: float = math.inf) -> str | None:
    """The hand sweep's config with the lowest P95 among those whose Filebeat CPU is within the budget `cores`
    (+ CPU_TOLERANCE); None when none is."""
    fits = [n for n, f in sweep.items() if f["filebeat_cores"] <= cores * (1 + CPU_TOLERANCE)]
    return min(fits, key=lambda n: sweep[n]["p95_s"]) if fits else None


@dataclass(frozen=True)
class RunReport:
    """One tuning run's figures and its goals."""

    run: int
    exit_code: int
    final_p95_s: float
    defaults_p95_s: float
    final_cores: float
    sweep: dict[str, dict[str, float]]  # the hand sweep's figures by config, the defaults among them
    agreement: Agreement
    read_agreement: Agreement  # against the truth as the probe's histogram reads it over its samples' span
    logged: int
    lost: int
    edit: EditCheck | None  # None: the run ended before the edit
    changes: dict[str, list[Value]] = field(default_factory=dict)  # parameter -> [start, final]
    decisions_changed: int = 0
    # where what the agent had in force as autotune ended is not its final config: parameter -> [final, in force]
    left_in_force: dict[str, list[Value]] = field(default_factory=dict)
    audit_events: dict[str, int] = field(default_factory=dict)  # the agent's audit log, by event
    after_lull_s: float = math.nan  # the first request after the lull: its latency
    lull_wait_s: float = math.nan  # the longest the operator's own file makes a lull's first line wait

    def goals(self) -> list[tuple[bool, str]]:
        below = self.defaults_p95_s / self.final_p95_s if self.final_p95_s > 0 else math.nan
        goals = [(below >= GOAL_BELOW_DEFAULTS, f"final P95 {_s(self.final_p95_s)}, {below:.0f}x below the defaults' "
                  f"{_s(self.defaults_p95_s)} (goal >= {GOAL_BELOW_DEFAULTS:.0f}x)")]
        budget, best = self.sweep_best, best_within_budget(self.sweep)
        anywhere = "" if best is None or best == budget else \
            f"; at any CPU: {best} {_s(self.sweep[best]['p95_s'])} with {self.sweep[best]['filebeat_cores']:.3f}"
        if budget is None:
            goals.append((False, f"no hand-sweep config ran within the final's Filebeat CPU ({self.final_cores:.3f} "
                                 f"cores): nothing to compare at the same budget{anywhere}"))
        else:
            ratio = self.final_p95_s / self.sweep[budget]["p95_s"]
            goals.append((ratio <= GOAL_OF_SWEEP_BEST, f"final {ratio:.2f}x the hand sweep's best within its Filebeat "
                          f"CPU of {self.final_cores:.3f} cores ({budget}: {_s(self.sweep[budget]['p95_s'])}; goal <= "
                          f"{GOAL_OF_SWEEP_BEST:.0f}x){anywhere}"))
        a = self.agreement
        goals.append((a.compared > 0 and a.within == a.compared,
                      f"pipetune's P95 within {GOAL_AGREEMENT:.0%} of the truth's in {a.within} of {a.compared} "
                      f"windows (worst {a.worst:.1%})"))
        goals.append((self.lost == 0, f"requests lost: {self.lost} of {self.logged} nginx logged (goal 0)"))
        if self.edit is None:
            goals.append((False, "hand edit: not made (the run ended first)"))
        else:
            why = "; ".join([*(f"missing {m!r}" for m in self.edit.missing),
                             *(f"changed {c!r}" for c in self.edit.changed)][:4])
            goals.append((self.edit.kept, "hand edit kept byte for byte" if self.edit.kept else
                          f"hand edit NOT kept: {why}"))
        goals.append((self.after_lull_s <= self.lull_wait_s,
                       f"after the lull the first request arrived {_s(self.after_lull_s)} after nginx wrote it "
                       f"(goal <= {_s(self.lull_wait_s)}: the waits a lull sits out, as the operator's file has them)"))
        if self.exit_code != 0:
            goals.append((False, f"pipetune autotune exited {self.exit_code}"))
        return goals

    @property
    def sweep_best(self) -> str | None:
        """The hand sweep's best config within the final's Filebeat CPU."""
        return best_within_budget(self.sweep, self.final_cores)


def _s(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


# ---- the operator's pipeline on this machine ----------------------------------------------------------

@dataclass(frozen=True)
class Site:
    """Where the operator's pipeline lives on this machine: its files under `work`, its loopback ports."""

    work: Path
    bootstrap: str
    nginx_port: int
    agent_port: int
    probe_port: int
    prometheus_port: int
    filebeat_binary: Path
    k6: Path

    @property
    def log_dir(self) -> Path:
        return self.work / "nginx-logs"

    @property
    def filebeat_yml(self) -> Path:
        return self.work / "filebeat" / "filebeat.yml"

    @property
    def agent_dir(self) -> Path:
        return self.work / "pipetune-agent"

    @property
    def services(self) -> Path:
        return self.work / "services"

    @property
    def filebeat_pid_file(self) -> Path:
        """Where the agent's process runtime keeps the pid of the Filebeat it runs."""
        return self.agent_dir / "state" / "filebeat" / "run" / "filebeat.pid.json"

    @property
    def agent_url(self) -> str:
        return f"http://127.0.0.1:{self.agent_port}"

    def values(self) -> dict[str, object]:
        """What the templates' placeholders stand for here."""
        return {"DIR": self.work / "nginx", "LOG_DIR": self.log_dir, "PORT": self.nginx_port,
                "BOOTSTRAP": self.bootstrap, "DATA_DIR": self.work / "filebeat-data",
                "FILEBEAT_LOG_DIR": self.work / "filebeat-logs", "PROBE_PORT": self.probe_port,
                "AGENT_PORT": self.agent_port, "METRICS_TOKEN": self.work / "prometheus" / f"{NODE}.metrics-token",
                "AGENT_DIR": self.agent_dir, "PROMETHEUS_PORT": self.prometheus_port,
                "CLOCK_OFFSETS": self.work / "clock-offsets.json"}

    def agent(self) -> AgentClient:
        return AgentClient(self.agent_url, (self.agent_dir / "token").read_text().strip(), timeout_s=180.0)


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2.0) as response:
        return response.status == 200


def _listening(port: int) -> bool:
    socket.create_connection(("127.0.0.1", port), timeout=1).close()
    return True


def _run_service(service: Service, ready: Callable[[], bool], timeout_s: float) -> None:
    processes.start(service)
    processes.wait_ready(service, ready, timeout_s)


def create_topic(bootstrap: str) -> None:
    """The operator's topic: three partitions, Kafka's default settings (so CreateTime stamps)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="shop-ops")
    try:
        admin.create_topics([NewTopic(TOPIC, 3, 1)])
    finally:
        admin.close()


class Consumers:
    """The two consumers that are not pipetune's: the shop's `indexer` and the bench's truth."""

    def __init__(self, bootstrap: str, truth_file: Path) -> None:
        ctx = mp.get_context("spawn")
        self.stop_event, ready = ctx.Event(), ctx.Event()
        self.count = ctx.Value("q", 0)
        self.truth = ctx.Process(target=_consume_truth, args=(bootstrap, str(truth_file), ready, self.stop_event,
                                                              self.count), daemon=True)
        self.indexer = ctx.Process(target=_consume_indexer, args=(bootstrap, self.stop_event), daemon=True)
        self.truth.start()
        self.indexer.start()
        if not ready.wait(90):
            self.stop()
            raise RuntimeError("the truth consumer did not start within 90 s")

    def records(self) -> int:
        return int(self.count.value)

    def stop(self) -> None:
        self.stop_event.set()
        for proc in (self.truth, self.indexer):
            proc.join(30)
            if proc.is_alive():
                proc.kill()


class Traffic:
    """k6 running load.js against nginx, as the shop's users would: stopped for a lull and started again."""

    def __init__(self, k6: Path, script: Path, target: str, rate_eps: float, log: Path) -> None:
        self.argv = [str(k6), "run", "--quiet", "--no-color", "--no-summary", "--no-usage-report", "-e",
                     f"TARGET={target}", "-e", f"RATE={rate_eps:.0f}", "-e", "DURATION=24h", str(script)]
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)  # k6 stops its iterations gracefully
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def operator_pipeline(work: Path, console: Console) -> Iterator[tuple[Site, Consumers]]:
    """Kafka (the testbed's broker) with the operator's topic, nginx with its rotated history, Prometheus and the
    probe as the docs run them, the truth and the indexer; everything stopped on exit."""
    installed, peers = install_all(), install_peers()
    with ExitStack() as stack:
        bootstrap = stack.enter_context(kafka_broker(work))
        create_topic(bootstrap)
        site = Site(work, bootstrap, free_port(), free_port(), free_port(), free_port(), installed.filebeat, peers.k6)
        values = site.values()
        site.log_dir.mkdir(parents=True)
        write_rotated(site.log_dir, ROTATED_FILES, time.time())
        for sub in ("nginx/html/static", "prometheus", "filebeat-data", "filebeat-logs"):
            (work / sub).mkdir(parents=True, exist_ok=True)
        conf = write_from_template("nginx.conf", work / "nginx" / "nginx.conf", values)
        prom = write_from_template("prometheus.yml", work / "prometheus" / "prometheus.yml", values)
        write_from_template("deployment.yaml", work / "deployment.yaml", values)
        nginx = Service("nginx", (str(peers.nginx), "-p", str(work / "nginx"), "-c", str(conf), "-e",
                                  str(site.log_dir / "error.log"), "-g", "daemon off;"), site.services)
        prometheus = Service("prometheus", (
            str(installed.prometheus), f"--config.file={prom}", f"--storage.tsdb.path={work / 'prometheus' / 'data'}",
            f"--web.listen-address=127.0.0.1:{site.prometheus_port}", "--storage.tsdb.retention.time=1d"),
            site.services)
        probe = Service("probe", (
            sys.executable, "-m", "agents.probe", "--bootstrap", bootstrap, "--topic", TOPIC, "--group-id",
            "pipetune-probe", "--metrics-port", str(site.probe_port), "--event-time-field", "msec",
            "--event-time-format", "epoch_s", "--clock-offsets", str(values["CLOCK_OFFSETS"]),
            "--cpu-of", f"filebeat={site.filebeat_pid_file}"), site.services)
        for service in (nginx, prometheus, probe):
            stack.callback(processes.stop, service)  # by its pid file: a service that never started is passed over
        _run_service(nginx, lambda: _listening(site.nginx_port), 30)
        _run_service(prometheus, lambda: _http_ok(f"http://127.0.0.1:{site.prometheus_port}/-/ready"), 60)
        _run_service(probe, lambda: _http_ok(f"http://127.0.0.1:{site.probe_port}/metrics"), 60)
        consumers = Consumers(bootstrap, work / "truth.tsv")
        stack.callback(consumers.stop)
        console.print(f"[dim]pipeline up: Kafka {bootstrap} (topic {TOPIC}, 3 partitions, CreateTime), nginx :"
                      f"{site.nginx_port}, Prometheus :{site.prometheus_port}, probe :{site.probe_port}[/]")
        yield site, consumers


# ---- one tuning run, onboarded as the docs say -------------------------------------------------------------

@dataclass
class RunRecord:
    """What one run did, as the bench saw it happen."""

    run: int
    began_s: float
    ended_s: float = math.nan
    exit_code: int = -1
    decisions: list[dict] = field(default_factory=list)
    start: dict[str, Value] = field(default_factory=dict)  # Filebeat's params as the agent started
    final: dict[str, Value] = field(default_factory=dict)  # pipetune's final config (its incumbent), those params
    in_force: dict[str, Value] = field(default_factory=dict)  # what the agent had in force when autotune ended
    edited: str | None = None  # filebeat.yml as the operator left it
    edited_at_s: float = math.nan
    final_text: str = ""
    lull_s: tuple[float, float] | None = None
    audit: list[dict] = field(default_factory=list)
    scraped: dict[int, tuple[float, float]] = field(default_factory=dict)  # window -> its samples' span


def stop_agent(site: Site) -> None:
    """The agent first (so it restarts nothing), then the Filebeat it ran."""
    processes.stop(Service("agent", (), site.services))
    processes.stop(Service("filebeat", (), site.services, pid_path=site.filebeat_pid_file))


def _agent_ready(site: Site) -> bool:
    with site.agent() as agent:
        return all(c["health"]["ok"] for c in agent.components())


def onboard(site: Site, out: Path) -> dict[str, Value]:
    """The operator's filebeat.yml as written, then docs/deploy.md's steps: `agent init`, a copy of the metrics
    token for Prometheus, `agent run` (which starts Filebeat). Returns Filebeat's params as the agent read them."""
    stop_agent(site)
    write_from_template("filebeat.yml", site.filebeat_yml, site.values())
    shutil.rmtree(site.agent_dir, ignore_errors=True)
    init = subprocess.run(pipetune_argv("agent", "init", "--filebeat-config", str(site.filebeat_yml),
                                        "--filebeat-binary", str(site.filebeat_binary), "--input-id", INPUT_ID,
                                        "--out", str(site.agent_dir), "--port", str(site.agent_port)),
                          capture_output=True, text=True)
    (out / "agent-init.txt").write_text(init.stdout + init.stderr)
    if init.returncode != 0:
        raise RuntimeError(f"pipetune agent init failed (exit {init.returncode}): {init.stderr[-2000:]}")
    token = Path(str(site.values()["METRICS_TOKEN"]))
    shutil.copyfile(site.agent_dir / "metrics-token", token)
    token.chmod(0o600)
    _run_service(Service("agent", tuple(pipetune_argv(
        "agent", "run", "--config", str(site.agent_dir / "agent.yaml"), "--token-file", str(site.agent_dir / "token"),
        "--metrics-token-file", str(site.agent_dir / "metrics-token"))), site.services),
        lambda: _agent_ready(site), 120)
    with site.agent() as agent:
        return dict(agent.component("filebeat")["params"])


def restart_filebeat(site: Site) -> None:
    """What an operator does to load an edit when the agent runs Filebeat: stop it; the agent starts it again."""
    pid = read_pid(site.filebeat_pid_file)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)


def _decisions(state: Path) -> list[dict]:
    return StateStore(state).decisions() if (state / "decisions.jsonl").exists() else []


def _progress(run: int, decision: dict, console: Console) -> None:
    change = ", ".join(f"{k.removeprefix('filebeat.')}={v[1]:.4g}" for k, v in decision["change"].items())
    console.print(f"run {run} window {decision['window']:>2} {decision['action']:<9} P95 "
                  f"{_s(_number(decision['observed'].get('p95_s')))}" + (f"  → {change}" if change else ""))


class Operator:
    """What the shop's operator does while autotune runs: after 30 % of the windows an edit of filebeat.yml by hand
    (a processor's field, a comment) and a restart of Filebeat to load it; after 55 % a lull of two windows."""

    def __init__(self, site: Site, traffic: Traffic, record: RunRecord, args: argparse.Namespace,
                 console: Console) -> None:
        self.site, self.traffic, self.record, self.console = site, traffic, record, console
        self.edit_after, self.lull_after = max(2, round(0.3 * args.windows)), max(3, round(0.55 * args.windows))
        self.lull_s = 2 * args.window

    def act(self, logged: int) -> None:
        """Whatever is due once `logged` decisions are in the decision log."""
        record = self.record
        if record.edited is None and logged >= self.edit_after:
            record.edited = apply_hand_edits(self.site.filebeat_yml.read_text())
            self.site.filebeat_yml.write_text(record.edited)
            record.edited_at_s = time.time()
            restart_filebeat(self.site)
            self.console.print(f"run {record.run}: the operator edits filebeat.yml by hand and restarts Filebeat")
        if record.lull_s is None and logged >= self.lull_after:
            self.traffic.stop()
            record.lull_s = (time.time(), math.nan)
            self.console.print(f"run {record.run}: lull, k6 stopped for {self.lull_s:g} s")
        if record.lull_s is not None and math.isnan(record.lull_s[1]) and time.time() >= record.lull_s[0] + self.lull_s:
            self.resume()

    def resume(self) -> None:
        """k6 back on after the lull (at once when the run ends in it)."""
        if self.record.lull_s is not None and math.isnan(self.record.lull_s[1]):
            self.traffic.start()
            self.record.lull_s = (self.record.lull_s[0], time.time())
            self.console.print(f"run {self.record.run}: k6 resumes")


def _is_budget(flag: str) -> bool:
    """What autotune's `--cpu-budget` takes, checked before the pipeline is built rather than after."""
    try:
        return flag in ("default", "none") or 0 <= float(flag) < math.inf
    except ValueError:
        return False


def tuning_flags(args: argparse.Namespace, run: int) -> list[str]:
    """autotune's flags as the docs give them to an operator (`--load none`), the bench's window and budget."""
    return ["--load", "none", "--window", f"{args.window:g}", "--windows", str(args.windows),
            "--cpu-budget", args.cpu_budget, "--seed", str(run - 1)]


def tune(site: Site, traffic: Traffic, args: argparse.Namespace, run: int, out: Path, console: Console) -> RunRecord:
    """`pipetune autotune --pipeline deployment.yaml --load none` on the onboarded pipeline, the operator at work
    meanwhile."""
    record = RunRecord(run, time.time())
    record.start = onboard(site, out)
    operator = Operator(site, traffic, record, args, console)
    state = out / "state"
    shutil.rmtree(state, ignore_errors=True)
    argv = pipetune_argv("autotune", "--pipeline", str(site.work / "deployment.yaml"), *tuning_flags(args, run),
                         "--state-dir", str(state), "--json", str(out / "tune.json"), "--plot",
                         str(site.work / f"tune-{run}.png"))
    deadline = time.time() + (args.windows + 1) * args.window * 3 + 300
    with open(out / "autotune.log", "wb") as log:
        daemon = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    shown = 0
    while daemon.poll() is None:
        time.sleep(1.0)
        decisions = _decisions(state)
        for decision in decisions[shown:]:
            _progress(run, decision, console)
        shown = len(decisions)
        operator.act(shown)
        if time.time() > deadline:
            daemon.send_signal(signal.SIGINT)  # it finishes the window in progress and prints its summary
            deadline = math.inf
    operator.resume()
    record.exit_code = daemon.returncode
    record.ended_s = time.time()
    record.decisions = _decisions(state)
    prometheus = f"http://127.0.0.1:{site.prometheus_port}"
    record.scraped = {w.window: span for w in windows_of(record.decisions, run) if math.isfinite(w.end_s)
                      and (span := scraped_span(prometheus, w)) is not None}
    with site.agent() as agent:
        record.in_force = dict(agent.component("filebeat")["params"])
        record.audit = agent.audit("filebeat")
    tuned = out / "tune.json"  # its final config is the incumbent; a run ended on a candidate leaves that in force
    final = json.loads(tuned.read_text())["final"]["config"] if tuned.exists() else record.in_force
    record.final = {k: final[k] for k in record.start}
    record.final_text = site.filebeat_yml.read_text()
    (out / "filebeat.yml").write_text(record.final_text)
    (out / "agent-audit.json").write_text(json.dumps(record.audit, indent=1))
    minutes = (record.ended_s - record.began_s) / 60
    console.print(f"run {run}: autotune exited {record.exit_code} after {minutes:.1f} min")
    return record


# ---- side by side on fresh windows ----------------------------------------------------------------------

def side_by_side(site: Site, contenders: Mapping[str, Mapping[str, Value]], rounds: int, warmup_s: float,
                 measure_s: float, console: Console) -> list[Contender]:
    """Each contender put in force by the agent, a warm-up, then a fresh window: its span and Filebeat's CPU in
    it (/proc); the truth's figures come later, from what the truth read of the requests written in it. The
    warm-up's length again after the window lets its last requests arrive before the next config's restart.
    Interleaved, then in reverse."""
    rows = []
    names = list(contenders)
    with site.agent() as agent:
        for round_ in range(rounds):
            for name in names if round_ % 2 == 0 else names[::-1]:
                result = agent.put_config("filebeat", agent.next_version("filebeat"), contenders[name])
                if not result.ok:
                    console.print(f"[red]{name}: the agent did not put it in force ({result.status}: "
                                  f"{result.message})[/]")
                    continue
                time.sleep(warmup_s)
                pid = read_pid(site.filebeat_pid_file)
                before, start = cpu_seconds(pid) if pid else None, time.time()
                time.sleep(measure_s)
                after, end = cpu_seconds(pid) if pid else None, time.time()
                cores = (after - before) / (end - start) if before is not None and after is not None else math.nan
                rows.append(Contender(name, round_ + 1, start, end, cores))
                time.sleep(warmup_s)
                console.print(f"[dim]side by side, round {round_ + 1}: {name} (Filebeat {cores:.3f} cores)[/]")
    return rows


def with_truth_contenders(rows: Sequence[Contender], truth: Truth, logged: Mapping[str, float]) -> list[Contender]:
    written = np.array(sorted(logged.values()))
    out = []
    for row in rows:
        inside = truth.written(row.start_s, row.end_s)
        latency = truth.latency_s[inside]
        ids = {truth.request_ids[i] for i in np.flatnonzero(inside)}
        wrote = int(np.searchsorted(written, row.end_s) - np.searchsorted(written, row.start_s))
        out.append(Contender(**{**asdict(row), "p95_s": p95(latency),
                                "p50_s": float(np.median(latency)) if latency.size else math.nan,
                                "out_in": len(ids) / wrote if wrote else math.nan}))
    return out


def drain(consumers: Consumers, quiet_s: float = 10.0, most_s: float = 180.0) -> None:
    """Until the truth has read nothing new for `quiet_s` (what Filebeat still held has arrived), `most_s` at most."""
    started = last_change = time.time()
    seen = consumers.records()
    while time.time() - last_change < quiet_s and time.time() - started < most_s:
        time.sleep(1.0)
        if consumers.records() != seen:
            seen, last_change = consumers.records(), time.time()


# ---- report -----------------------------------------------------------------------------------------------

def first_after(truth: Truth, t_s: float) -> float:
    """The latency of the first request nginx wrote at or after `t_s` (NaN: none arrived)."""
    after = np.flatnonzero(truth.msec_s >= t_s)
    return float(truth.latency_s[after[np.argmin(truth.msec_s[after])]]) if after.size else math.nan


def report_run(record: RunRecord, windows: Sequence[Window], figures: Mapping[str, Mapping[str, float]],
               sweep: Sequence[str], lost: int, logged: int, truth: Truth) -> RunReport:
    final = figures.get(f"pipetune run {record.run}", {})
    cores = final.get("filebeat_cores", math.nan)
    return RunReport(
        run=record.run, exit_code=record.exit_code, final_p95_s=final.get("p95_s", math.nan),
        defaults_p95_s=figures.get("defaults", {}).get("p95_s", math.nan), final_cores=cores,
        sweep={n: figures[n] for n in sweep if n in figures},
        agreement=Agreement.of(w.error for w in windows),
        read_agreement=Agreement.of(w.read_error for w in windows), logged=logged, lost=lost,
        edit=None if record.edited is None else check_edit(record.edited, record.final_text),
        changes={k: [record.start.get(k), v] for k, v in record.final.items() if v != record.start.get(k)},
        decisions_changed=sum(bool(d["change"]) for d in record.decisions),
        left_in_force={k: [v, record.in_force.get(k)] for k, v in record.final.items() if v != record.in_force.get(k)},
        audit_events=dict(Counter(str(entry.get("event")) for entry in record.audit)),
        after_lull_s=first_after(truth, record.lull_s[1]) if record.lull_s else math.nan,
        lull_wait_s=lull_wait_s(record.start))


def _pct(error: float) -> str:
    return f"{error * 100:+.1f}%" if math.isfinite(error) else "-"


def print_report(reports: Sequence[RunReport], windows: Sequence[Window], figures: Mapping[str, Mapping],
                 totals: Mapping[str, int], console: Console) -> None:
    console.print(_table("each tuning window: pipetune's P95 beside the truth's (arrivals in the window); 'as read': "
                         "the truth through the probe's buckets over the span Prometheus's samples cover",
                         ("run", "win", "action", "pipetune", "truth", "error", "as read", "error", "events",
                          "FB cores"),
                         [(str(w.run), str(w.window), w.action, _s(w.p95_s), _s(w.truth_p95_s), _pct(w.error),
                           _s(w.as_read_p95_s), _pct(w.read_error), f"{w.truth_events:,}", f"{w.filebeat_cores:.3f}")
                          for w in windows], left=3))
    defaults = figures.get("defaults", {}).get("p95_s", math.nan)
    console.print(_table("fresh windows side by side (the truth's P95 of what nginx wrote in them; median of rounds)",
                         ("config", "P95", "P50", "out/in", "FB cores", "defaults/it"),
                         [(name, _s(f["p95_s"]), _s(f["p50_s"]), f"{f['out_in']:.1%}", f"{f['filebeat_cores']:.3f}",
                           f"{defaults / f['p95_s']:.0f}x" if f["p95_s"] > 0 else "-") for name, f in figures.items()]))
    for report in reports:
        console.print(f"run {report.run}: {report.decisions_changed} decisions changed the config; final vs the "
                      "operator's: " + (", ".join(f"{k.removeprefix('filebeat.')} {a:.4g} → {b:.4g}"
                                                  for k, (a, b) in report.changes.items()) or "unchanged"))
        console.print(f"run {report.run}: the agent's audit log: " +
                      ", ".join(f"{n} {event}" for event, n in sorted(report.audit_events.items())))
        if report.left_in_force:
            console.print(f"run {report.run}: autotune ended with a candidate in force, not its final config: " +
                          ", ".join(f"{k.removeprefix('filebeat.')} {a:.4g} (final) / {b:.4g} (in force)"
                                    for k, (a, b) in report.left_in_force.items()))
        for ok, text in report.goals():
            console.print(("[green]met[/]    " if ok else "[red]MISSED[/] ") + text)
        read = report.read_agreement
        console.print(f"       (not a goal: within {GOAL_AGREEMENT:.0%} of the truth as the probe's histogram reads it "
                      f"over its samples' span in {read.within} of {read.compared} windows, worst {read.worst:.1%})")
    console.print(f"whole bench: {totals['lost']} of {totals['logged']:,} requests nginx logged never reached the "
                  f"truth; {totals['duplicates']:,} read twice; {totals['other']:,} records of the error log")


def figures_of(reports: Sequence[RunReport], windows: Sequence[Window],
               figures: Mapping[str, Mapping]) -> dict[str, list[dict]]:
    """The tables docs/results.md shows."""
    runs = [{"run": r.run, "final_p95_s": r.final_p95_s, "defaults_p95_s": r.defaults_p95_s,
             "below_defaults": r.defaults_p95_s / r.final_p95_s if r.final_p95_s > 0 else None,
             "sweep_best": r.sweep_best,
             "final_over_sweep_best": r.final_p95_s / r.sweep[r.sweep_best]["p95_s"] if r.sweep_best else None,
             "final_filebeat_cores": r.final_cores, "windows_within_5pct": r.agreement.within,
             "windows_compared": r.agreement.compared, "worst_window_error": r.agreement.worst,
             "windows_within_5pct_as_read": r.read_agreement.within, "worst_error_as_read": r.read_agreement.worst,
             "lost": r.lost,
             "logged": r.logged, "edit_kept": r.edit.kept if r.edit else None, "changes": r.decisions_changed,
             "after_lull_first_s": r.after_lull_s, "lull_wait_goal_s": r.lull_wait_s,
             "goals_met": sum(ok for ok, _ in r.goals()),
             "goals": len(r.goals())} for r in reports]
    contenders = [{"config": name, "p95_s": f["p95_s"], "p50_s": f["p50_s"], "out_in": f["out_in"],
                   "filebeat_cores": f["filebeat_cores"]} for name, f in figures.items()]
    per_window = [{"run": w.run, "window": w.window, "action": w.action, "pipetune_p95_s": w.p95_s,
                   "truth_p95_s": w.truth_p95_s, "error": w.error, "as_read_p95_s": w.as_read_p95_s,
                   "read_error": w.read_error, "events": w.truth_events} for w in windows]
    return {"each run from the operator's defaults": runs, "fresh windows side by side": contenders,
            "each tuning window against the truth": per_window}


def plot(records: Sequence[RunRecord], windows: Sequence[Window], figures: Mapping[str, Mapping], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (runs_ax, bars) = plt.subplots(1, 2, figsize=(14, 4.8), gridspec_kw={"width_ratios": [2, 1]})
    for record in records:
        mine = [w for w in windows if w.run == record.run]
        t = [(w.end_s - record.began_s) / 60 for w in mine]
        line, = runs_ax.plot(t, [w.p95_s for w in mine], "o-", ms=3, label=f"run {record.run}: pipetune's P95")
        runs_ax.plot(t, [w.truth_p95_s for w in mine], "x--", ms=5, color=line.get_color(), alpha=0.7,
                     label=f"run {record.run}: the truth's")
        if record.lull_s:
            runs_ax.axvspan(*((s - record.began_s) / 60 for s in record.lull_s), color=line.get_color(), alpha=0.08)
        if math.isfinite(record.edited_at_s):
            runs_ax.axvline((record.edited_at_s - record.began_s) / 60, color=line.get_color(), ls=":", lw=1)
    runs_ax.set(yscale="log", xlabel="minutes into the run (shaded: the lull; dotted: the hand edit)",
                ylabel="P95 end-to-end (s)", title="each tuning window: pipetune's P95 and the truth's")
    runs_ax.legend(fontsize=7)
    names = list(figures)
    colors = ["tab:gray" if n == "defaults" else "tab:blue" if n.startswith("pipetune") else "tab:orange"
              for n in names]
    bars.bar(range(len(names)), [figures[n]["p95_s"] for n in names], color=colors)
    for i, name in enumerate(names):
        bars.plot([i] * len(figures[name]["p95_rounds_s"]), figures[name]["p95_rounds_s"], "k.", ms=5)
    bars.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
    bars.set(yscale="log", ylabel="P95 (s), the truth's, fresh windows",
             title="final (blue) vs hand sweep (orange) vs defaults")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@dataclass(frozen=True)
class Analysis:
    reports: list[RunReport]
    windows: list[Window]
    contenders: list[Contender]  # each side-by-side window with the truth's figures
    figures: dict[str, dict]  # each contender's figures on its fresh windows, the median of its rounds
    totals: dict[str, int]  # the whole bench: requests logged, lost, read twice; other records


def analyse(records: Sequence[RunRecord], rows: Sequence[Contender], truth: Truth, logged: Mapping[str, float],
            began_s: float, sweep: Sequence[str]) -> Analysis:
    """Everything the bench reports, from what it recorded, what the truth read and what nginx logged."""
    seen = truth.seen()
    windows = [w for r in records for w in with_truth(
        [replace(w, scraped_s=r.scraped.get(w.window)) for w in windows_of(r.decisions, r.run)], truth, began_s)]
    contenders = with_truth_contenders(rows, truth, logged)
    figures = contender_figures(contenders)
    reports = []
    for record in records:
        in_run = sum(record.began_s <= msec < record.ended_s for msec in logged.values())
        lost = len(lost_requests(logged, seen, record.began_s, record.ended_s))
        reports.append(report_run(record, [w for w in windows if w.run == record.run], figures, sweep, lost, in_run,
                                  truth))
    accessed = sum(bool(rid) for rid in truth.request_ids)
    totals = {"lost": len(lost_requests(logged, seen, 0.0, math.inf)), "logged": len(logged),
              "duplicates": accessed - len(seen), "other": truth.other_records()}
    return Analysis(reports, windows, contenders, figures, totals)


# ---- main -------------------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="tuning runs, each from the operator's defaults")
    parser.add_argument("--quick", action="store_true", help="one short run and a small sweep (for development)")
    parser.add_argument("--rate", type=float, default=800.0, help="k6's requests/s")
    parser.add_argument("--window", type=float, help="autotune --window (default 20 s; 15 with --quick)")
    parser.add_argument("--windows", type=int, help="autotune --windows (default 25; 8 with --quick)")
    parser.add_argument("--cpu-budget", default="default",
                        help="autotune --cpu-budget: default, none, or the default with CORES of extra cores "
                             "in place of its 0.05 (e.g. 0.25)")
    parser.add_argument("--out", type=Path, help="write result.json, foreign.txt (this output), foreign.png and each "
                                                 "run's files here")
    args = parser.parse_args(argv)
    runs = 1 if args.quick else args.runs
    args.window = args.window or (15.0 if args.quick else 20.0)
    args.windows = args.windows or (8 if args.quick else 25)
    sweep = QUICK_SWEEP if args.quick else tuple(SWEEP)
    rounds, warmup_s, measure_s = (1, 10.0, 15.0) if args.quick else (2, 10.0, 30.0)
    for ok, flag, allowed in ((runs >= 1, "--runs", ">= 1"), (args.rate > 0, "--rate", "> 0"),
                              (args.window >= 5, "--window", ">= 5 s"), (args.windows >= 4, "--windows", ">= 4"),
                              (_is_budget(args.cpu_budget), "--cpu-budget", "default, none or a number of cores >= 0")):
        if not ok:
            parser.error(f"{flag} must be {allowed}")
    started = BenchResult.start("bench.foreign", argv)
    console = Console(width=100, record=True) if not sys.stdout.isatty() else Console(record=True)
    out = args.out or Path(tempfile.mkdtemp(prefix="pipetune-foreign-out-"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="pipetune-foreign-"))
    work.chmod(0o755)  # nginx's workers (nobody) look up its html directory
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stop still brings the pipeline down
    try:
        with operator_pipeline(work, console) as (site, consumers):
            traffic = Traffic(site.k6, TEMPLATES / "load.js", f"http://127.0.0.1:{site.nginx_port}",
                              args.rate, work / "k6.log")
            began = time.time()
            traffic.start()
            try:
                records = []
                for run in range(1, runs + 1):
                    (out / f"run-{run}").mkdir(parents=True, exist_ok=True)
                    records.append(tune(site, traffic, args, run, out / f"run-{run}", console))
                start = records[0].start
                contenders = {"defaults": start, **{name: {**start, **SWEEP[name]} for name in sweep},
                              **{f"pipetune run {r.run}": r.final for r in records}}
                rows = side_by_side(site, contenders, rounds, warmup_s, measure_s, console)
            finally:
                traffic.stop()
                drain(consumers)
                stop_agent(site)
        shutil.copyfile(work / "deployment.yaml", out / "deployment.yaml")
        truth = Truth.read(work / "truth.tsv")
        logged = read_access_log(site.log_dir / "access.log")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    analysis = analyse(records, rows, truth, logged, began, ("defaults", *sweep))
    reports, windows, figures, totals = analysis.reports, analysis.windows, analysis.figures, analysis.totals
    print_report(reports, windows, figures, totals, console)
    details = {"args": {"runs": runs, "rate_eps": args.rate, "window_s": args.window, "windows": args.windows,
                        "cpu_budget": args.cpu_budget, "rounds": rounds, "measure_s": measure_s,
                        "sweep": {n: SWEEP[n] for n in sweep}},
               "totals": totals, "contenders": contenders, "side_by_side": [asdict(r) for r in analysis.contenders],
               "runs": [asdict(r) for r in records],
               "goals": {r.run: [{"met": ok, "text": text} for ok, text in r.goals()] for r in reports}}
    started.finish(figures_of(reports, windows, figures), details).write(out / RESULT_FILE)
    plot(records, windows, figures, out / "foreign.png")
    console.print(f"{out / RESULT_FILE}, {out / 'foreign.png'}, {out / 'foreign.txt'}")
    console.save_text(str(out / "foreign.txt"))


if __name__ == "__main__":
    main()
