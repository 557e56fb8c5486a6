"""Does a concurrent control keep bad changes out? Canary-vs-controls against before/after, on a twin fleet.

Run: `python -m bench.fleet_canary [--seeds 4] [--rounds 24] [--nodes 4] [--out DIR] [--quick]`;
writes result.json (bench/result.py) and fleet-canary.png to --out.

A pool of `--nodes` twin nodes (paper-2vcpu calibration) shares a diurnal load (one cycle over the run,
±40 % around `--rate`); each node's load is further off by its own uniform ±30 % noise, drawn afresh for
every window. The same learner (pipetune's safe Bayesian learner, `controller.tuning_run.tuning_learner`,
no twin screen) proposes a change every round; a round is a window of the incumbent (before), the change,
a settle window, a window of the change (after), two slots of a window each that only an unclear canary
runs on (a deployment's `canary_max_windows` of 3; under the other rules the decided config runs them),
and a settle window. A round in which
a node of the pool is not steady in the before window (output off input by more than 10 %: it still drains
what a restart left) tries nothing and tells the learner nothing; it lets the pool settle. A control not
steady in the after window makes the canary's judgement void (not promoted). Three rules decide
whether the change is promoted (throughput and backlog must hold in all, `models.verdict.judge`):

- canary:         `judge_canary` on node 0 against the other nodes over the same windows (difference in
                  differences of P95, bootstrap interval widened by the controls' placebo spread, the
                  canary's before-window P95 within 15 % of the controls'): BETTER promotes to the pool;
                  UNCLEAR runs one more window and judges all the canary's windows together, up to 3
                  (the promotion steps are not judged one by one here: the twin nodes share a traffic shape);
- canary, 1 window: the same, an unclear canary taken back after its first window (as before run 3);
- before/after CI: `judge_canary` on one node with no controls (the same interval, no drift removed);
- before/after:   one node, the after window's P95 below the before window's (what a sequential tuner does).

Each promoted change is then checked on fresh side-by-side windows: the replaced and the promoted config
run at the same time on the same arrivals (the pool's load at the moment of the promotion, no noise), one
warm-up and three windows. Printed per rule: promotions, the share the fresh windows show to be worse (the
promoted config's P95 more than 1 % above the replaced one's; goal ≤ 5 % for the canary), the share worse by
10 % or more, and the P95 of the final config against the defaults on fresh windows. A PNG shows the fresh
P95 ratio of every promotion.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np
from rich.console import Console
from rich.table import Table

from agents.probe.metrics import LATENCY_BUCKETS_S
from bench.result import RESULT_FILE, BenchResult
from controller.deployment import PoolSpec
from controller.tuning_run import LearnerSetup, tuning_learner
from models.canary import CanaryOutcome, LatencyHistogram, judge_canary
from models.rollout import CanaryNext, canary_next
from models.learning import Context
from models.observation import Observation
from models.policy import Policy
from models.presets import preset
from models.space import Config
from models.twin import Calibration, Twin, load
from models.verdict import judge

console = Console(width=80)
WORSE_BY = 0.01  # fresh P95 of the promoted config more than 1 % above the replaced one's
FRESH_WINDOWS = 3
STEADY_WITHIN = 0.1
CANARY_MAX_WINDOWS: int = PoolSpec.model_fields["canary_max_windows"].default  # a deployment's default


@dataclass(frozen=True)
class FleetLoad:
    """The pool's diurnal load and each node's own noise around it."""

    rate_eps: float
    amplitude: float
    noise: float
    period_s: float

    def pool_eps(self, t_s: float | np.ndarray) -> float | np.ndarray:
        """The pool's load per node at `t_s`: lowest at the start, highest half a period later."""
        return self.rate_eps * (1.0 - self.amplitude * np.cos(2 * math.pi * np.asarray(t_s) / self.period_s))

    def arrivals(self, edges_s: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One node's write times: Poisson in each window at the pool's load times its own noise."""
        mids, widths = (edges_s[:-1] + edges_s[1:]) / 2, np.diff(edges_s)
        rate = self.pool_eps(mids) * (1.0 + rng.uniform(-self.noise, self.noise, mids.size))
        counts = rng.poisson(rate * widths)
        return np.concatenate([np.sort(rng.uniform(a, a + w, n)) for a, w, n in zip(edges_s, widths, counts)])


@dataclass(frozen=True)
class Window:
    observation: Observation
    histogram: LatencyHistogram


@dataclass(frozen=True)
class Promotion:
    at_s: float
    replaced: Config
    promoted: Config
    why: str


# before and after windows of every node (the judged one first), seed, and the next after window (None when
# the round has no slot left) -> whether to promote, and why
Rule = Callable[[list[Window], list[Window], int, Callable[[], list[Window] | None]], tuple[bool, str]]


def canary_rule(before: list[Window], after: list[Window], seed: int,
                more: Callable[[], list[Window] | None], max_windows: int = CANARY_MAX_WINDOWS) -> tuple[bool, str]:
    """`judge_canary` against the controls; unclear, judged again with one more window over all the
    canary's windows together, up to `max_windows` (`models.rollout.canary_next`), as `CanaryPool`."""
    afters = [after]
    while True:
        if not all(steady(w.observation) for ws in afters for w in ws[1:]):
            return False, "a control was not steady in an after window"
        merged = [LatencyHistogram.merge(ws[i].histogram for ws in afters) for i in range(len(after))]
        judged = judge_canary(before[0].histogram, merged[0], [w.histogram for w in before[1:]], merged[1:],
                              seed=seed)
        step = canary_next(judged.outcome, len(afters), max_windows)
        nxt = more() if step is CanaryNext.EXTEND else None
        if nxt is None:
            return judged.outcome is CanaryOutcome.BETTER, f"{judged.reason} ({len(afters)} window(s))"
        afters.append(nxt)


def before_after_ci_rule(before: list[Window], after: list[Window], seed: int,
                         more: Callable[[], list[Window] | None]) -> tuple[bool, str]:
    judged = judge_canary(before[0].histogram, after[0].histogram, [], [], seed=seed)
    return judged.outcome is CanaryOutcome.BETTER, judged.reason


def before_after_rule(before: list[Window], after: list[Window], seed: int,
                      more: Callable[[], list[Window] | None]) -> tuple[bool, str]:
    p95 = [ws[0].observation.p95_s * 1e3 for ws in (before, after)]
    return p95[1] < p95[0], f"P95 {p95[0]:.1f} → {p95[1]:.1f} ms"


RULES: dict[str, tuple[Rule, bool]] = {  # name -> (rule, whether it needs the whole pool)
    "canary": (canary_rule, True), "canary, 1 window": (partial(canary_rule, max_windows=1), True), "before/after CI": (before_after_ci_rule, False),
    "before/after": (before_after_rule, False)}


class Fleet:
    """The pool's twins on one timeline of windows."""

    def __init__(self, nodes: int, start: Config, cal: Calibration, load: FleetLoad, edges_s: np.ndarray,
                 seed: int) -> None:
        # node i sees the same load and jitter under every rule: the rules differ only in what they decide
        self.twins = [Twin(start, load.arrivals(edges_s, np.random.default_rng([seed, i])), cal, seed=seed * 97 + i)
                      for i in range(nodes)]

    def window(self, start_s: float, end_s: float) -> list[Window]:
        out = []
        for twin in self.twins:
            twin.run_until(end_s)
            out.append(Window(twin.observe(start_s, end_s), twin.latency_histogram(start_s, end_s, LATENCY_BUCKETS_S)))
        return out


def steady(observation: Observation) -> bool:
    """Whether a node's window can be a baseline: output within 10 % of input, not catching up on a backlog
    a restart left (Spark's takes 10 s and more to drain) nor falling behind."""
    return abs(observation.throughput_ratio - 1.0) <= STEADY_WITHIN


def run_rule(rule: Rule, nodes: int, cal: Calibration, load: FleetLoad, rounds: int, window_s: float,
             settle_s: float, seed: int) -> tuple[list[Promotion], Config, list[float]]:
    """The learner's rounds under `rule`: the promotions, the final incumbent, and judge seconds per call."""
    policy, incumbent = Policy(), preset("defaults")
    learner = tuning_learner(LearnerSetup("pipetune", policy, incumbent, cal.topology, seed), remote=False)
    # a round: before, settle, after, the slots an unclear canary may run on, settle after the decision
    extra = CANARY_MAX_WINDOWS - 1
    segments = [window_s] + ([window_s, settle_s, window_s] + [window_s] * extra + [settle_s]) * rounds
    edges = np.concatenate([[0.0], np.cumsum(segments)])
    fleet = Fleet(nodes, incumbent, cal, load, np.append(edges, edges[-1] + 120.0), seed)
    previous = fleet.window(0.0, window_s)[0].observation
    promotions: list[Promotion] = []
    judge_s: list[float] = []
    per_round = 4 + extra
    for r in range(rounds):
        t0, t1, t2, t3, *slots = edges[1 + per_round * r: 2 + per_round * (r + 1)]
        before = fleet.window(t0, t1)
        candidate, trying = incumbent, all(steady(w.observation) for w in before)
        if trying:
            context = Context(before[0].observation.offered_eps, incumbent)
            learner.tell(incumbent, context, before[0].observation, judge(before[0].observation, policy, incumbent,
                                                                          previous))
            candidate = learner.suggest(context).config
            trying = candidate != incumbent
        if trying:
            fleet.twins[0].apply(candidate)
        settled = fleet.window(t1, t2)[0].observation
        after = fleet.window(t2, t3)
        ends = [t3, *slots[:-1]]  # the after window's end, then each extra slot's

        def more() -> list[Window] | None:
            if len(ends) == 1:
                return None
            start = ends.pop(0)
            return fleet.window(start, ends[0])
        if trying:
            verdict = judge(after[0].observation, policy, candidate, settled)
            learner.tell(candidate, Context(after[0].observation.offered_eps, incumbent), after[0].observation,
                         verdict)
            started = time.perf_counter()
            better, why = rule(before, after, seed * 1000 + r, more)
            judge_s.append(time.perf_counter() - started)
            if verdict.ok and better:
                promotions.append(Promotion(float(ends[0]), incumbent, candidate, why))
                for twin in fleet.twins[1:]:
                    twin.apply(candidate)
                incumbent = candidate
            else:
                fleet.twins[0].apply(incumbent)
        previous = fleet.window(ends[0], slots[-1])[0].observation  # the slots left, and the settle window
    return promotions, incumbent, judge_s


def side_by_side(configs: list[Config], cal: Calibration, rate_eps: float, window_s: float, seed: int) -> list[float]:
    """P95 of each config over fresh windows, all run at once on the same arrivals (after a warm-up window)."""
    rng = np.random.default_rng([seed, 7])
    end_s = (FRESH_WINDOWS + 1) * window_s
    arrivals = np.sort(rng.uniform(0.0, end_s + 60.0, rng.poisson(rate_eps * (end_s + 60.0))))
    p95 = []
    for config in configs:
        twin = Twin(config, arrivals, cal, seed=seed)
        twin.run_until(end_s)
        p95.append(twin.observe(window_s, end_s).p95_s)
    return p95


def measure(seeds: int, rounds: int, nodes: int, rate_eps: float, window_s: float, settle_s: float,
            calibration: str) -> dict:
    cal = load(calibration)
    period_s = window_s + rounds * ((2 + CANARY_MAX_WINDOWS - 1) * window_s + 2 * settle_s)
    fleet_load = FleetLoad(rate_eps, 0.4, 0.3, period_s)
    results: dict = {name: {"promotions": [], "final_gain": [], "judge_ms": []} for name in RULES}
    for seed in range(seeds):
        for name, (rule, pool) in RULES.items():
            started = time.process_time()
            promotions, final, judge_s = run_rule(rule, nodes if pool else 1, cal, fleet_load, rounds, window_s,
                                                  settle_s, seed)
            out = results[name]
            out["judge_ms"] += [s * 1e3 for s in judge_s]
            for k, p in enumerate(promotions):
                old, new = side_by_side([p.replaced, p.promoted], cal, float(fleet_load.pool_eps(p.at_s)), window_s,
                                        seed * 1000 + k)
                out["promotions"].append({"seed": seed, "at_s": p.at_s, "fresh_old_p95_s": old, "fresh_new_p95_s": new,
                                          "ratio": new / old, "why": p.why})
            defaults, tuned = side_by_side([preset("defaults"), final], cal, rate_eps, window_s, seed + 500)
            out["final_gain"].append(1.0 - tuned / defaults)
            console.print(f"seed {seed} {name}: {len(promotions)} promotions, "
                          f"{time.process_time() - started:.0f} s CPU", highlight=False)
    return {"calibration": calibration, "seeds": seeds, "rounds": rounds, "nodes": nodes, "rate_eps": rate_eps,
            "window_s": window_s, "settle_s": settle_s, "amplitude": 0.4, "noise": 0.3, "rules": results}


def summary(results: dict) -> dict[str, dict]:
    rows = {}
    for name, out in results["rules"].items():
        ratios = np.array([p["ratio"] for p in out["promotions"]])
        n = ratios.size
        rows[name] = {"promotions": n,
                      "worse": float(np.mean(ratios > 1 + WORSE_BY)) if n else math.nan,
                      "worse_10": float(np.mean(ratios >= 1.1)) if n else math.nan,
                      "final_gain": float(np.median(out["final_gain"])),
                      "judge_ms": float(np.median(out["judge_ms"])) if out["judge_ms"] else math.nan}
    return rows


def print_table(results: dict) -> None:
    table = Table(title=f"{results['nodes']} nodes, {results['rounds']} rounds × {results['seeds']} seeds, "
                        f"{results['rate_eps']:g} ev/s ±40 % diurnal ±30 % noise")
    for col in ("rule", "promoted", "worse", "≥10 % worse", "final vs dflt", "judge ms"):
        table.add_column(col, justify="left" if col == "rule" else "right")
    for name, row in summary(results).items():
        table.add_row(name, str(row["promotions"]), f"{row['worse']:.0%}", f"{row['worse_10']:.0%}",
                      f"{-row['final_gain']:+.0%}", f"{row['judge_ms']:.1f}")
    console.print(table)
    console.print("worse: promoted config's fresh side-by-side P95 > 1 % above the replaced one's; "
                  "final vs dflt: median P95 change of the last config against the defaults (fresh).",
                  highlight=False)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    rows = summary(results)
    for i, (name, out) in enumerate(results["rules"].items()):
        ratios = np.array([p["ratio"] for p in out["promotions"]])
        x = i + np.random.default_rng(i).uniform(-0.15, 0.15, ratios.size)
        ax.scatter(x, ratios, s=14, alpha=0.7, color=np.where(ratios > 1 + WORSE_BY, "tab:red", "tab:blue"))
        ax.text(i, 1.01, f"{rows[name]['worse']:.0%} of {ratios.size} worse", transform=ax.get_xaxis_transform(),
                ha="center", fontsize=9)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(results["rules"])), list(results["rules"]))
    ax.set_ylabel("fresh P95 promoted / replaced (side by side)")
    ax.set_title("Promoted changes on fresh side-by-side windows (red: worse)", pad=18)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--rate", type=float, default=300.0)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--calibration", default="paper-2vcpu")
    parser.add_argument("--out", type=Path, default=Path("docs/evidence/fleet-canary"))
    parser.add_argument("--quick", action="store_true", help="1 seed, 10 rounds: a smoke run")
    args = parser.parse_args()
    started = BenchResult.start("bench.fleet_canary")
    if args.nodes < 2:
        parser.error("--nodes: a canary needs at least one control, so ≥ 2")
    seeds, rounds = (1, 10) if args.quick else (args.seeds, args.rounds)
    results = measure(seeds, rounds, args.nodes, args.rate, args.window, args.settle, args.calibration)
    print_table(results)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [{"rule": rule} | row for rule, row in summary(results).items()]
    started.finish(rows, results | {"summary": summary(results)}).write(args.out / RESULT_FILE)
    plot(results, args.out / "fleet-canary.png")


if __name__ == "__main__":
    main()
