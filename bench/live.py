"""pipetune on the real testbed: a tuning run of 15 minutes or more, then the contenders side by side.

1. `pipetune autotune --pipeline FILE` tunes the running testbed from the component defaults while
   the replay engine offers a steady load with a ×2 burst (1/3-1/2 of the run).
2. Defaults, the paper's Hybrid, Elastic's latency preset and pipetune's final config are measured in
   the same run on fresh steady windows, interleaved (ABCD, then DCBA) so drift hits all alike.
3. The run's checks: P95 against the defaults at equal throughput (goal >= 10x lower); windows of the
   whole tuning run, restarts included, whose output fell behind their input (goal: never two in a row);
   events lost across every change (the probe's ledger; goal 0); every change and rollback the daemon
   logged is a version the node agent decided (its audit log).

With `--load none` autotune drives no load: an independent `pipetune replay --profile trace` writes an
access log's arrival pattern (`--trace FILE`, combined or nginx JSON; by default one generated at
--rate with a slow swell and bursts) into the harvested log, as the operator's own traffic would, and
autotune tunes `<run>/deployment.yaml --load none` on what the agent sees appended. The replay's own
ledger (its manifest, the probe's report) is the truth the events lost are counted against.

A pipeline with nginx in front and a Spark job at the end (`--pipeline` of a file like testbed/paper.yaml) takes its
load as HTTP requests to nginx, whose own access log is what Filebeat harvests: the trace's replay (`--load none`,
the only load such a pipeline takes) sends them, from the tuning run's start to its end, and so do the side-by-side
windows. Latency and throughput are the deployment's stage, `warehouse` (event time -> the micro-batch committed
to the table); events lost and duplicated are the table's ledger against the request_ids nginx logged, over the
whole tuning run and each side-by-side window; the run says how many versions of the Spark job the agent made;
autotune screens with the paper's twin (`SPARK_CALIBRATION`, whose learner tunes the job's trigger); the goal is
P95 >= 5x lower than the paper's Hybrid's at equal throughput. The paper's Zero-Wait is measured beside them: at a
rate where it falls behind, the check is that the tuned config keeps up. The paper's Hybrid sets scan_frequency
10 ms beside the default backoffs, out of Filebeat's order: it is measured with the backoffs it left at their
defaults lowered to its scan frequency (said on the console and in the result), where it used to be left out.

    python -m bench.live [--pipeline FILE] [--rate 1000] [--tune-minutes 15] [--window 30]
                         [--measure 45] [--rounds 2] [--load replay|none] [--trace FILE]
                         [--policy FILE] [--strategy pipetune] [--out docs/evidence/live]

`--strategy NAME` tunes with another strategy than pipetune's learner (random, ovat, optuna-tpe, optuna-gp), its final
config measured side by side under its name: `random` changes the config every window, so a short run on the paper
pipeline with Filebeat's knobs pinned makes a version of the Spark job a window, each checked by the table's ledger.

`--policy FILE` is the operator's policy the tuning run starts with (models.policy.Policy as JSON, what `PUT /policy`
takes: pins, bounds, the parameters tuned): e.g. Filebeat's knobs held where the operator trusts them, so the learner
tunes the Spark job alone.

(on a pipeline with nginx in front, --load none is the default and the only choice)

Starts the testbed when it is not up (and stops it again); writes result.json (bench/result.py), live.png,
the tuning run's tune.json, tune.png and state directory to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from rich import box
from rich.console import Console
from rich.table import Table

from bench.result import RESULT_FILE, BenchResult
from controller.agent_changes import by_component, changes_for_agent, changes_not_in_audit, owned_params
from controller.state import StateStore
from controller.telemetry import PrometheusTelemetry, TelemetryMissing
from models.budget import BudgetLimits, CostReference, CpuBudget, budgeted, within_limits
from models.policy import Policy
from models.observation import Observation
from models.presets import preset, preset_as_taken
from models.space import PIPELINE_SPACE, Config, RuleError, check_rules
from models.strategies import STRATEGIES
from models.verdict import judge
from prometheus_client.parser import text_string_to_metric_families
from replay.arrivals import Schedule
from replay.engine import Workload, run as replay_run
from replay.profiles import Profile, WorkloadSpec, build_schedule
from replay.sinks import SinkSpec
from testbed import agent, lifecycle
from testbed.endpoints import deployment, write_deployment
from testbed.harness import new_run_id, replay_and_observe, wait_for_report, window_verdict
from testbed.pipeline import DEFAULT_PIPELINE, PipelineSpec, load_pipeline, pipeline_file
from testbed.prometheus import prometheus_url
from testbed.spark_sink import Ledger, job_settings, ledger, logged_request_ids, metrics_text

console = Console()
CONTENDER_COLOURS = {"defaults": "tab:gray", "hybrid": "tab:orange", "latency": "tab:purple", "zero-wait": "tab:red"}
MIN_THROUGHPUT_RATIO = 0.95  # autotune's default guardrail
CALIBRATION = "local-filebeat-kafka-fitted"
# A pipeline ending in a Spark job needs a twin with a Spark stage to screen with, whose learner tunes
# `spark.trigger.interval` (models.learning.TUNED_BY_TOPOLOGY): the paper testbed's, its Spark stage fitted here.
SPARK_CALIBRATION = "paper-testbed"
# a static strategy's "final" config is one of the presets measured beside it already
LEARNING_STRATEGIES = tuple(s for s in STRATEGIES if s not in ("defaults", "hybrid", "latency"))
WAREHOUSE_COUNT = "pipetune_e2e_latency_seconds_count"  # the Spark job's events committed, by stage and node
TABLE_WAIT_S = 300.0  # how long the table may take to hold what nginx logged, once the load stopped (a bound)


@dataclass(frozen=True)
class Measured:
    """One contender on one fresh steady window."""

    name: str
    round: int
    p95_s: float
    p50_s: float
    offered_eps: float
    throughput_eps: float
    lost: int
    duplicated: int = 0
    cpu_cores: dict[str, float] = field(default_factory=dict)  # the budgeted components' (`models.budget`)
    behind: bool | None = None  # the tuning run's verdict on the window (`Sent`); None: not judged

    @property
    def out_in(self) -> float:
        return self.throughput_eps / self.offered_eps if self.offered_eps else math.nan


def calibration(spec: PipelineSpec) -> str:
    """The twin autotune screens candidates with: this machine's fitted Filebeat -> Kafka one, or the paper testbed's
    (Filebeat -> Kafka -> Spark, its Spark stage fitted to the testbed) when a Spark job ends the pipeline."""
    return SPARK_CALIBRATION if spec.spark is not None else CALIBRATION


def load_policy(path: Path) -> Policy:
    """The operator's policy in `path` (JSON, as `PUT /policy` takes it), checked against the parameter space: a bad
    one is refused naming the field and what it allows, before anything starts."""
    try:
        policy = Policy.model_validate_json(path.read_text())
        policy.check()
    except (OSError, ValueError) as err:  # pydantic's ValidationError and the space's ParamError are ValueErrors
        raise SystemExit(f"--policy {path}: {err}") from None
    return policy


def start_state(directory: Path, policy: Policy | None) -> None:
    """A fresh state directory for the tuning run (a kept one would resume the last run), holding `policy` where
    autotune resumes a stored policy from: the run starts under it as if the operator had put it before."""
    shutil.rmtree(directory, ignore_errors=True)
    if policy is not None:
        StateStore(directory).save_policy(policy)


def tune(pipeline: Path, args: argparse.Namespace, directory: Path, load: list[str], twin: str = CALIBRATION) -> dict:
    """`pipetune autotune` on the live testbed, screened with calibration `twin`, its live table on this terminal;
    returns its --json."""
    windows = math.ceil(args.tune_minutes * 60 / args.window)
    out = directory / "tune.json"
    argv = [sys.executable, "-m", "cli", "autotune", "--pipeline", str(pipeline), *load,
            "--rate", str(args.rate), "--windows", str(windows), "--window", str(args.window),
            "--calibration", twin, "--seed", str(args.seed), "--strategy", args.strategy,
            "--state-dir", str(directory / "state"),
            "--plot", str(directory / "tune.png"), "--json", str(out)]
    subprocess.run(argv, check=True)
    return json.loads(out.read_text())


def write_trace(path: Path, rate_eps: float, duration_s: float, seed: int) -> Path:
    """A combined-format access log of `duration_s` seconds around `rate_eps`: a slow swell (±40 % over
    5 minutes), a ×2 burst of 20 s every 150 s, Poisson counts per second (whole-second stamps, as nginx's
    and Apache's `time_local` have)."""
    rng = np.random.default_rng(seed)
    start = datetime(2026, 11, 2, 9, 0, 0, tzinfo=timezone.utc).timestamp()
    with open(path, "w") as out:
        for second in range(math.ceil(duration_s)):
            shape = (1 + 0.4 * math.sin(2 * math.pi * second / 300)) * (2.0 if second % 150 < 20 else 1.0)
            stamp = datetime.fromtimestamp(start + second, tz=timezone.utc).strftime("%d/%b/%Y:%H:%M:%S +0000")
            for _ in range(rng.poisson(rate_eps * shape)):
                uri = f"/product/{rng.integers(1, 500)}" if rng.uniform() < 0.7 else "/cart"
                out.write(f'10.0.{rng.integers(0, 255)}.{rng.integers(1, 255)} - - [{stamp}] "GET {uri} HTTP/1.1" '
                          f'200 {rng.integers(200, 5000)} "-" "Mozilla/5.0"\n')
    return path


def nginx_url(spec: PipelineSpec) -> str:
    """The first node's nginx, where a pipeline with nginx in front takes its load."""
    spec = lifecycle.recorded_spec(spec)
    return f"http://127.0.0.1:{spec.nginx_port(spec.node_layouts()[0])}"


def start_operator_traffic(spec: PipelineSpec, trace: Path, duration_s: float) -> tuple[subprocess.Popen, str]:
    """An independent `pipetune replay` of `trace`'s arrivals into the harvested log; its manifest goes where
    the probe reads manifests, so the probe reports on it when it ends. With nginx in front, the arrivals are
    requests to nginx and there is no manifest: nginx logs its own request_id, which the Spark table's ledger
    counts (`table_ledger`)."""
    run_id = "op" + secrets.token_hex(4)
    if spec.nginx is not None:
        sink = ["--http", nginx_url(spec)]
    else:
        sink = ["--out", str(spec.log_path()), "--manifest",
                str(spec.resolved_run_dir() / "manifests" / f"{run_id}.json")]
    argv = [sys.executable, "-m", "cli", "replay", "--profile", "trace", "--trace", str(trace),
            "--duration", str(duration_s), *sink, "--run-id", run_id, "--json"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL), run_id


def operator_ledger(spec: PipelineSpec, replay: subprocess.Popen, run_id: str) -> dict[str, int]:
    """Wait for the independent replay to end; what the probe's report of it says."""
    if replay.wait() != 0:
        raise SystemExit(f"the independent replay failed (exit {replay.returncode})")
    report = wait_for_report(spec, run_id, spec.probe.late_after_s + 60)
    return {"runs": 1, "expected": report.expected, "lost": report.lost_events,
            "duplicates": report.duplicate_events, "late": report.late_events}


def log_size(spec: PipelineSpec) -> int:
    """Where the first node's log ends now: nginx appends each request's line whole, so this is a line boundary."""
    log = lifecycle.recorded_spec(spec).log_path()
    return log.stat().st_size if log.exists() else 0


def ids_between(ids_from_start: list[str], ids_from_end: list[str]) -> list[str]:
    """The request_ids logged between two line boundaries: those read from the first, less those read from the
    second (the same lines' tail)."""
    return ids_from_start[:len(ids_from_start) - len(ids_from_end)]


def counted(table: Ledger, logged: list[str]) -> dict[str, int]:
    """Of `logged` (nginx's request_ids), how many the table misses, how many extra rows the job wrote of one Kafka
    record (duplicates), and how many extra Kafka records Filebeat sent of one request (resent: at-least-once)."""
    check = table.check(logged)
    return {"expected": check.logged, "lost": len(check.missing),
            "duplicates": sum(count - 1 for count in check.duplicated.values()),
            "resent": sum(records - 1 for records in check.resent.values())}


def table_ledger(spec: PipelineSpec, spans: dict[str, tuple[int, int]], timeout_s: float = TABLE_WAIT_S
                 ) -> dict[str, dict[str, int]]:
    """For each named span of nginx's log (byte offsets, line boundaries), what the Spark table misses of the
    requests logged there and holds twice, once it holds them all or after `timeout_s` (a late one counts lost)."""
    log = lifecycle.recorded_spec(spec).log_path()
    logged = {name: ids_between(logged_request_ids(log, start), logged_request_ids(log, end))
              for name, (start, end) in spans.items()}
    wanted = {rid for ids in logged.values() for rid in ids}
    settings = job_settings(spec)
    deadline = time.monotonic() + timeout_s
    while True:
        # a ledger is a query over the whole table, competing with the job's batches for the same cores: seldom;
        # a table of a batch per second for 20 minutes on a loaded machine took over a minute to read: read again
        try:
            table = ledger(settings, timeout_s=max(deadline - time.monotonic(), 60.0))
        except OSError as err:  # a job refusing at once is asked again after the pause, not in a busy loop
            if time.monotonic() > deadline:
                raise SystemExit(f"the Spark table's ledger did not answer within {timeout_s:g} s: {err}") from None
        else:
            if wanted <= table.counts.keys() or time.monotonic() > deadline:
                break
        time.sleep(5.0)
    return {name: counted(table, ids) for name, ids in logged.items()}


def warehouse_count(text: str) -> float:
    """Events the Spark job committed to its table (every node's), from its /metrics text."""
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == WAREHOUSE_COUNT and sample.labels.get("stage") == "warehouse")


@dataclass(frozen=True)
class Sent:
    """One side-by-side window of requests to nginx, as the table saw it."""

    observed: Observation
    span: tuple[int, int]  # the bytes of nginx's log the requests took, for the ledger
    # the daemon's verdict on the window after the warm-up, unshifted: output behind its input, or the backlog grown
    # since the warm-up (a queue building before Kafka, which the shifted throughput above cannot see)
    behind: bool


def send_and_observe(spec: PipelineSpec, schedule: Schedule, warmup_s: float) -> Sent:
    """`schedule` as requests to nginx, then the warehouse stage once the table committed as many events as nginx
    logged (or after `TABLE_WAIT_S`): P95 of the events sent after the warm-up; throughput the events committed
    over the replay's length, the window shifted by the median latency (as `testbed.harness.observe_run` shifts
    the probe's: a pipeline that keeps up shows output = offered, whatever its latency); and whether the window fell
    behind, judged as the tuning run judges its windows."""
    scrape_s = spec.prometheus.scrape_interval_s
    time.sleep(2 * scrape_s)  # a restarted component's first scrape
    settings = job_settings(spec)
    before, start = warehouse_count(metrics_text(settings)), log_size(spec)
    result = replay_run(schedule, SinkSpec("http", nginx_url(spec)), Workload(fmt=spec.log.format),
                        run_id=new_run_id())
    end = log_size(spec)
    ended_at = result.started_at + result.duration_s
    logged = len(ids_between(logged_request_ids(spec.log_path(), start), logged_request_ids(spec.log_path(), end)))
    deadline = time.monotonic() + TABLE_WAIT_S
    while warehouse_count(metrics_text(settings)) - before < logged and time.monotonic() < deadline:
        time.sleep(1.0)
    time.sleep(2.5 * scrape_s)  # the last commits' scrape
    telemetry = PrometheusTelemetry(prometheus_url(spec), latency_stage="warehouse")
    latency = telemetry.window(result.started_at + warmup_s, time.time())
    lag = latency.p50_s if math.isfinite(latency.p50_s) else 0.0
    length = ended_at - result.started_at
    # the counter's two readings, not increase(): its extrapolation to the window's edges counts a micro-batch's
    # hundreds of commits as if they had been spread over the scrape interval (out/in read 109 % here)
    count = f'sum({WAREHOUSE_COUNT}{{stage="warehouse"}})'
    committed = telemetry.scalar(count, min(ended_at + lag, time.time())) - telemetry.scalar(
        count, result.started_at + lag)
    observed = replace(latency, offered_eps=schedule.events / schedule.duration_s,
                       throughput_eps=committed / length if math.isfinite(committed) else 0.0,
                       events_in=result.events, events_out=round(committed) if math.isfinite(committed) else 0)
    verdict = window_verdict(telemetry, result.started_at, result.started_at + warmup_s, ended_at, MIN_THROUGHPUT_RATIO)
    return Sent(observed, (start, end), verdict.behind)


def spark_components(owned: dict[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    """The agent's components that hold a Spark job's settings (kind spark-query: its `spark.*` parameters)."""
    return {name: params for name, params in owned.items() if any(p.startswith("spark.") for p in params)}


def spark_changes(decisions: list[dict], audit: dict[str, list[dict]], owned: dict[str, frozenset[str]]
                  ) -> dict[str, int]:
    """How often the run changed the Spark job: the daemon's logged changes touching it (rollbacks included) and the
    versions the agent started of it (each a stop at a batch boundary and a restart from the checkpoint)."""
    spark = spark_components(owned)
    return {"logged": sum(bool(by_component({n: to for n, (_, to) in d["change"].items()}, spark))
                          for d in decisions if d["change"]),
            "versions": sum(entry["event"] == "change_started" for name in spark for entry in audit.get(name, []))}


def in_components_order(name: str) -> tuple[Config, dict[str, list]]:
    """Preset `name` as an agent takes it (`preset_as_taken`: where it breaks a component's rule with values it does
    not set, as the paper's Hybrid's 10 ms scan_frequency beside the default backoffs does, those are lowered into
    order); with the changes made, `{param: [preset's, measured]}` (none for a preset in order)."""
    config, moved = preset_as_taken(name)
    return config, {k: [a, b] for k, (a, b) in moved.items()}


def behind_windows(spec: PipelineSpec, start: float, end: float, window_s: float) -> list[dict]:
    """Every window of [start, end] (settling after restarts included) with its output over input and P95.
    A window in which Prometheus missed a scrape of the probe or an agent (a restart of the probe to
    change its consumer settings) cannot be judged: it is marked unobserved, and not behind."""
    # the deployment's stage: to the Spark table when a Spark job ends the pipeline
    telemetry = PrometheusTelemetry(prometheus_url(spec), latency_stage=deployment(spec).latency.stage)
    rows = []
    t = start
    while t + window_s <= end:
        try:
            o = telemetry.window(t, t + window_s)
            rows.append({"t_s": t - start, "out_in": o.throughput_ratio, "p95_s": o.p95_s, "unobserved": False,
                         "behind": not judge(o, Policy(min_throughput_ratio=MIN_THROUGHPUT_RATIO), None).ok})
        except TelemetryMissing:
            rows.append({"t_s": t - start, "out_in": math.nan, "p95_s": math.nan, "unobserved": True,
                         "behind": False})
        t += window_s
    return rows


def longest_streak(flags: list[bool]) -> int:
    longest = current = 0
    for flag in flags:
        current = current + 1 if flag else 0
        longest = max(longest, current)
    return longest


def applicable(contenders: dict[str, Config]) -> dict[str, Config]:
    """The contenders an agent takes: one out of the order a component's reference requires (the paper's Hybrid
    sets scan_frequency 10 ms beside the default max_backoff of 10 s) is refused with a 422, so it is left out,
    and the console says why."""
    kept = {}
    for name, config in contenders.items():
        try:
            check_rules(config)
        except RuleError as err:
            console.print(f"[yellow]{name} left out: the agent refuses it ({err})[/]")
            continue
        kept[name] = config
    return kept


def measure_side_by_side(spec: PipelineSpec, contenders: dict[str, Config], args: argparse.Namespace) -> list[Measured]:
    """Each contender on fresh steady windows, ABCD then DCBA, each after its own warm-up. With nginx in front,
    requests to nginx measured at the warehouse, each window's events lost and duplicated from the table's ledger
    once every window is done."""
    names = list(contenders)
    rows = []
    spans: list[tuple[int, int]] = []
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            done = lifecycle.apply(spec, contenders[name])
            console.print(f"[dim]round {round_ + 1}: {name} ({done})[/]")
            schedule = build_schedule(WorkloadSpec(Profile.steady, args.rate, args.measure,
                                                   args.seed + 100 + round_)).schedule
            behind = None
            if spec.nginx is not None:
                sent = send_and_observe(spec, schedule, args.warmup)
                observed, behind = sent.observed, sent.behind
                spans.append(sent.span)
                lost = 0  # counted from the table's ledger below
            else:
                run, observed = replay_and_observe(spec, schedule, args.warmup)
                lost = run.report.lost_events
            rows.append(Measured(name, round_ + 1, observed.p95_s, observed.p50_s, observed.offered_eps,
                                 observed.throughput_eps, lost, cpu_cores=budgeted(observed.cpu_cores),
                                 behind=behind))
            console.print(f"  P95 {observed.p95_s:.4f} s, out/in {rows[-1].out_in:.1%}"
                          + (" [red]behind[/]" if behind else "")
                          + ("" if spans else f", lost {lost}")
                          + "".join(f", {part} {cores:.3f} cores" for part, cores in rows[-1].cpu_cores.items()))
    if spans:
        ledgers = table_ledger(spec, {str(i): span for i, span in enumerate(spans)})
        rows = [replace(row, lost=ledgers[str(i)]["lost"], duplicated=ledgers[str(i)]["duplicates"])
                for i, row in enumerate(rows)]
    return rows


def summarise(rows: list[Measured]) -> dict[str, dict]:
    by_name: dict[str, list[Measured]] = {}
    for row in rows:
        by_name.setdefault(row.name, []).append(row)
    return {name: {"p95_s": _median([r.p95_s for r in rs]), "p95_rounds_s": [r.p95_s for r in rs],
                   "p50_s": _median([r.p50_s for r in rs]), "offered_eps": _median([r.offered_eps for r in rs]),
                   "throughput_eps": _median([r.throughput_eps for r in rs]),
                   "out_in": _median([r.out_in for r in rs]), "lost": sum(r.lost for r in rs),
                   "duplicated": sum(r.duplicated for r in rs),
                   "behind_rounds": sum(bool(r.behind) for r in rs),
                   "cpu_cores": {part: _median([r.cpu_cores[part] for r in rs])
                                 for part in set.intersection(*(set(r.cpu_cores) for r in rs))}}
            for name, rs in by_name.items()}


def budget_figures(rows: list[Measured], summary: dict[str, dict], budget: CpuBudget | None,
                   tuned: str = "pipetune") -> dict | None:
    """The tuned config's CPU (the row `tuned`) on each of its fresh windows against the CPU budget it tuned under,
    set as the tuning run sets it but by the defaults measured side by side (`summarise`: their median CPU at their
    median load): the same yardstick in the same run. None without a budget or a CPU reading of the defaults."""
    defaults = summary.get("defaults", {})
    if budget is None or not defaults.get("cpu_cores"):
        return None
    reference = CostReference(defaults["offered_eps"], defaults["cpu_cores"], len(defaults["p95_rounds_s"]))
    windows = [{"round": r.round, "offered_eps": r.offered_eps, "cpu_cores": r.cpu_cores,
                "limits_cores": BudgetLimits(budget, None, reference).at(r.offered_eps)}
               for r in rows if r.name == tuned]
    return {"budget": budget.model_dump(mode="json"), "reference_eps": reference.offered_eps,
            "reference_cores": dict(reference.costs), "windows": windows,
            "within": sum(within_limits(w["cpu_cores"], w["limits_cores"]) for w in windows)}


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def table(summary: dict[str, dict], reference: str = "defaults", stage: str = "e2e") -> Table:
    """The side by side in 80 columns: each contender's P95 (the median of its rounds, and their range), P50,
    load, out/in, events lost, Filebeat's CPU and the reference's P95 over its own."""
    shown = Table(title=f"fresh steady windows, same run: P95 at stage {stage}", box=box.SIMPLE_HEAD, show_edge=False,
                  padding=(0, 0, 0, 1))
    for col in ("config", "P95 s", "rounds' P95 s", "P50 s", "ev/s", "out/in", "lost\n(+dup)", "Filebeat\ncores",
                f"{reference}\n/ config"):
        shown.add_column(col, justify="left" if col == "config" else "right", no_wrap=True)
    base = summary[reference]["p95_s"] if reference in summary else math.nan
    for name, m in summary.items():
        lost = f"{m['lost']}" + (f" (+{m['duplicated']})" if m.get("duplicated") else "")
        rounds = m["p95_rounds_s"]
        shown.add_row(name, f"{m['p95_s']:.3g}", f"{min(rounds):.3g}-{max(rounds):.3g}", f"{m['p50_s']:.3g}",
                      f"{m['offered_eps']:.0f}", f"{m['out_in']:.1%}", lost,
                      f"{m['cpu_cores']['filebeat']:.3f}" if "filebeat" in m.get("cpu_cores", {}) else "-",
                      f"×{base / m['p95_s']:.1f}")
    return shown


def run_checks(result: dict) -> list[tuple[bool, str]]:
    """The run's checks, each met or not with its line: P95 against the reference (the defaults; the paper's Hybrid
    on a pipeline ending in Spark) at equal throughput, windows behind, events lost (and, counted from the Spark
    table, duplicated, across at least 10 changes of the Spark job), the decision log against the agent's audit."""
    summary, reference, goal = result["summary"], result["reference"], result["goal_reference_over_pipetune"]
    if reference in summary:
        equal = abs(summary[result["tuned"]]["throughput_eps"] / summary[reference]["throughput_eps"] - 1) <= 0.05
        ratio = result["p95_reference_over_pipetune"]
        checks = [(ratio >= goal and equal, f"P95 {ratio:.1f}x lower than {reference} (goal >= {goal:g}x) at "
                                            f"{'equal' if equal else 'UNEQUAL'} throughput")]
    else:
        checks = [(False, f"P95 against {reference}: not measured (the agent refused it)")]
    ledger = result["ledger_tuning"]
    checks.append((result["longest_behind_streak_windows"] <= 1,
                   f"output behind input in {result['behind_windows']} of {result['windows']} windows of the tuning "
                   f"run, at most {result['longest_behind_streak_windows']} in a row (goal <= 1; "
                   f"{result['unobserved_windows']} not scraped whole)"))
    spark = result.get("spark_changes")
    if spark is None:
        checks.append((ledger["lost"] == 0 and result["lost_events_side_by_side"] == 0,
                       f"events lost: {ledger['lost']} of {ledger['expected']} while tuning, "
                       f"{result['lost_events_side_by_side']} side by side (goal 0)"))
    else:
        exact = ledger["lost"] == 0 and ledger["duplicates"] == 0
        checks.append((exact and spark["versions"] >= 10,
                       f"the Spark table against nginx's log across the tuning run: {ledger['lost']} lost and "
                       f"{ledger['duplicates']} duplicated by the job of {ledger['expected']}, across "
                       f"{spark['versions']} versions of the Spark job ({spark['logged']} logged changes touching it) "
                       f"(goal 0 and 0 across >= 10); {ledger.get('resent', 0)} more in Kafka twice (Filebeat resent "
                       f"them across its restarts: at-least-once)"))
        checks.append((result["lost_events_side_by_side"] == 0 and result["duplicated_events_side_by_side"] == 0,
                       f"side by side: {result['lost_events_side_by_side']} lost, "
                       f"{result['duplicated_events_side_by_side']} duplicated in the table; the whole bench "
                       f"made {result['spark_versions_whole_bench']} versions of the Spark job (goal 0 and 0)"))
    collapse = zero_wait_collapse(summary, result["tuned"])
    if collapse is not None:
        checks.append(collapse)
    budget = result.get("cpu_budget")
    if budget is not None:
        used = "; ".join(", ".join(f"{part} {cores:.3f} of {w['limits_cores'][part]:.3f}"
                                   for part, cores in w["cpu_cores"].items() if part in w["limits_cores"])
                         for w in budget["windows"])
        checks.append((budget["within"] == len(budget["windows"]) > 0,
                       f"{result['tuned']}'s CPU within the budget it tuned under in {budget['within']} of "
                       f"{len(budget['windows'])} fresh windows, set by the defaults' side by side (cores: {used})"))
    logged, matched = result["changes_logged"], result["changes_in_agent_audit"]
    checks.append((logged == matched, f"decision-log changes found in the agent's audit: {matched} of {logged} "
                                      f"({result['agent_versions']} versions, {result['agent_rollbacks']} agent "
                                      f"rollbacks, {result['agent_held']} held for a hand edit, "
                                      f"{result['daemon_rollbacks']} daemon rollbacks)"))
    return checks


def zero_wait_collapse(summary: dict[str, dict], tuned: str) -> tuple[bool, str] | None:
    """Where the paper's Zero-Wait, measured side by side, falls behind its load in any round (the tuning run's
    verdict: output behind input or a growing backlog), does the tuned config keep up in every round? None where
    Zero-Wait was not measured or kept up: not a rate it collapses at."""
    zero_wait, final = summary.get("zero-wait"), summary.get(tuned)
    if zero_wait is None or final is None or not zero_wait["behind_rounds"]:
        return None
    ok = final["behind_rounds"] == 0
    rounds = len(zero_wait["p95_rounds_s"])
    return ok, (f"at {zero_wait['offered_eps']:.0f} ev/s the paper's Zero-Wait falls behind in "
                f"{zero_wait['behind_rounds']} of {rounds} rounds (P95 {zero_wait['p95_s']:.3g} s); {tuned} "
                f"{'keeps up' if ok else 'falls behind too'} (behind in {final['behind_rounds']} of "
                f"{len(final['p95_rounds_s'])}, P95 {final['p95_s']:.3g} s) (goal: keeps up)")


def figures(result: dict) -> dict[str, list[dict]]:
    """The tables docs/results.md shows: the contenders side by side, and the tuning run's checks."""
    summary = result["summary"]
    side_by_side = [{"config": name, "p95_s": m["p95_s"], "p50_s": m["p50_s"], "offered_eps": m["offered_eps"],
                     "throughput_eps": m["throughput_eps"], "lost": m["lost"], "duplicated": m.get("duplicated", 0),
                     "filebeat_cores": m.get("cpu_cores", {}).get("filebeat"), "behind_rounds": m.get("behind_rounds"),
                     "defaults_over_config": summary["defaults"]["p95_s"] / m["p95_s"]} for name, m in summary.items()]
    counted = result["canaries"] or {}
    run = {"tune_minutes": result["tune_s"] / 60, "windows": result["windows"],
           "behind_windows": result["behind_windows"],
           "longest_behind_streak_windows": result["longest_behind_streak_windows"],
           "events_tuning": result["ledger_tuning"]["expected"], "lost_events_tuning": result["lost_events_tuning"],
           "duplicated_events_tuning": result["ledger_tuning"].get("duplicates"),
           "resent_events_tuning": result["ledger_tuning"].get("resent"),
           "spark_versions": (result.get("spark_changes") or {}).get("versions"),
           "spark_changes_logged": (result.get("spark_changes") or {}).get("logged"),
           "lost_events_side_by_side": result["lost_events_side_by_side"],
           "duplicated_events_side_by_side": result.get("duplicated_events_side_by_side"),
           "changes_logged": result["changes_logged"], "changes_in_agent_audit": result["changes_in_agent_audit"],
           "daemon_rollbacks": result["daemon_rollbacks"], "agent_rollbacks": result["agent_rollbacks"],
           "agent_held": result["agent_held"], "canaries_lost": sum(n["lost"] for n in counted.values()) if counted else None}
    return {"fresh steady windows side by side (median of the rounds)": side_by_side, "the tuning run": [run]}


def plot(decisions: list[dict], began: float, rate_eps: float, timeline: list[dict], summary: dict[str, dict],
         path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (run_ax, bars) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [2.2, 1]})
    t = [row["t_s"] / 60 for row in timeline]
    run_ax.plot(t, [row["p95_s"] for row in timeline], "o-", ms=3, label="P95 per window (all windows)")
    behind = [row for row in timeline if row["behind"]]
    run_ax.plot([r["t_s"] / 60 for r in behind], [r["p95_s"] for r in behind], "x", color="tab:red", ms=7,
                label="output behind input")
    for d in decisions:
        if d["change"]:
            color = "tab:red" if d["action"] == "rollback" else "tab:green"
            run_ax.axvline((d["wall_time"] - began) / 60, color=color, alpha=0.3, lw=1)
    burst = [d for d in decisions if d["observed"]["offered_eps"] > 1.25 * rate_eps]
    for i, d in enumerate(burst):  # the windows that measured the burst: the load as offered, not as planned
        end = (d["wall_time"] - d["pause_s"] - began) / 60
        run_ax.axvspan(end - d["observed"]["duration_s"] / 60, end, color="tab:orange", alpha=0.15, lw=0,
                       label=f"windows offered > {1.25 * rate_eps:.0f} ev/s (bursts)" if i == 0 else None)
    run_ax.set_yscale("log")
    run_ax.set_xlabel("minutes into the tuning run")
    run_ax.set_ylabel("P95 end-to-end (s)")
    run_ax.set_title("tuning the live testbed (green: changes, red: rollbacks)")
    run_ax.legend(fontsize=8)
    names = list(summary)
    bars.bar(names, [summary[n]["p95_s"] for n in names], color=[CONTENDER_COLOURS.get(n, "tab:blue") for n in names])
    for i, name in enumerate(names):
        bars.plot([i] * len(summary[name]["p95_rounds_s"]), summary[name]["p95_rounds_s"], "k.", ms=6)
    bars.set_yscale("log")
    bars.set_ylabel("P95 end-to-end (s), fresh windows")
    bars.set_title("side by side, same run")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def canaries(spec: PipelineSpec, since_s: float) -> dict[str, dict[str, float]]:
    """The probe's canaries per node since `since_s`: received and lost (a sequence gap past its grace),
    across the probe's restarts (each restart starts its counters again)."""
    telemetry = PrometheusTelemetry(prometheus_url(spec))
    at = time.time()
    span = f"{max(round(at - since_s), 1)}s"
    received = telemetry.by_label(f"sum by (node) (increase(pipetune_canary_received_total[{span}]))", "node", at)
    lost = telemetry.by_label(f"sum by (node) (increase(pipetune_canary_lost_total[{span}]))", "node", at)
    return {node: {"received": round(received.get(node, 0.0)), "lost": round(lost.get(node, 0.0))}
            for node in received}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", type=Path, default=DEFAULT_PIPELINE)
    parser.add_argument("--rate", type=float, default=1000.0, help="steady offered load, events/s")
    parser.add_argument("--tune-minutes", type=float, default=15.0)
    parser.add_argument("--window", type=float, default=30.0, help="tuning window, seconds")
    parser.add_argument("--measure", type=float, default=45.0, help="each side-by-side replay, seconds")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds of each replay the latency ignores")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--load", choices=("replay", "none"),
                        help="replay: autotune drives the testbed's replay (the default); none: an independent replay "
                             "of --trace (the only load, and the default, of a pipeline with nginx in front)")
    parser.add_argument("--trace", type=Path, help="--load none: the access log whose arrivals are replayed "
                                                   "(default: one generated at --rate)")
    parser.add_argument("--calibration", help=f"the twin autotune screens with (default: {CALIBRATION}; "
                                              f"{SPARK_CALIBRATION} when a Spark job ends the pipeline)")
    parser.add_argument("--policy", type=Path, help="the operator's policy the tuning run starts with (JSON, as PUT "
                                                   "/policy takes it: pins, bounds, tuned)")
    parser.add_argument("--strategy", choices=LEARNING_STRATEGIES, default="pipetune",
                        help="the tuning run's strategy, its final config measured side by side under its name "
                             "(random changes the config every window: the table's ledger across many changes)")
    parser.add_argument("--out", type=Path, default=Path("docs/evidence/live"))
    args = parser.parse_args(argv)
    started = BenchResult.start("bench.live", argv)
    for ok, flag, allowed in ((args.rate > 0, "--rate", "> 0"), (args.tune_minutes > 0, "--tune-minutes", "> 0"),
                              (args.window >= 5, "--window", ">= 5 s"), (args.rounds >= 1, "--rounds", ">= 1"),
                              (0 <= args.warmup < args.measure, "--warmup", "in [0, --measure)")):
        if not ok:
            parser.error(f"{flag} must be {allowed}")
    policy = load_policy(args.policy) if args.policy else None
    spec = load_pipeline(args.pipeline)
    if spec.nginx is not None and args.load == "replay":
        parser.error("--load replay: autotune's replay writes the harvested log itself, past nginx; a pipeline with "
                     "nginx in front takes its load as requests to nginx: --load none")
    args.load = args.load or ("none" if spec.nginx is not None else "replay")
    args.calibration = args.calibration or calibration(spec)
    args.out.mkdir(parents=True, exist_ok=True)
    started_here = not lifecycle.running(spec)
    if started_here:
        console.print(f"[dim]starting the testbed {spec.name!r} on the component defaults[/]")
        lifecycle.up(spec, PIPELINE_SPACE.defaults())
    try:
        lifecycle.apply(spec, PIPELINE_SPACE.defaults())
        with agent.client(spec) as client:
            owned = owned_params(client.components())
            seen = {name: len(client.audit(name)) for name in owned}
        start_state(args.out / "state", policy)
        if policy is not None:
            console.print(f"[dim]the operator's policy: tuned {policy.tuned or 'the pipeline default'}, pins "
                          f"{policy.pins or 'none'}, bounds {policy.bounds or 'none'}[/]")
        began = time.time()
        if args.load == "replay":
            tuned = tune(args.pipeline, args, args.out, ["--load", "replay", "--profile", "burst"], args.calibration)
            ended = time.time()
        else:
            # Ray's start and restarts' settle windows come on top of the windows: the traffic outlasts them
            # (36 windows of 30 s took 1.7 x their length on a busy machine, and 1.5 x ran out before the end).
            length_s = 2.0 * args.tune_minutes * 60 + 120
            trace = args.trace or write_trace(args.out / "trace.log", args.rate, length_s, args.seed)
            from_byte = log_size(spec)
            replay, run_id = start_operator_traffic(spec, trace, length_s)
            try:
                tuned = tune(write_deployment(spec, pipeline_file(args.pipeline)), args, args.out, ["--load", "none"],
                             args.calibration)
            except BaseException:
                replay.terminate()
                raise
            ended = time.time()
            if spec.nginx is None:
                tuned["ledger"] = operator_ledger(spec, replay, run_id)
            else:  # the requests stop with the tuning run; the table's ledger counts every one nginx logged
                replay.terminate()
                replay.wait()
                tuned["ledger"] = {"runs": 1, "late": 0, "source": "the Spark table's ledger against nginx's log",
                                   **table_ledger(spec, {"tuning": (from_byte, log_size(spec))})["tuning"]}
        with agent.client(spec) as client:
            audit = {name: client.audit(name)[seen[name]:] for name in owned}
        timeline = behind_windows(spec, began, ended, args.window)
        final = PIPELINE_SPACE.config(tuned["final"]["config"])
        hybrid, reordered = in_components_order("hybrid")
        if reordered:
            console.print("[yellow]hybrid: out of Filebeat's order with the values it does not set; measured with "
                          + ", ".join(f"{k} {a} → {b}" for k, (a, b) in reordered.items()) + "[/]")
        # on the paper's pipeline, its Zero-Wait too: the scenario that collapses first as the load grows
        paper = {"zero-wait": preset("zero-wait")} if spec.spark is not None else {}
        contenders = applicable({"defaults": preset("defaults"), "hybrid": hybrid, "latency": preset("latency"),
                                 **paper, args.strategy: final})
        rows = measure_side_by_side(spec, contenders, args)
        with agent.client(spec) as client:  # the side by side's changes of the job too: the table stayed exact?
            whole = {name: client.audit(name)[seen[name]:] for name in spark_components(owned)}
        counted = canaries(spec, began) if spec.agent.canary_eps else None
    finally:
        if started_here:
            lifecycle.down(spec)
    summary = summarise(rows)
    decisions = StateStore(args.out / "state").decisions()  # as logged, with the wall time of each
    logged = len(changes_for_agent(decisions, owned))
    matched = logged - len(changes_not_in_audit(decisions, audit, owned))
    lost_tuning = tuned["ledger"]["lost"]
    reference, goal = ("hybrid", 5.0) if spec.spark is not None else ("defaults", 10.0)
    result = {
        "rate_eps": args.rate, "began": began, "tune_s": ended - began, "window_s": args.window, "summary": summary,
        "tuned": args.strategy,  # the row of the tuning run's final config; the ratios below are of it
        "p95_defaults_over_pipetune": summary["defaults"]["p95_s"] / summary[args.strategy]["p95_s"],
        "longest_behind_streak_windows": longest_streak([row["behind"] for row in timeline]),
        "behind_windows": sum(row["behind"] for row in timeline), "windows": len(timeline),
        "unobserved_windows": sum(row["unobserved"] for row in timeline),
        "lost_events_tuning": lost_tuning, "ledger_tuning": tuned["ledger"],
        "lost_events_side_by_side": sum(m["lost"] for m in summary.values()),
        "duplicated_events_side_by_side": sum(m["duplicated"] for m in summary.values()),
        "latency_stage": deployment(spec).latency.stage, "calibration": args.calibration, "hybrid_reordered": reordered,
        "policy": policy.model_dump(mode="json") if policy is not None else None,
        "cpu_budget": budget_figures(rows, summary, (policy or Policy()).cpu_budget, args.strategy),
        "reference": reference, "goal_reference_over_pipetune": goal,
        "p95_reference_over_pipetune": (summary[reference]["p95_s"] / summary[args.strategy]["p95_s"]
                                        if reference in summary else math.nan),
        "spark_changes": spark_changes(decisions, audit, owned) if spec.spark is not None else None,
        "spark_versions_whole_bench": sum(e["event"] == "change_started" for es in whole.values() for e in es),
        "changes_logged": logged, "changes_in_agent_audit": matched,
        "agent_versions": sum(entry["event"] == "change_started" for entries in audit.values() for entry in entries),
        "agent_rollbacks": sum(entry["event"] == "rolled_back" for entries in audit.values() for entry in entries),
        # a write the agent refused because a tuned key was changed by hand: the operator's edit kept
        "agent_held": sum(entry["event"] == "held" for entries in audit.values() for entry in entries),
        "daemon_rollbacks": tuned["rollbacks"], "final_config": dict(final),
        "final_vs_defaults": {k: [a, b] for k, (a, b) in preset("defaults").diff(final).items()},
        "timeline": timeline, "measurements": [vars(r) for r in rows], "agent_audit": audit, "canaries": counted,
    }
    started.finish(figures(result), result).write(args.out / RESULT_FILE)
    plot(decisions, began, args.rate, timeline, summary, args.out / "live.png")
    console.print(table(summary, reference, result["latency_stage"]))
    checks = run_checks(result)
    if "zero-wait" in summary and zero_wait_collapse(summary, args.strategy) is None:
        console.print(f"the paper's Zero-Wait keeps up at {args.rate:g} ev/s: not a rate where it collapses (no check)")
    if counted is None:
        console.print("canaries: none written (the pipeline file's agent.canary_eps is not set)")
    else:
        received, lost = (sum(n[k] for n in counted.values()) for k in ("received", "lost"))
        checks.append((lost == 0 and received > 0, f"canaries lost: {lost} of {received + lost} (goal 0)"))
    for ok, text in checks:
        console.print(("[green]met[/]    " if ok else "[red]missed[/] ") + text)
    console.print(f"tuned for {result['tune_s'] / 60:.1f} min; final config vs defaults: "
                  + ", ".join(f"{k} {a} → {b}" for k, (a, b) in result["final_vs_defaults"].items()))
    console.print(f"{args.out / RESULT_FILE}, {args.out / 'live.png'}")


if __name__ == "__main__":
    main()
