"""Replay-and-check on the running testbed: write a workload into the pipeline's log, read back what the
probe saw, and turn it into an `Observation` or a calibration `Measurement`.

A run writes its events into the pipeline's log and its manifest into the probe's manifests directory;
the probe answers with a report (lost, duplicated, late) and Prometheus holds the latency histograms,
which `PrometheusTelemetry` turns into an `Observation`. `BackgroundLoad` does the same in chunks from a
thread while the daemon tunes, so the probe's ledger accounts for every event of a tuning run however
long it lasts and wherever it is stopped.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from dataclasses import dataclass, replace

from agents.probe.ledger import RunReport
from agents.probe.runs import read_report
from controller.telemetry import PrometheusTelemetry
from models.observation import Observation
from models.policy import Policy
from models.space import Config
from models.twin.fit import Measurement
from models.verdict import Verdict, judge
from replay.arrivals import Schedule, steady
from replay.engine import ReplayResult, Workload, run
from replay.manifest import build_manifest, write_manifest
from replay.profiles import Profile, WorkloadSpec, build_schedule
from replay.sinks import SinkSpec
from testbed import lifecycle
from testbed.pipeline import NodeLayout, PipelineSpec
from testbed.processes import TestbedError
from testbed.prometheus import prometheus_url

CHUNK_S = 20.0  # a background-load run; the end of its `with` block waits at most this long for the one under way
PRIME_RATE_EPS = 100.0
PRIME_DURATION_S = 2.0


@dataclass(frozen=True)
class LiveRun:
    """One replay run through the live pipeline and how it arrived."""

    run_id: str
    started_at: float
    ended_at: float  # the replay's last write
    events: int
    report: RunReport
    offered_eps: float  # what the schedule offers: a replay that falls behind on a busy machine offers it later


def new_run_id() -> str:
    return "r" + secrets.token_hex(4)


def replay_into(spec: PipelineSpec, schedule: Schedule, run_id: str, node: NodeLayout | None = None) -> ReplayResult:
    """Write `schedule`'s events into node `node`'s log (default: the first node of the testbed `up` started),
    then the run's manifest for the probe."""
    log = (node or lifecycle.recorded_spec(spec).node_layouts()[0]).log_path
    log.parent.mkdir(parents=True, exist_ok=True)
    result = run(schedule, SinkSpec("file", str(log)), Workload(fmt=spec.log.format), run_id=run_id)
    manifest = build_manifest(result, spec.log.format, f"file:{log}")
    write_manifest(spec.resolved_run_dir() / "manifests" / f"{run_id}.json", manifest)
    return result


def wait_for_report(spec: PipelineSpec, run_id: str, timeout_s: float) -> RunReport:
    """The probe's report once every event arrived or the run is final; the latest one at the timeout."""
    deadline = time.monotonic() + timeout_s
    report = None
    while time.monotonic() < deadline:
        report = read_report(spec.resolved_run_dir() / "reports", run_id)
        if report is not None and (report.complete or report.final):
            return report
        time.sleep(0.25)
    if report is None:
        raise TimeoutError(f"the probe wrote no report for run {run_id} within {timeout_s:.0f} s; "
                           f"is the testbed up? (pipetune testbed status)")
    return report


def replay_and_check(spec: PipelineSpec, schedule: Schedule, run_id: str | None = None,
                     node: NodeLayout | None = None) -> LiveRun:
    """Replay into node `node`'s log (default: the first node's), then wait (at most the probe's grace period
    past the end) for the probe's verdict."""
    run_id = run_id or new_run_id()
    result = replay_into(spec, schedule, run_id, node)
    ended_at = result.started_at + result.duration_s
    report = wait_for_report(spec, run_id, spec.probe.late_after_s + 5.0)
    return LiveRun(run_id, result.started_at, ended_at, result.events, report, schedule.events / schedule.duration_s)


def observe_run(spec: PipelineSpec, live_run: LiveRun, scrape_s: float, warmup_s: float = 0.0) -> Observation:
    """The run's observation: latency of the events that arrived after the warm-up; the offered load its
    schedule's; throughput over the replay's length, the output window shifted by the median latency so
    that a pipeline that keeps up shows throughput = offered."""
    time.sleep(2.5 * scrape_s)  # the last arrivals' scrape
    telemetry = PrometheusTelemetry(prometheus_url(spec))
    latency = telemetry.window(live_run.started_at + warmup_s, time.time())
    lag = latency.p50_s if math.isfinite(latency.p50_s) else 0.0
    length = live_run.ended_at - live_run.started_at
    consumed = telemetry.scalar(f"increase(pipetune_events_total[{max(round(length), 1)}s])", live_run.ended_at + lag)
    return replace(latency, offered_eps=live_run.offered_eps,
                   throughput_eps=consumed / length if math.isfinite(consumed) else 0.0,
                   events_in=live_run.events, events_out=live_run.report.received,
                   lost_events=live_run.report.lost_events)


def window_verdict(telemetry: PrometheusTelemetry, began: float, start: float, end: float,
                   min_throughput_ratio: float) -> Verdict:
    """The tuning run's verdict on [start, end] of a load that began at `began`, unshifted: the warm-up [began, start]
    is the window before, so a backlog that grew over the window (a queue building before Kafka, which an output
    window shifted by the median latency cannot show) breaks the backlog rule."""
    return judge(telemetry.window(start, end), Policy(min_throughput_ratio=min_throughput_ratio), None,
                 previous=telemetry.window(began, start))


def replay_and_observe(spec: PipelineSpec, schedule: Schedule, warmup_s: float) -> tuple[LiveRun, Observation]:
    """Replay `schedule` through the config in force (just applied) and observe the run."""
    time.sleep(2 * spec.prometheus.scrape_interval_s)  # a restarted component's first scrape
    live_run = replay_and_check(spec, schedule)
    return live_run, observe_run(spec, live_run, spec.prometheus.scrape_interval_s, warmup_s)


def measure_live(spec: PipelineSpec, config: Config, rate_eps: float, duration_s: float, warmup_s: float,
                 seed: int = 0) -> Measurement:
    """Apply `config` to the running testbed, replay a steady `rate_eps` for `duration_s`, measure it."""
    schedule = build_schedule(WorkloadSpec(Profile.steady, rate_eps, duration_s, seed)).schedule
    lifecycle.apply(spec, config)
    _, observation = replay_and_observe(spec, schedule, warmup_s)
    return Measurement(config, rate_eps, observation.p95_s, observation.throughput_eps)


def prime(spec: PipelineSpec, config: Config) -> None:
    """A short unmeasured run: a log new to Filebeat waits for its next scan (10 s by default)."""
    measure_live(spec, config, PRIME_RATE_EPS, PRIME_DURATION_S, 0.0)


class BackgroundLoad:
    """Replays `workload` into node `node`'s log (default: the first node's) from a thread, then steady load
    at its rate, until the `with` block ends.

    `run_ids` names the replay runs written so far; the probe reports on each.
    """

    def __init__(self, spec: PipelineSpec, workload: WorkloadSpec, node: NodeLayout | None = None) -> None:
        self.spec = spec
        self.workload = workload
        self.node = node
        self.schedule = build_schedule(workload).schedule
        self.run_ids: list[str] = []
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._replay, name=f"pipetune-load-{node.name if node else 1}",
                                        daemon=True)

    def _chunk(self, start_s: float) -> Schedule:
        total_s, times_s, seed = self.schedule.duration_s, self.schedule.times_s, self.workload.seed
        if start_s >= total_s:
            return steady(self.workload.rate_eps, CHUNK_S, seed=seed + round(start_s))
        end_s = min(start_s + CHUNK_S, total_s)
        times = times_s[(times_s >= start_s) & (times_s < end_s)] - start_s
        return Schedule(self.schedule.profile, seed, end_s - start_s, times)

    def _replay(self) -> None:
        start_s = 0.0
        try:
            while not self._stop.is_set():
                run_id = new_run_id()
                self.run_ids.append(run_id)
                replay_into(self.spec, self._chunk(start_s), run_id, self.node)
                start_s += CHUNK_S
        except BaseException as err:  # reported when the block ends, not lost in the thread
            self._error = err

    def __enter__(self) -> "BackgroundLoad":
        self._thread.start()
        return self

    def ledger(self) -> dict[str, int]:
        """What the probe's ledger says of every run so far, once each is final: expected, lost, duplicates."""
        grace_s = self.spec.probe.late_after_s + CHUNK_S
        reports = [wait_for_report(self.spec, run_id, grace_s) for run_id in self.run_ids]
        return {"runs": len(reports), "expected": sum(r.expected for r in reports),
                "lost": sum(r.lost_events for r in reports), "duplicates": sum(r.duplicate_events for r in reports),
                "late": sum(r.late_events for r in reports)}

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._error is not None:
            raise TestbedError(f"the background replay failed: {self._error}") from self._error
