"""How far the probe's latency and load figures are from the truth, on the testbed.

The replay writes traffic that carries no pipetune field — plain combined lines (`time_local`, 1 s)
and nginx JSON with `$msec` — while canaries (agents/heartbeat.py) go both into the same log (the
operator's opt-in mode, node `in-log`) and into a file of their own that Filebeat harvests beside it
(`agent.canary_file`, node `own-file`: its own harvester, which backs off at end-of-file). The replay
knows when it wrote each line, and each line's URI ends in a unique `req=` parameter, so a truth
consumer of the bench's own (same consumer settings as the probe, its own process) matches what
arrived in Kafka to its write time. The probe measures only from the lines'
event time and from the canaries. Per config and rate it prints:
- true P95 (arrival − replay write time), event-time P95 as the probe exports it (Prometheus
  `histogram_quantile` over the window, what the daemon reads) and computed exactly from the same
  records (the method without the histogram's buckets), each error;
- canary P95 (the probe's) of each canary placement, and its error;
- throughput: the probe's `pipetune_events_total` over the span its window's samples cover (what
  `increase()` extrapolates from) against the events that truly arrived in that span; offered load:
  `--offered-query` against the lines truly written in the window.

    python -m bench.measurement [--formats combined,nginx-json] [--rates 1000,5000] [--window 30]
                                [--configs defaults,hybrid,...] [--out docs/evidence/measurement]

Starts its own testbed per format (ports 300 above the default pipeline's, run dir
`measurement-<format>`) and stops it again; writes measurement.txt, result.json (bench/result.py) and
measurement.png to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import re
import secrets
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from agents.kafka import properties_file
from agents.heartbeat import HeartbeatWriter
from agents.kafka.client import FILE as CONSUMER_PROPERTIES
from agents.probe.events import HEARTBEAT_MARK, decode_record, heartbeat_of
from bench.live import applicable, in_components_order
from bench.result import RESULT_FILE, BenchResult
from controller.telemetry import PrometheusTelemetry, counted_in
from models.presets import preset
from models.space import PIPELINE_SPACE, Config
from replay.engine import Workload, run
from replay.events import TRUTH_PARAM
from replay.profiles import Profile, WorkloadSpec, build_schedule
from replay.sinks import SinkSpec
from testbed import lifecycle
from testbed.calibration_design import LOW_LATENCY
from testbed.pipeline import DEFAULT_PIPELINE, PipelineSpec, load_pipeline
from testbed.probe import event_time_spec, probe_config_dir
from testbed.prometheus import prometheus_url

ROOT = Path(__file__).resolve().parents[1]
PORT_SHIFT = 300
CANARY_EPS = 10.0
CANARY_NODES = ("in-log", "own-file")  # the canary writers' node names: in the busy log, in a file of their own
WARMUP_S = 8.0  # after a restart: the harvester finds the log again, the first batches go out
DRAIN_S = 15.0  # after the last write: the slowest configs' window arrivals (defaults: ~2-10 s) are in
_REQ = re.compile(rb"[?&]" + TRUTH_PARAM.encode() + rb"=[0-9a-f]+-(\d+)")


LEARNED = ROOT / "docs/evidence/measurement/learned-configs.json"


def learned_configs() -> dict[str, Config]:
    """Two configs the learner found on the live testbed (the live run of 11838bf): its final one, and the one it ran
    at window 9 (P95 ~0.1 s then), kept in `LEARNED` so that every run of this bench measures the same two."""
    return {name: PIPELINE_SPACE.config(values) for name, values in json.loads(LEARNED.read_text()).items()}


def contenders() -> dict[str, Config]:
    return applicable({"defaults": preset("defaults"), "hybrid": in_components_order("hybrid")[0],
                       "latency": preset("latency"),
                       "low-latency": PIPELINE_SPACE.config(LOW_LATENCY, base=preset("defaults")),
                       **learned_configs()})


def bench_spec(fmt: str) -> PipelineSpec:
    """The default pipeline with `fmt` lines, on ports of its own and a run dir of its own."""
    spec = load_pipeline(DEFAULT_PIPELINE).beside(f"measurement-{fmt}", PORT_SHIFT)
    return spec.model_copy(update={"log": spec.log.model_copy(update={"format": fmt}),
                                   "agent": spec.agent.model_copy(update={"canary_file": True})})


def _truth(bootstrap: str, topic: str, settings: dict, ready, stop, results) -> None:
    """The truth consumer (its own process): from the topic's end, every record and when it arrived.
    It does nothing else while consuming, so its arrival times are as early as a consumer's can be."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-truth-{secrets.token_hex(3)}",
                         "enable.auto.commit": False, **settings})
    meta = consumer.list_topics(topic, timeout=30).topics[topic]
    parts = []
    for p in meta.partitions:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        parts.append(TopicPartition(topic, p, high))
    consumer.assign(parts)
    ready.set()
    arrivals = []
    while not stop.is_set():
        # As the probe does: consume() with a timeout would wait for a full batch; block only when idle.
        records = consumer.consume(2000, 0)
        if not records:
            first = consumer.poll(0.05)
            records = [first] if first is not None else []
        now = time.time()
        arrivals.extend((now, record.value()) for record in records if record.error() is None)
    consumer.close()
    results.send(arrivals)


def _read_arrivals(arrivals: list[tuple[float, bytes]], fmt: str) -> tuple[list, list]:
    """(seq, arrival, event time as the probe reads it) of each replayed line; (arrival, write time) of
    each canary."""
    spec = event_time_spec(fmt)
    events, canaries = [], []
    for now, value in arrivals:
        if HEARTBEAT_MARK in value:
            canaries.append((now, heartbeat_of(decode_record(value, None, True).line).ts_s))
            continue
        match = _REQ.search(value)
        if match is None:
            continue
        try:
            when = spec.read(decode_record(value, None, spec.field is not None).line)
            event_ts = when.ts_s + when.resolution_s / 2  # as the probe reads it
        except ValueError:
            event_ts = math.nan
        events.append((int(match.group(1)), now, event_ts))
    return events, canaries


@dataclass
class Row:
    fmt: str
    config: str
    rate_eps: float
    true_p95_s: float
    probe_p95_s: float  # event time, from Prometheus, as the daemon reads it
    exact_p95_s: float  # event time, computed from the same records
    canary_log_p95_s: float  # the probe's canary histogram, canaries in the busy log
    canary_file_p95_s: float  # canaries in a file of their own
    resolution_s: float
    true_throughput_eps: float
    probe_throughput_eps: float
    true_offered_eps: float
    measured_offered_eps: float
    arrived: int
    written: int

    def error(self, measured: float, truth: float) -> float:
        return measured / truth - 1 if truth > 0 and math.isfinite(measured) else math.nan


def _p95(values: np.ndarray) -> float:
    return float(np.percentile(values, 95)) if values.size else math.nan


def measure(spec: PipelineSpec, name: str, config: Config, rate_eps: float, window_s: float,
            offered_query: str) -> Row:
    """Apply `config`, replay `rate_eps` for warm-up + `window_s`, and compare the probe with the truth."""
    lifecycle.apply(spec, config)
    time.sleep(2 * spec.prometheus.scrape_interval_s)
    settings = properties_file.read((probe_config_dir(spec) / CONSUMER_PROPERTIES).read_text())
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    receive, send = ctx.Pipe(duplex=False)
    truth = ctx.Process(target=_truth, args=(spec.bootstrap, spec.probe.topic, settings, ready, stop, send),
                        daemon=True)
    truth.start()
    if not ready.wait(60):
        raise RuntimeError("the truth consumer did not start within 60 s")
    schedule = build_schedule(WorkloadSpec(Profile.steady, rate_eps, WARMUP_S + window_s, seed=1)).schedule
    result = run(schedule, SinkSpec("file", str(spec.log_path())), Workload(fmt=spec.log.format),
                 run_id=secrets.token_hex(4))
    written_at = result.started_at + np.sort(result.sent_at_s)  # seq order is send order (one process)
    t_a, t_b = result.started_at + WARMUP_S, result.started_at + WARMUP_S + window_s
    time.sleep(DRAIN_S)  # the window's arrivals, the slowest configs' included, and two scrapes
    stop.set()
    if not receive.poll(90):
        raise RuntimeError("the truth consumer sent nothing back within 90 s")
    events, canaries = _read_arrivals(receive.recv(), spec.log.format)
    truth.join(30)
    seqs = np.array([e[0] for e in events], dtype=int)
    arrived_at = np.array([e[1] for e in events])
    event_ts = np.array([e[2] for e in events])
    # The arrival window mirrors the write window, shifted by the median latency; both the truth and
    # the probe's counters (queried at its end) count the arrivals inside it.
    shift = float(np.median(arrived_at - written_at[seqs])) if seqs.size else 0.0
    end = min(t_b + shift, time.time() - 2 * spec.prometheus.scrape_interval_s)
    inside = (arrived_at > end - window_s) & (arrived_at <= end)
    telemetry = PrometheusTelemetry(prometheus_url(spec))
    w = f"{window_s:.0f}s"
    (first_s, first), (last_s, last) = _span(telemetry, f"pipetune_events_total[{w}]", end)
    in_span = np.count_nonzero((arrived_at > first_s) & (arrived_at <= last_s))
    true_latency = arrived_at[inside] - written_at[seqs[inside]]
    exact = arrived_at[inside] - event_ts[inside]
    canary_written = np.array([c[1] for c in canaries])
    true_written = np.count_nonzero((written_at > t_a) & (written_at <= t_b)) + \
        np.count_nonzero((canary_written > t_a) & (canary_written <= t_b))

    def p95(matchers: str) -> float:
        buckets = counted_in(f'pipetune_e2e_latency_seconds_bucket{{stage="e2e",{matchers}}}', w)
        return telemetry.scalar(f"histogram_quantile(0.95, sum by (le) ({buckets}))", end)

    canary_log, canary_file = (p95(f'source="canary",node="{node}"') for node in CANARY_NODES)
    return Row(spec.log.format, name, rate_eps, true_p95_s=_p95(true_latency),
               probe_p95_s=p95('source="event_time"'), exact_p95_s=_p95(exact[np.isfinite(exact)]),
               canary_log_p95_s=canary_log, canary_file_p95_s=canary_file,
               resolution_s=telemetry.scalar("pipetune_event_time_resolution_seconds", end),
               true_throughput_eps=in_span / (last_s - first_s),
               probe_throughput_eps=(last - first) / (last_s - first_s),
               true_offered_eps=true_written / window_s,
               measured_offered_eps=telemetry.scalar(offered_query.format(w=w), t_b) / window_s,
               arrived=int(np.count_nonzero(inside)), written=int(written_at.size))


Sample = tuple[float, float]  # (epoch s, value)


def _span(telemetry: PrometheusTelemetry, selector: str, at: float) -> tuple[Sample, Sample]:
    """The first and last scraped samples of the one series of range `selector` at `at`:
    the span Prometheus' `increase()` measures and extrapolates from. Comparing the truth over the
    nominal window instead took the phase of the presets' 1 s flushes (a batch in or out, ~3 %) for an
    error of the probe."""
    result = telemetry.client.custom_query(selector, params={"time": f"{at:.3f}"})
    if len(result) != 1 or len(result[0]["values"]) < 2:
        raise RuntimeError(f"Prometheus has not one series with two samples of {selector} at {at:.3f}")
    values = result[0]["values"]
    return (float(values[0][0]), float(values[0][1])), (float(values[-1][0]), float(values[-1][1]))


SHORT = {"combined": "comb", "nginx-json": "njson"}


Column = tuple[str, int, Callable[[Row], str]]
_FIRST: list[Column] = [("fmt", -5, lambda r: SHORT.get(r.fmt, r.fmt)), ("config", -13, lambda r: r.config),
                        ("ev/s", 4, lambda r: f"{r.rate_eps:.0f}")]
_TRUE: Column = ("true", 7, lambda r: _ms(r.true_p95_s))


def _measured(name: str, attr: str) -> list[Column]:
    """A P95 column and its error against the truth."""
    return [(name, 8, lambda r: _ms(getattr(r, attr))),
            ("err", 7, lambda r: _pct(r.error(getattr(r, attr), r.true_p95_s)))]


# P95 in ms per window: the truth, the probe's event time (Prometheus) and exact; the canaries.
LATENCY: list[Column] = [*_FIRST, _TRUE, *_measured("evtime", "probe_p95_s"), *_measured("exact", "exact_p95_s")]
CANARIES: list[Column] = [*_FIRST, _TRUE, *_measured("in log", "canary_log_p95_s"),
                          *_measured("own file", "canary_file_p95_s")]
# Events/s per window: throughput (the probe's events against true arrivals) and offered load.
LOAD: list[Column] = [*_FIRST, ("thru", 7, lambda r: f"{r.true_throughput_eps:.1f}"),
                      ("probe", 7, lambda r: f"{r.probe_throughput_eps:.1f}"),
                      ("err", 6, lambda r: _pct(r.error(r.probe_throughput_eps, r.true_throughput_eps))),
                      ("offer", 7, lambda r: f"{r.true_offered_eps:.1f}"),
                      ("seen", 7, lambda r: f"{r.measured_offered_eps:.1f}"),
                      ("err", 6, lambda r: _pct(r.error(r.measured_offered_eps, r.true_offered_eps)))]


def text_table(columns: list[Column], rows: list[Row]) -> str:
    """A plain table (negative width: left-aligned), 80 columns at most."""
    def cell(text: str, width: int) -> str:
        return f"{text:<{-width}}" if width < 0 else f"{text:>{width}}"

    head = " ".join(cell(name, width) for name, width, _ in columns)
    body = [" ".join(cell(show(r), width) for _, width, show in columns) for r in rows]
    return "\n".join([head, "-" * len(head), *body])


def _ms(seconds: float) -> str:
    return "-" if not math.isfinite(seconds) else f"{seconds * 1000:.1f}" if seconds < 10 else f"{seconds:.1f}s"


def _pct(error: float) -> str:
    if not math.isfinite(error):
        return "-"
    return f"{error * 100:+.0f}%" if abs(error) >= 1 else f"{error * 100:+.1f}%"


def _plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    formats = sorted({r.fmt for r in rows})
    fig, axes = plt.subplots(1, len(formats), figsize=(6 * len(formats), 5), squeeze=False)
    for ax, fmt in zip(axes[0], formats):
        mine = [r for r in rows if r.fmt == fmt]
        truth = [r.true_p95_s * 1000 for r in mine]
        for attr, label, marker in (("probe_p95_s", "event time (probe, Prometheus)", "o"),
                                    ("exact_p95_s", "event time (exact)", "x"),
                                    ("canary_log_p95_s", "canary in the log", "s"),
                                    ("canary_file_p95_s", "canary in its own file", "^")):
            ax.scatter(truth, [getattr(r, attr) * 1000 for r in mine], label=label, marker=marker, alpha=0.8)
        low, high = min(truth) / 2, max(truth) * 2
        ax.plot([low, high], [low, high], "k--", linewidth=0.8, label="= truth")
        ax.set(xscale="log", yscale="log", xlabel="true P95 (ms)", ylabel="measured P95 (ms)",
               title=f"{fmt} lines, {len(mine)} windows")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _wait_for_canaries(spec: PipelineSpec, timeout_s: float = 90.0) -> None:
    """Until the probe has measured canaries of both writers: Filebeat found both files and the path to
    the probe works."""
    telemetry = PrometheusTelemetry(prometheus_url(spec))
    deadline = time.time() + timeout_s
    while not all(telemetry.scalar(f'sum(pipetune_canary_received_total{{node="{node}"}})', time.time()) > 0
                  for node in CANARY_NODES):
        if time.time() > deadline:
            raise RuntimeError(f"no canary reached the probe within {timeout_s:.0f} s")
        time.sleep(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", default="combined,nginx-json")
    parser.add_argument("--rates", default="1000,5000")
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--configs", default=",".join(contenders()))
    parser.add_argument("--offered-query", default="sum(increase(pipetune_source_lines_total[{w}]))",
                        help="Prometheus query of the lines offered in a window ({w}: its length); the default "
                             "is the agent's count of lines appended to the harvested files")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/evidence/measurement")
    args = parser.parse_args()
    started = BenchResult.start("bench.measurement")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stop still brings its testbed down
    configs = {name: contenders()[name] for name in args.configs.split(",")}
    rates = [float(r) for r in args.rates.split(",")]
    rows: list[Row] = []
    began = time.time()
    for fmt in args.formats.split(","):
        spec = bench_spec(fmt)
        lifecycle.down(spec)
        lifecycle.up(spec, preset("defaults"))
        node = spec.node_layouts()[0]
        canaries = [HeartbeatWriter(path, name, CANARY_EPS, spec.resolved_run_dir() / f"canary-{name}")
                    for path, name in zip((node.log_path, node.canary_path), CANARY_NODES)]
        for canary in canaries:
            canary.start()
        try:
            _wait_for_canaries(spec)
            for name, config in configs.items():
                for rate in rates:
                    row = measure(spec, name, config, rate, args.window, args.offered_query)
                    rows.append(row)
                    print(text_table(LATENCY, [row]).splitlines()[-1], flush=True)
        finally:
            for canary in canaries:
                canary.stop()
            lifecycle.down(spec)
    report = (f"P95 (ms): truth, event time as the probe exports it (Prometheus) and exactly\n"
              f"{text_table(LATENCY, rows)}\n\nP95 (ms) of canaries, {CANARY_EPS:.0f}/s each: in the busy log, in "
              f"a file of their own\n{text_table(CANARIES, rows)}\n\n"
              f"events/s: true throughput, the probe's; true offered, the pipeline's\n"
              f"{text_table(LOAD, rows)}\n\nwindow {args.window:.0f} s after {WARMUP_S:.0f} s warm-up; "
              f"{time.time() - began:.0f} s in all\n")
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "measurement.txt").write_text(report)
    started.finish([asdict(r) for r in rows]).write(args.out / RESULT_FILE)
    _plot(rows, args.out / "measurement.png")
    print(f"wrote {args.out / 'measurement.txt'}, {args.out / RESULT_FILE}, measurement.png")


if __name__ == "__main__":
    main()
