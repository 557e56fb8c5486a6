"""A zoo of pipelines on the twin, and the learner judged on ones nobody tuned it on.

Run: `python -m bench.zoo [--part held-out|tuning] [--variants 8] [--windows 40] [--out DIR] [--quick]`.

Each variant is a pipeline pipetune did not build, drawn at random from one seed: a base calibration
(paper-2vcpu or local-filebeat-kafka) whose every time and CPU cost is off by a lognormal factor (σ 0.2),
a node of 1 to 8 cores, events of 200 B to 4 KiB, a parse cost (plain lines, ndjson, multiline), 0 to
1,000 idle rotated files the input's globs match, a load shape (steady, burst, flash, diurnal, MMPP) and a
rate drawn log-uniformly from 50 to 10,000 ev/s, capped so that the shape's long-run mean load is at most 85 %
of what the defaults carry (beyond it the pipeline is overloaded whatever the config, a regime of its own; an
MMPP's bursts lift its mean to 1.6× its base rate). A shape's crest (a diurnal's, a burst's) may still go
beyond what the defaults carry for a while: that is part of the test. On each, the daemon runs pipetune from the defaults for
`--windows` windows; the final config is measured on fresh windows at the base rate and compared with an
oracle (the best of a random search plus a local refinement on the noise-free twin, on Ray) and the defaults.
The oracle is held where pipetune was: it keeps up at the base rate, within the CPU budget there and at the
lowest and highest load of the run's windows where those differ from it by more than 25 % (a config over its
budget at a crest is rolled back there), and under the lull ceilings (no wait a lull sits out above the defaults',
`models.latency_bounds.lull_ceilings`). The oracle above those ceilings is reported beside it: their price, which
a lull would make anyone pay who went above them (the zoo's loads have no lull). Held to the base rate alone, it
was a config over budget at an MMPP's crest: 2.5 ms on 1294639103, where the best within budget at the crest too
is 9.7 ms. pipetune's final config is checked at those loads the same way, and the run says how many went over.

The split rule, fixed here so that nobody picks the held-out pipelines: the tuning part is the variants of
seeds 0, 1, 2, ... (`--part tuning`), open to whoever changes the learner; the held-out part (the default)
draws its seeds from the commit under test (the first 4 bytes of SHA-256 of its id, from 1,000,000 on), so
each commit is judged on pipelines its author could not see before committing. `--seed S` reproduces a run.
Goal on held-out variants: median final/oracle ≤ 1.2, worst ≤ 2; reported per variant with the windows it
took to come within 1.2× of the oracle.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import statistics
import subprocess
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import ray
from rich import box
from rich.console import Console
from rich.table import Table

from bench.convergence import drive
from bench.result import BenchResult
from bench.tuners import capacity_eps, defaults_budget, noise_free, oracle, perturbed, run_cube
from controller.fresh_windows import measure_fresh
from controller.ray_learner import start_ray
from controller.tuning_run import twin_load_s
from models.budget import within_limits
from models.learning import TunedCube, load_moved, tuned_names
from models.policy import Policy
from models.presets import preset
from models.twin import Calibration, load
from replay.profiles import WorkloadSpec, build_schedule

console = Console(width=80)  # readable in 80 columns, piped or not

BASES = ("paper-2vcpu", "local-filebeat-kafka")
CORES = (1, 2, 4, 8)
# Filebeat's CPU per event read, relative to the base calibration's (ndjson): how hard each line is to parse
PARSE_COST = {"plain": 0.6, "ndjson": 1.0, "multiline": 1.6}
IDLE_FILES = (0, 50, 200, 1000)
SHAPES = ("steady", "burst", "flash", "diurnal", "mmpp")
RATE_EPS = (50.0, 10_000.0)
EVENT_BYTES = (200, 4096)
COST_SPREAD = 0.2  # σ of the lognormal factor on every time and CPU cost of the base calibration
KEEP_UP_SHARE = 0.85  # a variant's long-run mean load is at most this share of what the defaults carry
HELD_OUT_FROM = 1_000_000  # held-out seeds start here: never one of the tuning part's
NEAR = 1.2  # "within" the oracle, as the goal counts it
CONFIGS = ("final_config", "oracle_config", "oracle_above_ceilings_config")  # a variant's tuned values, by whom


@dataclass(frozen=True)
class Variant:
    """One pipeline of the zoo, as drawn from `seed`."""

    seed: int
    base: str
    cores: int
    event_bytes: int
    parse: str
    idle_files: int
    shape: str
    drawn_rate_eps: float  # before the cap at what the defaults carry

    def label(self) -> str:
        short = "paper" if self.base == "paper-2vcpu" else "fb-kafka"
        return f"{self.seed} {short} {self.cores}c {self.parse} {self.idle_files}f {self.shape}"


def draw(seed: int) -> Variant:
    """The variant of `seed`: every choice from one generator, so a seed names one pipeline for good."""
    rng = np.random.default_rng(seed)
    low, high = RATE_EPS
    return Variant(seed=seed, base=str(rng.choice(BASES)), cores=int(rng.choice(CORES)),
                   event_bytes=int(round(math.exp(rng.uniform(*np.log(EVENT_BYTES))))),
                   parse=str(rng.choice(list(PARSE_COST))), idle_files=int(rng.choice(IDLE_FILES)),
                   shape=str(rng.choice(SHAPES)), drawn_rate_eps=float(math.exp(rng.uniform(math.log(low),
                                                                                            math.log(high)))))


def calibration(variant: Variant) -> Calibration:
    """The twin of `variant`: its base calibration with every cost off by its own factor, then its node, event
    size, parse cost and idle files."""
    costs = perturbed(load(variant.base), np.random.default_rng([variant.seed, 1]), COST_SPREAD)
    return costs.scaled(node__cores=float(variant.cores), node__idle_files=variant.idle_files,
                        event_bytes=variant.event_bytes,
                        filebeat__cpu_per_event_s=costs.filebeat.cpu_per_event_s * PARSE_COST[variant.parse])


def held_out_seed(commit: str) -> int:
    """The first held-out seed for `commit`: from its id, so not chosen by whoever wrote it."""
    return HELD_OUT_FROM + int.from_bytes(hashlib.sha256(commit.encode()).digest()[:4], "big")


def workload(variant: Variant, rate_eps: float, windows: int, window_s: float) -> WorkloadSpec:
    """The variant's load shape at `rate_eps`: a diurnal cycle is one run long."""
    period = {"period_s": windows * window_s} if variant.shape == "diurnal" else {}
    return WorkloadSpec(variant.shape, rate_eps, seed=variant.seed, **period)


def mean_over_base(variant: Variant, windows: int, window_s: float) -> float:
    """The long-run mean load of the variant's shape over its base rate, from its own schedule for the run (never
    below 1: a diurnal cycle cut short of its period must not lift the cap)."""
    base_eps = 1000.0
    spec = replace(workload(variant, base_eps, windows, window_s), duration_s=twin_load_s(windows, window_s))
    return max(1.0, len(build_schedule(spec).schedule.times_s) / spec.duration_s / base_eps)


@ray.remote
def _tune(variant: Variant, cal: Calibration, rate_eps: float, windows: int, window_s: float) -> dict:
    """pipetune from the defaults on the variant, and the defaults and its final config on fresh windows; the
    lowest and highest load of the run's windows that differ from the base rate by more than 25 %, and whether the
    final config is within the CPU budget there (noise-free, as the oracle is held)."""
    run = drive(cal, workload(variant, rate_eps, windows, window_s), windows, window_s, variant.seed)
    defaults = measure_fresh(preset("defaults"), cal, rate_eps, window_s, seed=variant.seed + 1000)
    loads = [d.observed["offered_eps"] for d in run["decisions"]]
    held_at = [eps for eps in (min(loads), max(loads)) if load_moved(rate_eps, eps)]
    exact = noise_free(cal)
    budget = defaults_budget(Policy(), measure_fresh(preset("defaults"), exact, rate_eps, window_s), rate_eps)
    within = all(within_limits(measure_fresh(run["final"], exact, eps, window_s).cpu_cores, budget.at(eps))
                 for eps in held_at)
    return {"final_p95_s": run["final_p95_s"], "final": run["final"], "defaults_p95_s": defaults.p95_s,
            "held_at_eps": held_at, "final_within_budget_there": within,
            "window_p95_s": [d.observed["p95_s"] if not d.guardrail else None for d in run["decisions"]],
            "changes": sum(bool(d.change) for d in run["decisions"]),
            "restarts": sum(d.pause_s > 0 for d in run["decisions"])}


def judge_variant(variant: Variant, windows: int, window_s: float, oracle_samples: int) -> dict:
    """One variant's figures: its rate, pipetune's final P95 against the oracle's and the defaults', the windows
    until a window came within `NEAR` of the oracle, and the changes and restarts that took."""
    cal = calibration(variant)
    carried = capacity_eps(cal, window_s)
    rate = min(variant.drawn_rate_eps, KEEP_UP_SHARE * carried / mean_over_base(variant, windows, window_s))
    tuned = ray.get(_tune.remote(variant, cal, rate, windows, window_s))
    # held to the budget where the run's load went, as pipetune was: a config over it there is rolled back; and to
    # the lull ceilings, as pipetune was; the oracle above them prices those
    unbounded = TunedCube(tuned_names(Policy(), cal.topology), Policy())
    above_ceilings = oracle(unbounded, cal, rate, window_s, oracle_samples, seed=variant.seed,
                            budget_at_eps=tuned["held_at_eps"])
    held = run_cube(Policy(), cal)  # its best moved under the ceilings is tried too: their price, not the draws'
    best = oracle(held, cal, rate, window_s, oracle_samples, seed=variant.seed, budget_at_eps=tuned["held_at_eps"],
                  also=[above_ceilings.config])
    near = next((i + 1 for i, p in enumerate(tuned["window_p95_s"]) if p is not None and p <= NEAR * best.p95_s),
                None)
    return {"variant": variant.label(), "seed": variant.seed, "rate_eps": rate, "capped": rate < variant.drawn_rate_eps,
            "defaults_p95_s": tuned["defaults_p95_s"], "final_p95_s": tuned["final_p95_s"], "oracle_p95_s": best.p95_s,
            "oracle_above_ceilings_p95_s": above_ceilings.p95_s,
            "final_config": {n: tuned["final"][n] for n in held.names},
            "oracle_config": {n: best.config[n] for n in held.names},
            "oracle_above_ceilings_config": {n: above_ceilings.config[n] for n in held.names},
            "budget_held_at_eps": [round(eps) for eps in tuned["held_at_eps"]],
            "final_within_budget_there": tuned["final_within_budget_there"],
            "final_over_oracle": tuned["final_p95_s"] / best.p95_s,
            "windows_to_near": near,
            "changes": tuned["changes"], "restarts": tuned["restarts"]}


def summary(rows: list[dict]) -> dict:
    """The held-out goals: the median and worst final/oracle, and how many came within `NEAR` at all."""
    ratios = [row["final_over_oracle"] for row in rows]
    return {"variants": len(rows), "median_final_over_oracle": statistics.median(ratios),
            "worst_final_over_oracle": max(ratios), "reached_near": sum(r["windows_to_near"] is not None for r in rows),
            "median_goal_met": statistics.median(ratios) <= NEAR, "worst_goal_met": max(ratios) <= 2.0,
            "finals_over_budget_at_their_runs_loads": sum(not r["final_within_budget_there"] for r in rows),
            "median_ceilings_price": statistics.median(r["oracle_p95_s"] / r["oracle_above_ceilings_p95_s"]
                                                       for r in rows)}


def _table(rows: list[dict], title: str) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0), title=title)
    for col in ("variant", "ev/s", "defaults\nP95 s", "final\nP95 s", "final/\noracle", "≤1.2×\nat", "chan-\nges"):
        table.add_column(col, justify="left" if col == "variant" else "right", no_wrap=True)
    for row in rows:
        table.add_row(row["variant"], f"{row['rate_eps']:.0f}{'*' if row['capped'] else ''}",
                      f"{row['defaults_p95_s']:.3f}", f"{row['final_p95_s']:.4f}", f"{row['final_over_oracle']:.2f}",
                      str(row["windows_to_near"] or "–"), str(row["changes"]))
    return table


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.scatter([r["rate_eps"] for r in rows], [r["final_over_oracle"] for r in rows])
    for r in rows:  # the last digits name the variant: seeds of one run are consecutive
        ax.annotate(str(r["seed"])[-3:], (r["rate_eps"], r["final_over_oracle"]), fontsize=7)
    ax.axhline(NEAR, color="green", ls="--", lw=1, label=f"goal: median ≤ {NEAR}×")
    ax.axhline(2.0, color="red", ls="--", lw=1, label="goal: worst ≤ 2×")
    ax.set(xscale="log", yscale="log", xlabel="offered load, ev/s", ylabel="final P95 / oracle P95",
           title="pipetune on the zoo (each variant by its seed's last digits)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("held-out", "tuning"), default="held-out")
    parser.add_argument("--variants", type=int, default=8, help="how many variants (1 to 100)")
    parser.add_argument("--seed", type=int, help="the first seed (default: 0 for tuning, from the commit held out)")
    parser.add_argument("--windows", type=int, default=40)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--oracle-samples", type=int, default=80)
    parser.add_argument("--quick", action="store_true", help="2 variants, 12 windows, 16 oracle samples")
    parser.add_argument("--out", type=Path, default=Path("docs/evidence/zoo"), help="result.json and zoo.png here")
    args = parser.parse_args()
    if not 1 <= args.variants <= 100:
        parser.error(f"--variants: {args.variants} is outside 1..100")
    if args.quick:
        args.variants, args.windows, args.oracle_samples = 2, 12, 16
    result = BenchResult.start("bench.zoo")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    first = args.seed if args.seed is not None else 0 if args.part == "tuning" else held_out_seed(commit)
    console.print(f"{args.part} part: seeds {first} to {first + args.variants - 1}"
                  + (f" (from commit {commit[:7]})" if args.seed is None and args.part == "held-out" else ""))
    start_ray()
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    details: dict = {"part": args.part, "first_seed": first, "variants": []}
    for seed in range(first, first + args.variants):
        variant = draw(seed)
        console.print(f"variant {len(rows) + 1}/{args.variants}: {variant.label()}, drawn at "
                      f"{variant.drawn_rate_eps:.0f} ev/s, {variant.event_bytes} B events ...")
        row = judge_variant(variant, args.windows, args.window, args.oracle_samples)
        configs = {key: row.pop(key) for key in CONFIGS}  # beside the variant: too wide for a table
        rows.append(row)
        details["variants"].append(asdict(variant) | configs)
        result.finish(rows, details).write(args.out / "result.json")  # after every variant: a long run is kept
    figures = summary(rows)
    console.print(_table(rows, f"{args.part}: {args.windows} windows × {args.window:g} s (* rate capped)"))
    console.print(f"final/oracle: median {figures['median_final_over_oracle']:.2f} (goal ≤ {NEAR}), worst "
                  f"{figures['worst_final_over_oracle']:.2f} (goal ≤ 2); {figures['reached_near']} of "
                  f"{figures['variants']} came within {NEAR}× in a window; "
                  f"{figures['finals_over_budget_at_their_runs_loads']} final configs over the CPU budget at their "
                  f"run's lowest or highest load; the lull ceilings cost the oracle "
                  f"×{figures['median_ceilings_price']:.2f} (median)")
    result.finish({"variants": rows, "summary": [figures]}, details).write(args.out / "result.json")
    _plot(rows, args.out / "zoo.png")
    console.print(f"result: {args.out / 'result.json'}, plot: {args.out / 'zoo.png'}")


if __name__ == "__main__":
    main()
