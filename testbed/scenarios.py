"""One paper scenario on a running testbed with nginx in front (`pipetune scenarios --pipeline`): its config put in
force through the node agents (`lifecycle.apply`, as bench.live does), the replay's HTTP mode driving nginx at a
rate, and one window read from the testbed's Prometheus as the daemon reads its windows (`PrometheusTelemetry.window`
of the deployment's `LivePipeline`, the latency to the warehouse table when a Spark job ends the pipeline).

After the load the run waits (bounded) until the table holds every request nginx logged, so the next scenario starts
on an empty pipeline; what is still missing then is the run's `behind_end_events`. Whether the backlog before the
table grew over the window is the tuning run's rule (`models.verdict.judge`, the warm-up as the window before).
"""

from __future__ import annotations

import math
import threading
import time
from contextlib import closing
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from controller.telemetry import PrometheusTelemetry
from models.scenario_study import KEEPS_UP, RealRun, ScenarioConfig, compare, median_abs_error, scenario_config
from models.verdict import BreachKind
from replay.engine import Workload, run
from replay.profiles import Profile, WorkloadSpec, build_schedule
from replay.sinks import SinkSpec
from testbed import lifecycle
from testbed.endpoints import deployment, live_pipeline
from testbed.harness import new_run_id, window_verdict
from testbed.pipeline import PipelineSpec
from testbed.prometheus import prometheus_url
from testbed.processes import TestbedError

APPENDED = "pipetune_source_events_total"  # lines the agent saw appended to nginx's log
COMMITTED = "pipetune_warehouse_rows_total"  # rows the Spark job committed to the table
CONSUMED = "pipetune_events_total"  # the probe's, where no Spark job ends the pipeline


@dataclass(frozen=True)
class RealSettings:
    """How long each real run lasts: load, the part of it before the window (Filebeat's restart, Spark's first
    batches), and the longest wait for the table to catch up after the load."""

    rate_eps: float
    duration_s: float
    warmup_s: float
    drain_s: float = 60.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.rate_eps <= 5000:
            raise ValueError(f"rate_eps: {self.rate_eps:g}, allowed (0, 5000] ev/s")
        if not 0 <= self.warmup_s < self.duration_s:
            raise ValueError(f"warmup_s: {self.warmup_s:g}, allowed 0 to duration_s ({self.duration_s:g}) excluded")


def nginx_url(spec: PipelineSpec) -> str:
    """The first node's nginx; a pipeline without nginx in front is a `TestbedError` naming the field."""
    if spec.nginx is None:
        raise TestbedError(f"the pipeline {spec.name!r} has no nginx in front (its file's `nginx:` section): the "
                           f"scenarios drive load through nginx, as the paper's did")
    return f"http://127.0.0.1:{spec.nginx_port(spec.node_layouts()[0])}"


def taken_keys(spec: PipelineSpec) -> set[str]:
    """The keys some component of the running testbed takes, asked of its agents."""
    with closing(live_pipeline(lifecycle.recorded_spec(spec))) as pipeline:
        return set(pipeline.managers())


def run_scenario(spec: PipelineSpec, scenario: ScenarioConfig, settings: RealSettings, rep: int = 0,
                 nginx: str | None = None) -> RealRun:
    """Put `scenario` in force, drive nginx (the pipeline's, or the one at URL `nginx` logging into its log) at the
    rate for the duration, and read the window after the warm-up."""
    spec = lifecycle.recorded_spec(spec)
    url = nginx or nginx_url(spec)
    lifecycle.apply(spec, scenario.config)
    output = COMMITTED if spec.spark is not None else CONSUMED
    schedule = build_schedule(WorkloadSpec(Profile.steady, settings.rate_eps, settings.duration_s,
                                           settings.seed + 1000 * rep, poisson=True)).schedule
    failed: list[BaseException] = []

    def drive() -> None:
        try:
            run(schedule, SinkSpec("http", url), Workload(fmt=spec.log.format), run_id=new_run_id())
        except BaseException as err:  # reported after the window, not lost in the thread
            failed.append(err)

    with closing(live_pipeline(spec)) as pipeline:  # its lag watch samples from here on
        telemetry = pipeline.telemetry
        time.sleep(2 * spec.prometheus.scrape_interval_s)  # a restarted Filebeat's first scrape
        began = time.time()
        appended_0, output_0 = telemetry.scalar(f"sum({APPENDED})", began), telemetry.scalar(f"sum({output})", began)
        load = threading.Thread(target=drive, name="pipetune-scenario-load", daemon=True)
        load.start()
        time.sleep(settings.warmup_s)
        start = time.time()
        load.join(settings.duration_s + 60.0)
        end = time.time()
        if failed or load.is_alive():
            raise TestbedError(f"the load into {url} failed: {failed[0] if failed else 'did not end'}")
        time.sleep(2.5 * spec.prometheus.scrape_interval_s)  # the window's last scrape
        window = telemetry.window(start, end)
        # the tuning run's rule on a growing backlog (the warm-up the window before): a queue building before Kafka,
        # the harvested files' unshipped events (the consumer group's lag has no samples yet in the warm-up)
        files = PrometheusTelemetry(prometheus_url(spec), latency_stage=deployment(spec).latency.stage)
        verdict = window_verdict(files, began, start, end, KEEPS_UP)
        # the output window shifted by the median latency (as testbed.harness.observe_run does): a pipeline that
        # keeps up then shows output = offered, whatever its latency
        lag = min(window.p50_s if math.isfinite(window.p50_s) else 0.0, settings.drain_s)
        time.sleep(max(0.0, end + lag + 2.5 * spec.prometheus.scrape_interval_s - time.time()))
        at = time.time()
        w = f"{max(round(end - start), 1)}s"
        committed = telemetry.scalar(f"sum(increase({output}[{w}]))", end + lag)
        # the table catching up: every line nginx logged since the run began, committed (bounded)
        behind = _behind(telemetry, appended_0, output_0, output, at)
        while behind > 0 and time.time() - at < settings.drain_s:
            time.sleep(1.0)
            behind = _behind(telemetry, appended_0, output_0, output, time.time())
    return RealRun(p95_s=window.p95_s, mean_s=window.mean_s, offered_eps=window.offered_eps,
                   throughput_eps=committed / window.duration_s if math.isfinite(committed) else 0.0,
                   behind_end_events=behind, window_s=window.duration_s,
                   backlog_grew=any(b.kind is BreachKind.BACKLOG for b in verdict.breaches))


def _behind(telemetry, appended_0: float, output_0: float, output: str, at: float) -> int:
    appended = telemetry.scalar(f"sum({APPENDED})", at) - appended_0
    done = telemetry.scalar(f"sum({output})", at) - output_0
    return max(round(appended - done), 0) if math.isfinite(appended) and math.isfinite(done) else -1


def scenario_configs(spec: PipelineSpec, names: list[str]) -> dict[str, ScenarioConfig]:
    """Each named scenario as the running testbed's agents take it."""
    taken = taken_keys(spec)
    return {name: scenario_config(name, taken) for name in names}


def run_study(spec: PipelineSpec, configs: Mapping[str, ScenarioConfig], settings: RealSettings, reps: int,
              say=print, nginx: str | None = None) -> dict[str, list[RealRun]]:
    """Each scenario `reps` times, interleaved (ABC..., then ...CBA) so drift hits all alike."""
    names = list(configs)
    runs: dict[str, list[RealRun]] = {}
    for rep in range(reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            result = run_scenario(spec, configs[name], settings, rep, nginx)
            runs.setdefault(name, []).append(result)
            say(f"  {name} at {settings.rate_eps:g} ev/s, rep {rep + 1}: P95 {result.p95_s:.3f} s, mean "
                f"{result.mean_s:.3f} s, {result.throughput_eps:.0f} of {result.offered_eps:.0f} ev/s into the table, "
                f"{result.behind_end_events} behind after the drain"
                + (", its backlog grew over the window" if result.backlog_grew else ""))
    return runs


def study(spec: PipelineSpec, names: list[str], rates: Sequence[tuple[float, str]], duration_s: float,
          warmup_s: float, reps: int, twin: Callable[[float, dict[str, ScenarioConfig]], Mapping], seed: int = 0,
          say=print, nginx: str | None = None) -> dict:
    """The scenarios at each (rate, kind) — kind "paper" (its 300 ev/s), "chosen" or "collapse" — on the real
    pipeline, each compared with `twin(rate, configs)` (a twin study's summary of the same configs at that rate):
    the `--json` document."""
    configs = scenario_configs(spec, names)
    for config in configs.values():
        say(config.said())
    comparisons = []
    for rate, kind in rates:
        say(f"{kind}: {rate:g} ev/s, {duration_s:g} s of load per run ({warmup_s:g} s warm-up), {reps} rep(s)")
        runs = run_study(spec, configs, RealSettings(rate, duration_s, warmup_s, seed=seed), reps, say, nginx)
        comparisons.append(compare(rate, kind, runs, twin(rate, configs)))
    return {"pipeline": spec.name, "latency": "to the table" if spec.spark is not None else "to Kafka (the probe's)",
            "duration_s": duration_s, "warmup_s": warmup_s, "reps": reps,
            "scenarios": {name: {"applied": c.applied, "skipped": c.skipped,
                                 "moved": {k: list(v) for k, v in c.moved.items()}} for name, c in configs.items()},
            "comparisons": comparisons, "median_abs_twin_p95_error": median_abs_error(comparisons)}
