"""Does pipetune converge and then leave the pipeline alone? The figures of converge-and-stay, on the twin.

Run: `python -m bench.convergence [--calibrations paper-2vcpu,local-filebeat-kafka] [--profiles steady,diurnal]
[--windows 100] [--moving-windows 60] [--seed 0] [--seeds 1] [--json PATH] [--trace]`; `--json` writes a
`BenchResult` with a row per case and seed, and several seeds end with a table across them. `--profiles` takes
any generated profile (steady, burst, flash, diurnal, mmpp).

For each calibration, the daemon drives pipetune (pre-screening on a misjudged twin, as `bench.tuners`
does) for `--windows` windows of steady load, and for `--moving-windows` windows of each moving load (a
diurnal one's cycle spans the run). Printed: the window where the window P95 first came within 1.2× of the
final config's P95 (measured on fresh windows; issue 38's rule), the config changes after it and their rate
per 100 windows, the final P95, the window the learner first said "converged"; for a moving load, every
change with the load it saw and its cause: the
initial search, or a search re-opened (by a load move beyond the daemon's re-measure threshold, a breach,
a drift of the incumbent's P95, a policy change). `--trace` also prints every window: load, P95, action, why.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Callable

from rich import box
from rich.console import Console
from rich.table import Table

from bench.result import BenchResult
from bench.tuners import misjudged
from controller.daemon import Daemon
from controller.fresh_windows import measure_fresh
from controller.state import Decision
from controller.tuning_run import LearnerSetup, tuning_learner, twin_pipeline
from models.policy import Policy
from models.presets import preset
from models.twin import Calibration, load
from replay.profiles import GENERATED_NAMES, Profile, WorkloadSpec

console = Console(width=80)  # readable in 80 columns, piped or not
NEAR = 1.2  # a window within this × the final P95 is near it; changes after the first such one are counted


def drive(cal: Calibration, workload: WorkloadSpec, windows: int, window_s: float, seed: int,
          on_decision: Callable[[Decision], None] | None = None) -> dict:
    """One daemon run of pipetune on the twin; returns its decisions, the final incumbent and its fresh P95.
    `on_decision` is called with each decision as it is made."""
    policy, start = Policy(), preset("defaults")
    setup = LearnerSetup("pipetune", policy, start, cal.topology, seed, screen=misjudged(cal, seed))
    pipeline = twin_pipeline(start, cal, workload, windows, window_s)
    daemon = Daemon(pipeline, tuning_learner(setup, remote=False), policy, window_s=window_s)
    decisions: list[Decision] = []

    def record(decision: Decision) -> None:
        decisions.append(decision)
        if on_decision is not None:
            on_decision(decision)
    daemon.run(windows, on_decision=record)
    final = daemon.incumbent.config if daemon.incumbent else pipeline.current()
    fresh = measure_fresh(final, cal, workload.rate_eps, window_s, seed=seed + 1000)
    return {"decisions": decisions, "final": final, "final_p95_s": fresh.p95_s}


def convergence(decisions: list[Decision], final_p95_s: float) -> dict:
    """When the window P95 first came within `NEAR` × the final P95, the changes after that window (and per 100
    windows after it), when the learner
    first said it converged and the changes after that (under a moving load, the ones its re-opened searches made)."""
    p95 = [d.observed["p95_s"] for d in decisions]
    changed = [bool(d.change) for d in decisions]
    near = next((i for i, p in enumerate(p95) if p <= NEAR * final_p95_s), None)
    after = sum(changed[near + 1:]) if near is not None else None
    converged = next((i for i, d in enumerate(decisions) if d.reason.startswith("converged")), None)
    return {"final_p95_s": final_p95_s, "near_window": decisions[near].window if near is not None else None,
            "changes": sum(changed),
            "changes_after_near": after,
            "changes_per_100_after_near": 100.0 * after / max(len(p95) - near - 1, 1) if near is not None else None,
            "first_converged_window": decisions[converged].window if converged is not None else None,
            "changes_after_converged": sum(changed[converged + 1:]) if converged is not None else None}


def change_causes(decisions: list[Decision]) -> list[dict]:
    """Every change, with the load it saw and the search it belongs to: the initial one, a re-opened one (and
    why it re-opened), or none (a change made while converged: a rollback or a re-measure)."""
    rows, cause = [], "initial search"
    for d in decisions:
        converging = d.reason.startswith("converged")
        if "re-opened (" in d.reason:
            cause = "re-opened: " + d.reason.split("re-opened (", 1)[1].split(");", 1)[0]
        if d.change:
            rows.append({"window": d.window, "offered_eps": d.observed["offered_eps"], "action": str(d.action),
                         "cause": (f"{cause}, back to the incumbent on converging" if converging and cause
                                   else cause or f"while converged ({d.action})")})
        if converging:
            cause = ""
    return rows


def trace(d: Decision) -> None:
    """One window on one line: its load, P95, action (* when it changed the config) and why."""
    console.print(f"  {d.window:3d} {d.observed['offered_eps']:5.0f} ev/s {d.observed['p95_s'] * 1e3:9.2f} ms "
                  f"{d.action}{' *' if d.change else ''}: {d.reason}", soft_wrap=True, highlight=False)


def run_seed(args: argparse.Namespace, seed: int, profiles: list[str]) -> dict:
    """Every calibration and profile for one seed, printed as it goes (a table per calibration, the changes by
    cause, and with `--trace` every window); returns each case's figures."""
    out: dict = {}
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0), title=f"pipetune on the twin, {args.window:g} s windows, seed {seed}")
    for col in ("case", "windows", f"near {NEAR:g}×\nat", "changes\nafter", "per 100\nafter", "converged\nat",
                "final\nP95 s", "changes"):
        table.add_column(col, justify="left" if col == "case" else "right", no_wrap=True)
    for cal in args.calibrations.split(","):
        for name in profiles:
            windows = args.windows if name == "steady" else args.moving_windows
            period = {"period_s": windows * args.window} if name == "diurnal" else {}
            if args.trace:
                console.print(f"{cal} / {name}, window by window (* a change):")
            run = drive(load(cal), WorkloadSpec(Profile(name), args.rate, seed=seed, **period), windows, args.window,
                        seed, trace if args.trace else None)
            figures = convergence(run["decisions"], run["final_p95_s"])
            out[f"{cal} / {name}"] = {"windows": windows} | figures | (
                {"changes_by_cause": change_causes(run["decisions"])} if name != "steady" else {})
            rate = figures["changes_per_100_after_near"]
            table.add_row(f"{cal} / {name}", str(windows), str(figures["near_window"]),
                          str(figures["changes_after_near"]), "-" if rate is None else f"{rate:.0f}",
                          str(figures["first_converged_window"]),
                          f"{figures['final_p95_s']:.4f}", str(figures["changes"]))
        console.print(table)
        for case, figures in out.items():
            if case.startswith(f"{cal} /"):
                console.print(f"{case}: {figures['changes_after_converged']} changes after it first converged")
        for name in profiles:
            if name != "steady":
                console.print(f"{cal} / {name}, changes by cause:")
                for row in out[f"{cal} / {name}"]["changes_by_cause"]:
                    console.print(f"  window {row['window']:3d} at {row['offered_eps']:5.0f} ev/s: {row['action']}, "
                                  f"{row['cause']}")
    return out


def across_seeds(rows: list[dict]) -> list[dict]:
    """Per case over its seeds: how many runs made at most two changes after coming near, the median and the
    worst final P95."""
    summary = []
    for case in dict.fromkeys(row["case"] for row in rows):
        runs = [row for row in rows if row["case"] == case]
        finals = sorted(row["final_p95_s"] for row in runs)
        calm = sum(row["changes_after_near"] is not None and row["changes_after_near"] <= 2 for row in runs)
        summary.append({"case": case, "seeds": len(runs), "calm": calm,
                        "median_final_p95_s": statistics.median(finals), "worst_final_p95_s": finals[-1]})
    return summary


def print_across_seeds(summary: list[dict]) -> None:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1), title="across seeds")
    for col in ("case", "seeds", "≤ 2 changes\nafter near", "median\nfinal P95 s", "worst\nfinal P95 s"):
        table.add_column(col, justify="left" if col == "case" else "right", no_wrap=True)
    for row in summary:
        table.add_row(row["case"], str(row["seeds"]), f"{row['calm']} of {row['seeds']}",
                      f"{row['median_final_p95_s']:.4f}", f"{row['worst_final_p95_s']:.4f}")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calibrations", default="paper-2vcpu,local-filebeat-kafka")
    parser.add_argument("--profiles", default="steady,diurnal", help=f"any of {', '.join(GENERATED_NAMES)}")
    parser.add_argument("--windows", type=int, default=100)
    parser.add_argument("--moving-windows", type=int, default=60, help="windows of each moving load")
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--seeds", type=int, default=1, help="how many seeds, from --seed on (1 to 100)")
    parser.add_argument("--json", type=Path, help="write the result (bench/result.py) here")
    parser.add_argument("--trace", action="store_true", help="print every window's load, P95, action and why")
    args = parser.parse_args()
    result = BenchResult.start("bench.convergence")
    profiles = args.profiles.split(",")
    unknown = set(profiles) - set(GENERATED_NAMES)
    if unknown:
        parser.error(f"--profiles: {', '.join(sorted(unknown))} unknown; allowed: {', '.join(GENERATED_NAMES)}")
    if not 1 <= args.seeds <= 100:
        parser.error(f"--seeds: {args.seeds} is outside 1..100")
    rows: list[dict] = []
    details: dict = {}
    for seed in range(args.seed, args.seed + args.seeds):
        out = run_seed(args, seed, profiles)
        rows += [{"case": case, "seed": seed} | {k: v for k, v in f.items() if k != "changes_by_cause"}
                 for case, f in out.items()]
        details[f"seed {seed}"] = out
        if args.json:  # after every seed, so a long run is never lost
            result.finish(rows, details if args.seeds > 1 else out).write(args.json)
    if args.seeds > 1:
        print_across_seeds(across_seeds(rows))


if __name__ == "__main__":
    main()
