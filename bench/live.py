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

    python -m bench.live [--pipeline FILE] [--rate 1000] [--tune-minutes 15] [--window 30]
                         [--measure 45] [--rounds 2] [--load replay|none] [--trace FILE]
                         [--out docs/evidence/live]

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
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from rich.console import Console
from rich.table import Table

from bench.result import RESULT_FILE, BenchResult
from controller.agent_changes import changes_for_agent, changes_not_in_audit, owned_params
from controller.state import StateStore
from controller.telemetry import PrometheusTelemetry, TelemetryMissing
from models.policy import Policy
from models.presets import preset
from models.space import PIPELINE_SPACE, Config, RuleError, check_rules
from models.verdict import judge
from replay.profiles import Profile, WorkloadSpec, build_schedule
from testbed import agent, lifecycle
from testbed.endpoints import write_deployment
from testbed.harness import replay_and_observe, wait_for_report
from testbed.pipeline import DEFAULT_PIPELINE, PipelineSpec, load_pipeline
from testbed.prometheus import prometheus_url

console = Console()
MIN_THROUGHPUT_RATIO = 0.95  # autotune's default guardrail
CALIBRATION = "local-filebeat-kafka-fitted"


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

    @property
    def out_in(self) -> float:
        return self.throughput_eps / self.offered_eps if self.offered_eps else math.nan


def tune(pipeline: Path, args: argparse.Namespace, directory: Path, load: list[str]) -> dict:
    """`pipetune autotune` on the live testbed, its live table on this terminal; returns its --json."""
    windows = math.ceil(args.tune_minutes * 60 / args.window)
    out = directory / "tune.json"
    argv = [sys.executable, "-m", "cli", "autotune", "--pipeline", str(pipeline), *load,
            "--rate", str(args.rate), "--windows", str(windows), "--window", str(args.window),
            "--calibration", CALIBRATION, "--seed", str(args.seed), "--state-dir", str(directory / "state"),
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


def start_operator_traffic(spec: PipelineSpec, trace: Path, duration_s: float) -> tuple[subprocess.Popen, str]:
    """An independent `pipetune replay` of `trace`'s arrivals into the harvested log; its manifest goes where
    the probe reads manifests, so the probe reports on it when it ends."""
    run_id = "op" + secrets.token_hex(4)
    manifest = spec.resolved_run_dir() / "manifests" / f"{run_id}.json"
    argv = [sys.executable, "-m", "cli", "replay", "--profile", "trace", "--trace", str(trace),
            "--duration", str(duration_s), "--out", str(spec.log_path()), "--run-id", run_id,
            "--manifest", str(manifest), "--json"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL), run_id


def operator_ledger(spec: PipelineSpec, replay: subprocess.Popen, run_id: str) -> dict[str, int]:
    """Wait for the independent replay to end; what the probe's report of it says."""
    if replay.wait() != 0:
        raise SystemExit(f"the independent replay failed (exit {replay.returncode})")
    report = wait_for_report(spec, run_id, spec.probe.late_after_s + 60)
    return {"runs": 1, "expected": report.expected, "lost": report.lost_events,
            "duplicates": report.duplicate_events, "late": report.late_events}


def behind_windows(spec: PipelineSpec, start: float, end: float, window_s: float) -> list[dict]:
    """Every window of [start, end] (settling after restarts included) with its output over input and P95.
    A window in which Prometheus missed a scrape of the probe or an agent (a restart of the probe to
    change its consumer settings) cannot be judged: it is marked unobserved, and not behind."""
    telemetry = PrometheusTelemetry(prometheus_url(spec))
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
    """Each contender on fresh steady windows, ABCD then DCBA, each after its own warm-up."""
    names = list(contenders)
    rows = []
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            done = lifecycle.apply(spec, contenders[name])
            console.print(f"[dim]round {round_ + 1}: {name} ({done})[/]")
            schedule = build_schedule(WorkloadSpec(Profile.steady, args.rate, args.measure,
                                                   args.seed + 100 + round_)).schedule
            run, observed = replay_and_observe(spec, schedule, args.warmup)
            rows.append(Measured(name, round_ + 1, observed.p95_s, observed.p50_s, observed.offered_eps,
                                 observed.throughput_eps, run.report.lost_events))
            console.print(f"  P95 {observed.p95_s:.4f} s, out/in {rows[-1].out_in:.1%}, lost {run.report.lost_events}")
    return rows


def summarise(rows: list[Measured]) -> dict[str, dict]:
    by_name: dict[str, list[Measured]] = {}
    for row in rows:
        by_name.setdefault(row.name, []).append(row)
    return {name: {"p95_s": _median([r.p95_s for r in rs]), "p95_rounds_s": [r.p95_s for r in rs],
                   "p50_s": _median([r.p50_s for r in rs]), "offered_eps": _median([r.offered_eps for r in rs]),
                   "throughput_eps": _median([r.throughput_eps for r in rs]),
                   "out_in": _median([r.out_in for r in rs]), "lost": sum(r.lost for r in rs)}
            for name, rs in by_name.items()}


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def table(summary: dict[str, dict]) -> Table:
    shown = Table(title="fresh steady windows, same run: P95 end-to-end (median of rounds)")
    for col in ("config", "P95 s", "rounds", "P50 s", "offered ev/s", "out/in", "lost", "defaults / config"):
        shown.add_column(col, justify="left" if col == "config" else "right")
    base = summary["defaults"]["p95_s"]
    for name, m in summary.items():
        shown.add_row(name, f"{m['p95_s']:.4f}", " / ".join(f"{p:.4f}" for p in m["p95_rounds_s"]), f"{m['p50_s']:.4f}",
                      f"{m['offered_eps']:.0f}", f"{m['out_in']:.1%}", str(m["lost"]), f"×{base / m['p95_s']:.1f}")
    return shown


def figures(result: dict) -> dict[str, list[dict]]:
    """The tables docs/results.md shows: the contenders side by side, and the tuning run's checks."""
    summary = result["summary"]
    side_by_side = [{"config": name, "p95_s": m["p95_s"], "p50_s": m["p50_s"], "offered_eps": m["offered_eps"],
                     "throughput_eps": m["throughput_eps"], "lost": m["lost"],
                     "defaults_over_config": summary["defaults"]["p95_s"] / m["p95_s"]} for name, m in summary.items()]
    counted = result["canaries"] or {}
    run = {"tune_minutes": result["tune_s"] / 60, "windows": result["windows"],
           "behind_windows": result["behind_windows"],
           "longest_behind_streak_windows": result["longest_behind_streak_windows"],
           "events_tuning": result["ledger_tuning"]["expected"], "lost_events_tuning": result["lost_events_tuning"],
           "lost_events_side_by_side": result["lost_events_side_by_side"],
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
    bars.bar(names, [summary[n]["p95_s"] for n in names], color=["tab:gray", "tab:orange", "tab:purple", "tab:blue"])
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", type=Path, default=DEFAULT_PIPELINE)
    parser.add_argument("--rate", type=float, default=1000.0, help="steady offered load, events/s")
    parser.add_argument("--tune-minutes", type=float, default=15.0)
    parser.add_argument("--window", type=float, default=30.0, help="tuning window, seconds")
    parser.add_argument("--measure", type=float, default=45.0, help="each side-by-side replay, seconds")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds of each replay the latency ignores")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--load", choices=("replay", "none"), default="replay",
                        help="replay: autotune drives the testbed's replay; none: an independent replay of --trace")
    parser.add_argument("--trace", type=Path, help="--load none: the access log whose arrivals are replayed "
                                                   "(default: one generated at --rate)")
    parser.add_argument("--out", type=Path, default=Path("docs/evidence/live"))
    args = parser.parse_args()
    started = BenchResult.start("bench.live")
    for ok, flag, allowed in ((args.rate > 0, "--rate", "> 0"), (args.tune_minutes > 0, "--tune-minutes", "> 0"),
                              (args.window >= 5, "--window", ">= 5 s"), (args.rounds >= 1, "--rounds", ">= 1"),
                              (0 <= args.warmup < args.measure, "--warmup", "in [0, --measure)")):
        if not ok:
            parser.error(f"{flag} must be {allowed}")
    spec = load_pipeline(args.pipeline)
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
        shutil.rmtree(args.out / "state", ignore_errors=True)  # a kept state dir would resume the last run
        began = time.time()
        if args.load == "replay":
            tuned = tune(args.pipeline, args, args.out, ["--load", "replay", "--profile", "burst"])
            ended = time.time()
        else:
            # Ray's start and restarts' settle windows come on top of the windows: the traffic outlasts them
            # (36 windows of 30 s took 1.7 x their length on a busy machine, and 1.5 x ran out before the end).
            length_s = 2.0 * args.tune_minutes * 60 + 120
            trace = args.trace or write_trace(args.out / "trace.log", args.rate, length_s, args.seed)
            replay, run_id = start_operator_traffic(spec, trace, length_s)
            try:
                tuned = tune(write_deployment(spec, args.pipeline), args, args.out, ["--load", "none"])
            except BaseException:
                replay.terminate()
                raise
            ended = time.time()
            tuned["ledger"] = operator_ledger(spec, replay, run_id)
        with agent.client(spec) as client:
            audit = {name: client.audit(name)[seen[name]:] for name in owned}
        timeline = behind_windows(spec, began, ended, args.window)
        final = PIPELINE_SPACE.config(tuned["final"]["config"])
        contenders = applicable({"defaults": preset("defaults"), "hybrid": preset("hybrid"),
                                 "latency": preset("latency"), "pipetune": final})
        rows = measure_side_by_side(spec, contenders, args)
        counted = canaries(spec, began) if spec.agent.canary_eps else None
    finally:
        if started_here:
            lifecycle.down(spec)
    summary = summarise(rows)
    decisions = StateStore(args.out / "state").decisions()  # as logged, with the wall time of each
    logged = len(changes_for_agent(decisions, owned))
    matched = logged - len(changes_not_in_audit(decisions, audit, owned))
    lost_tuning = tuned["ledger"]["lost"]
    result = {
        "rate_eps": args.rate, "began": began, "tune_s": ended - began, "window_s": args.window, "summary": summary,
        "p95_defaults_over_pipetune": summary["defaults"]["p95_s"] / summary["pipetune"]["p95_s"],
        "longest_behind_streak_windows": longest_streak([row["behind"] for row in timeline]),
        "behind_windows": sum(row["behind"] for row in timeline), "windows": len(timeline),
        "unobserved_windows": sum(row["unobserved"] for row in timeline),
        "lost_events_tuning": lost_tuning, "ledger_tuning": tuned["ledger"],
        "lost_events_side_by_side": sum(m["lost"] for m in summary.values()),
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
    console.print(table(summary))
    equal = abs(summary["pipetune"]["throughput_eps"] / summary["defaults"]["throughput_eps"] - 1) <= 0.05
    checks = [
        (result["p95_defaults_over_pipetune"] >= 10 and equal,
         f"P95 {result['p95_defaults_over_pipetune']:.1f}x lower than defaults (goal >= 10x) at "
         f"{'equal' if equal else 'UNEQUAL'} throughput"),
        (result["longest_behind_streak_windows"] <= 1,
         f"output behind input in {result['behind_windows']} of {result['windows']} windows of the tuning run, "
         f"at most {result['longest_behind_streak_windows']} in a row (goal <= 1; "
         f"{result['unobserved_windows']} not scraped whole)"),
        (lost_tuning == 0 and result["lost_events_side_by_side"] == 0,
         f"events lost: {lost_tuning} of {tuned['ledger']['expected']} while tuning, "
         f"{result['lost_events_side_by_side']} side by side (goal 0)"),
        (logged == matched, f"decision-log changes found in the agent's audit: {matched} of {logged} "
                            f"({result['agent_versions']} versions, {result['agent_rollbacks']} agent rollbacks, "
                            f"{result['agent_held']} held for a hand edit, {result['daemon_rollbacks']} daemon "
                            "rollbacks)"),
    ]
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
