"""`pipetune replay`: a workload spec from the flags, its schedule sent with live progress, a summary."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import signal
from enum import Enum
from pathlib import Path
from typing import Optional

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agents.kafka import properties_file
from agents.adapter import ValidationFailed
from agents.kafka.client import check_properties, create_producer
from replay.arrivals import Schedule
from replay.engine import ReplayResult, phase_results, run
from replay.manifest import build_manifest, write_manifest
from replay.profiles import BuiltWorkload, Profile, WorkloadError, WorkloadSpec, build_schedule
from replay.sinks import PRODUCER_DEFAULTS, SinkSpec, parse_kafka_target

err = Console(stderr=True)


class ArrivalMode(str, Enum):
    uniform = "uniform"
    poisson = "poisson"


class LogFormat(str, Enum):
    json = "json"
    multiline_json = "multiline-json"
    combined = "combined"
    nginx_json = "nginx-json"


# The `WorkloadSpec` field each flag sets, so a library error names the flag the user typed.
FLAGS = {"profile": "--profile", "rate_eps": "--rate", "duration_s": "--duration", "burst_window_s": "--burst-at",
         "burst_factor": "--burst-factor", "stages_path": "--stages", "trace_path": "--trace",
         "time_scale": "--time-scale", "amplify": "--amplify", "period_s": "--period", "depth": "--depth",
         "mmpp_dwell_s": "--mmpp-dwell"}


def _seconds_pair(text: Optional[str], hint: str, form: str) -> Optional[tuple[float, float]]:
    """`A:B` in seconds (checked against the run by the library), or None when the flag is absent."""
    if text is None:
        return None
    try:
        first, second = (float(x) for x in text.split(":"))
    except ValueError:
        raise typer.BadParameter(f"expected {form} in seconds, got {text!r}", param_hint=hint) from None
    return first, second


def build(spec: WorkloadSpec) -> BuiltWorkload:
    """The spec's schedule, with a bad setting reported as a usage error on its flag."""
    try:
        built = build_schedule(spec)
    except WorkloadError as exc:
        raise typer.BadParameter(exc.message, param_hint=FLAGS[exc.field]) from None
    if built.trace_summary:
        err.print(f"[yellow]trace: {built.trace_summary}[/]")
    return built


def producer_properties(path: Path) -> tuple[tuple[str, str], ...]:
    """Read `name=value` librdkafka producer properties once, and let librdkafka check them now."""
    hint = "--producer-properties"
    try:
        properties = properties_file.read(path.read_text())
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc.strerror}", param_hint=hint) from None
    try:
        check_properties(create_producer, {**PRODUCER_DEFAULTS, **properties})
    except ValidationFailed as exc:
        raise typer.BadParameter(f"{path}: {exc}", param_hint=hint) from None
    return tuple(properties.items())


def _sink(out: Optional[Path], http: Optional[str], kafka: Optional[str], stdout: bool, rotate_bytes: int,
          rotate_keep: int, properties_file: Optional[Path] = None) -> SinkSpec:
    chosen = [name for name, v in (("--out", out), ("--http", http), ("--kafka", kafka), ("--stdout", stdout)) if v]
    if len(chosen) != 1:
        raise typer.BadParameter(f"give exactly one of --out PATH, --http URL, --kafka HOST:PORT/TOPIC, --stdout "
                                 f"(got {', '.join(chosen) or 'none'}); or use --dry-run", param_hint="sink")
    if properties_file is not None and kafka is None:
        raise typer.BadParameter("only the --kafka sink has a producer", param_hint="--producer-properties")
    if out is not None:
        directory = out.parent if str(out.parent) else Path(".")
        if out.is_dir() or not directory.is_dir() or not os.access(directory, os.W_OK) or \
                (out.exists() and not os.access(out, os.W_OK)):
            raise typer.BadParameter(f"cannot write {out}: need a writable file in an existing directory",
                                     param_hint="--out")
        return SinkSpec("file", str(out), rotate_bytes, rotate_keep)
    if http is not None:
        if not re.match(r"^https?://[^/\s]+", http):
            raise typer.BadParameter(f"expected http://HOST[:PORT][/PATH], got {http!r}", param_hint="--http")
        return SinkSpec("http", http)
    if kafka is not None:
        try:
            parse_kafka_target(kafka)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--kafka") from None
        properties = producer_properties(properties_file) if properties_file is not None else ()
        return SinkSpec("kafka", kafka, producer_properties=properties)
    return SinkSpec("stdout")


class _LiveProgress:
    """Progress bar with the target rate (from the schedule), the achieved rate and the send lag."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.progress = Progress(TextColumn("[bold]replay"), BarColumn(), TextColumn("{task.completed:,}/{task.total:,}"),
                                 TextColumn("{task.fields[rates]}"), TimeElapsedColumn(), console=err,
                                 transient=False)
        self.task = self.progress.add_task("replay", total=schedule.events, rates="")
        self._last = (0, 0.0)

    def __call__(self, sent: int, elapsed_s: float, lag_s: float) -> None:
        prev_sent, prev_t = self._last
        dt = elapsed_s - prev_t
        if dt < 0.5 and sent < self.schedule.events:
            return
        window = (self.schedule.times_s >= prev_t) & (self.schedule.times_s < elapsed_s)
        target = np.count_nonzero(window) / dt if dt > 0 else 0.0
        actual = (sent - prev_sent) / dt if dt > 0 else 0.0
        self._last = (sent, elapsed_s)
        self.progress.update(self.task, completed=sent,
                             rates=f"target {target:7.0f} ev/s  actual {actual:7.0f} ev/s  lag {lag_s * 1000:6.1f} ms")


def _print_summary(summary: dict, title: str) -> None:
    table = Table(title=title)
    for col in ("phase", "start s", "end s", "target ev/s", "achieved ev/s"):
        table.add_column(col, justify="right")
    for i, p in enumerate(summary["phases"], start=1):
        table.add_row(str(i), f"{p['start_s']:.1f}", f"{p['end_s']:.1f}", f"{p['target_eps']:.1f}",
                      f"{p['achieved_eps']:.1f}")
    err.print(table)
    err.print(", ".join(f"{k}={v}" for k, v in summary.items() if k != "phases"))


def _dry_run_summary(schedule: Schedule) -> dict:
    times = schedule.times_s
    gaps_ms = np.diff(times) * 1000 if times.size > 1 else np.zeros(1)
    per_second = np.bincount(np.floor(times).astype(int)) if times.size else np.zeros(1)
    return {
        "events": schedule.events,
        "duration_s": schedule.duration_s,
        "achieved_eps": round(schedule.events / schedule.duration_s, 2),
        "peak_1s_eps": int(per_second.max()),
        "interarrival_p50_ms": round(float(np.percentile(gaps_ms, 50)), 3),
        "interarrival_p99_ms": round(float(np.percentile(gaps_ms, 99)), 3),
        "send_lag_p50_ms": 0.0,
        "send_lag_p99_ms": 0.0,
        "phases": [vars(p) | {"achieved_eps": round(p.achieved_eps, 2)} for p in phase_results(schedule.phases, times)],
    }


def _plot(result: ReplayResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seconds = int(np.ceil(result.duration_s))
    target = np.bincount(np.floor(result.schedule.times_s).astype(int), minlength=seconds)[:seconds]
    achieved = np.bincount(np.floor(result.sent_at_s).astype(int), minlength=seconds)[:seconds]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    ax1.step(np.arange(seconds), target, where="post", label="scheduled")
    ax1.step(np.arange(seconds), achieved, where="post", label="sent", alpha=0.8)
    ax1.set_ylabel("events / s")
    ax1.legend()
    ax1.set_title(f"pipetune replay — {result.schedule.profile}, {result.events:,} events")
    order = np.argsort(result.sent_at_s)
    ax2.plot(result.sent_at_s[order], result.send_lag_s[order] * 1000, ",", alpha=0.5)
    ax2.set_ylabel("send lag (ms)")
    ax2.set_xlabel("seconds from start")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def replay_command(
    profile: Optional[Profile] = typer.Option(None, help="Arrival process (default: stages with --stages, trace "
                                                           "with --trace, else steady)."),
    rate: float = typer.Option(300.0, help="Base rate in events per second (the paper's load is ~300)."),
    duration: Optional[float] = typer.Option(None, help="Run length in seconds (default 180; stages and trace: their own length)."),
    burst_at: Optional[str] = typer.Option(None, help="burst/flash window START:END in seconds (default: 1/3 to 1/2 of the run)."),
    burst_factor: Optional[float] = typer.Option(None, help="Rate multiplier in the burst (default: burst 2, flash 8, mmpp 4)."),
    stages: Optional[Path] = typer.Option(None, help="YAML/JSON list of k6-style {duration, target} stages, or a "
                                                     "k6 options JSON ({\"stages\": [...]}) as k6 writes it."),
    trace: Optional[Path] = typer.Option(None, help="Access log (combined or nginx JSON lines) whose arrivals to replay."),
    time_scale: float = typer.Option(1.0, help="Trace: replay X times faster."),
    amplify: float = typer.Option(1.0, help="Trace: M events per original request."),
    period: Optional[float] = typer.Option(None, help="Diurnal: cycle length in seconds (default: the run)."),
    depth: float = typer.Option(0.5, help="Diurnal: relative swing of the rate, 0..1."),
    mmpp_dwell: Optional[str] = typer.Option(None, help="MMPP: mean seconds in the normal and burst states, "
                                                         "NORMAL_S:BURST_S (default 20:5)."),
    arrivals_mode: ArrivalMode = typer.Option(ArrivalMode.uniform, "--arrivals",
                                              help="Even spacing (the paper's generator) or Poisson arrivals."),
    out: Optional[Path] = typer.Option(None, help="Sink: append the events (--format) to this file."),
    rotate_bytes: int = typer.Option(0, help="--out: rotate like logrotate past this size (0: never)."),
    rotate_keep: int = typer.Option(0, help="--out: rotated files kept (0: all)."),
    http: Optional[str] = typer.Option(None, help="Sink: send each event as its HTTP request to this base URL."),
    kafka: Optional[str] = typer.Option(None, help="Sink: produce to HOST:PORT/TOPIC."),
    producer_properties_file: Optional[Path] = typer.Option(
        None, "--producer-properties", help="--kafka: librdkafka producer properties (name=value lines), read at start."),
    stdout: bool = typer.Option(False, "--stdout", help="Sink: write the events to standard output."),
    log_format: LogFormat = typer.Option(LogFormat.json, "--format", help="pipetune's JSON event (single-line or the paper's multi-line), or lines with no "
                                     "pipetune field: Apache/nginx combined (time_local, 1 s) or nginx JSON ($msec)."),
    seed: int = typer.Option(0, help="Seed of the arrival process and the shop users."),
    processes: int = typer.Option(1, help="Spread the schedule over this many processes."),
    run_id: Optional[str] = typer.Option(None, help="Prefix of every request_id (default: random)."),
    manifest: Optional[Path] = typer.Option(None, help="Write the run manifest (JSON) here."),
    plot: Optional[Path] = typer.Option(None, help="Write a PNG of scheduled vs sent rate and send lag."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only print the schedule's statistics."),
    as_json: bool = typer.Option(False, "--json", help="Print the machine-readable summary on stdout."),
) -> None:
    """Send production-like traffic (FSM shop users or a real trace) into a pipeline, open-loop."""
    if profile is None:
        profile = Profile.stages if stages else Profile.trace if trace else Profile.steady
    dwell = _seconds_pair(mmpp_dwell, "--mmpp-dwell", "NORMAL_S:BURST_S")
    built = build(WorkloadSpec(profile, rate, duration, seed, poisson=arrivals_mode is ArrivalMode.poisson,
                               burst_window_s=_seconds_pair(burst_at, "--burst-at", "START:END"),
                               burst_factor=burst_factor, stages_path=stages, trace_path=trace, time_scale=time_scale,
                               amplify=amplify, period_s=period, depth=depth,
                               **({"mmpp_dwell_s": dwell} if dwell else {})))
    schedule, workload = built.schedule, dataclasses.replace(built.workload, fmt=log_format.value)
    if processes < 1:
        raise typer.BadParameter(f"must be >= 1, got {processes}", param_hint="--processes")
    if dry_run:
        summary = _dry_run_summary(schedule)
        if as_json:
            print(json.dumps(summary))
        else:
            _print_summary(summary, f"{profile.value} schedule (dry run)")
        return
    sink = _sink(out, http, kafka, stdout, rotate_bytes, rotate_keep, producer_properties_file)
    if sink.kind == "stdout" and (as_json or processes > 1):
        raise typer.BadParameter("--stdout cannot be combined with --json or --processes > 1", param_hint="--stdout")
    live = _LiveProgress(schedule)
    # A stop (the agent recreating the producer) ends the run as an interrupt does: the sink is closed, so
    # what the producer holds is flushed rather than lost.
    previous = signal.signal(signal.SIGTERM, _interrupted)
    try:
        with live.progress:
            result = run(schedule, sink, workload, run_id=run_id or secrets.token_hex(4), processes=processes,
                         progress=live)
    finally:
        signal.signal(signal.SIGTERM, previous)
    summary = result.summary()
    if manifest is not None:
        write_manifest(manifest, build_manifest(result, workload.fmt, f"{sink.kind}:{sink.target}"))
    if plot is not None:
        _plot(result, plot)
    if as_json:
        print(json.dumps(summary))
    else:
        _print_summary(summary, f"replay {result.run_id}: {profile.value} into {sink.kind} {sink.target}".rstrip())
    if summary["failed"]:
        err.print(f"[red]{summary['failed']} events could not be delivered (listed in the manifest)[/]")
        raise typer.Exit(1)
