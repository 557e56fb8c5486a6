"""How the controller's cost grows with the fleet: twin fleets of 20, 100 and 200 nodes in pools of 10,
each pool a canary-first `CanaryPool` with its learner in a Ray actor of its own, stepped round by round.

Per round (every pool decides once) it prints the controller's own seconds: each pool's daemon step
minus the time spent inside the twin (the simulated fleet, standing in for the network wait of a real
one) and inside the learner's actor (Ray: more Ray nodes run more of them at once), as wall time and
as the CPU time of the controller's thread (which a busy shared machine does not inflate). The twins
and the learners are printed apart. Pools are stepped one after the other, so no pool's time hides inside another's. Memory:
the controller process's RSS less what its twins take (measured as they are built; a real fleet's nodes
are not in the controller), and the learner actors' RSS summed. Each size runs in a fresh process. Goals: ≤ 2 s of controller time per
round at 200 nodes, ≤ 1 GB controller memory, time growing no faster than the node count.

    python -m bench.fleet_scale [--sizes 20,100,200] [--pool-nodes 10] [--rounds 6] [--window 30]
                                [--rate 50] [--out docs/evidence/fleet-scale]

The learners run without their twin pre-screen (it runs as Ray tasks, the learners' cost, not the
controller's). Writes fleet_scale.txt, result.json (bench/result.py) and fleet_scale.png to --out.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from threadpoolctl import threadpool_limits

from bench.result import RESULT_FILE, BenchResult
from bench.soak import rss_mib
from controller.daemon import Daemon
from controller.deployment import PoolSpec
from controller.pipelines import ApplyReport, TwinPipeline
from controller.ray_learner import start_ray
from controller.rollout import CanaryPool, PoolWindow, TwinPoolWindows
from controller.state import StateStore
from controller.tuning_run import LearnerSetup, tuning_learner, twin_pipeline
from models.learning import Context, Learner, Suggestion
from models.observation import Observation
from models.policy import Policy
from models.presets import preset
from models.rollout import plan_rollout
from models.space import Config
from models.twin import load
from models.verdict import Verdict
from replay.profiles import WorkloadSpec

ROOT = Path(__file__).resolve().parent.parent


class Stopwatch:
    """Wall seconds and this thread's CPU seconds spent inside the calls it wraps, summed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.cpu_s = 0.0

    def time(self, call, *args):
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            return call(*args)
        finally:
            self.seconds += time.perf_counter() - started
            self.cpu_s += time.thread_time() - cpu


class TimedNode:
    def __init__(self, node: TwinPipeline, watch: Stopwatch) -> None:
        self.node, self.watch = node, watch

    def apply(self, config: Config) -> ApplyReport:
        return self.watch.time(self.node.apply, config)

    def current(self) -> Config:
        return self.watch.time(self.node.current)


class TimedWindows:
    def __init__(self, windows: TwinPoolWindows, watch: Stopwatch) -> None:
        self.windows, self.watch = windows, watch

    def observe(self, seconds: float) -> PoolWindow:
        return self.watch.time(self.windows.observe, seconds)

    def close(self) -> None:
        self.windows.close()


class TimedLearner:
    def __init__(self, learner: Learner, watch: Stopwatch) -> None:
        self.learner, self.watch = learner, watch

    def suggest(self, context: Context) -> Suggestion:
        return self.watch.time(self.learner.suggest, context)

    def tell(self, config: Config, context: Context, observation: Observation, verdict: Verdict) -> None:
        self.watch.time(self.learner.tell, config, context, observation, verdict)

    def update_policy(self, policy: Policy) -> None:
        self.watch.time(self.learner.update_policy, policy)


@dataclass
class SizeResult:
    nodes: int
    pools: int
    controller_s: list[float]  # per round, summed over pools: wall time outside the twins and the learners
    controller_cpu_s: list[float]  # the same, in CPU seconds of the controller's thread (shared-machine proof)
    learner_s: list[float]
    fleet_s: list[float]  # inside the twins
    controller_rss_mib: float  # the process's RSS less the twins' share
    learners_rss_mib: float
    twins_mib: float


MAX_WINDOWS: int = PoolSpec.model_fields["canary_max_windows"].default  # a deployment's default


def _twins(index: int, size: int, args: argparse.Namespace) -> dict[str, TwinPipeline]:
    """Pool `index`'s twin nodes; their traffic outlasts the warm-up and the rounds, each at most an unclear
    canary's windows, a settle and a judged window per promotion step (of 2 nodes), a settle and a baseline."""
    cal = load(args.calibration)
    per_round = MAX_WINDOWS + 2 * math.ceil((size - 1) / 2) + 2
    return {f"pool{index}-node{i + 1}": twin_pipeline(preset("defaults"), cal, WorkloadSpec(
        "steady", args.rate, seed=index * 1000 + i), per_round * (args.rounds + 1), args.window) for i in range(size)}


def _pool(index: int, nodes: dict[str, TwinPipeline], args: argparse.Namespace, directory: Path, fleet: Stopwatch,
          learners: Stopwatch) -> Daemon:
    cal, policy, start = load(args.calibration), Policy(), preset("defaults")
    pool = CanaryPool({name: TimedNode(node, fleet) for name, node in nodes.items()},
                      TimedWindows(TwinPoolWindows(nodes), fleet), plan_rollout(list(nodes), 1, 2),
                      directory / "rollout.json", max_windows=MAX_WINDOWS)
    learner = tuning_learner(LearnerSetup("pipetune", policy, start, cal.topology, seed=index), remote=True)
    return Daemon(pool, TimedLearner(learner, learners), policy, window_s=args.window, store=StateStore(directory),
                  name=f"pool{index}", realizer=pool)


def _learners_rss_mib() -> float:
    """The resident memory of every learner actor's process (Ray titles them `ray::LearnerActor...`)."""
    total_kib = 0
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and b"LearnerActor" in (proc / "cmdline").read_bytes():
                status = (proc / "status").read_text().splitlines()
                total_kib += next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue  # gone between the listing and the read, or a kernel thread
    return total_kib / 1024


def measure(nodes: int, args: argparse.Namespace) -> SizeResult:
    """One fleet size, in a process of its own (so no size inherits another's memory)."""
    start_ray()
    fleet, learners = Stopwatch(), Stopwatch()
    pools = nodes // args.pool_nodes
    with tempfile.TemporaryDirectory(prefix="pipetune-fleet-") as tmp, threadpool_limits(1):
        before = rss_mib()
        twins = [_twins(index, args.pool_nodes, args) for index in range(pools)]
        twins_mib = rss_mib() - before  # the simulated fleet's share of the process, not the controller's
        daemons = []
        for index in range(pools):
            directory = Path(tmp) / f"pool{index}"
            directory.mkdir()
            daemons.append(_pool(index, twins[index], args, directory, fleet, learners))
        for daemon in daemons:
            daemon.warm_up()
        result = SizeResult(nodes, pools, [], [], [], [], 0.0, 0.0, twins_mib)
        for round_ in range(args.rounds):
            fleet_before, learners_before = (fleet.seconds, fleet.cpu_s), (learners.seconds, learners.cpu_s)
            started, cpu = time.perf_counter(), time.thread_time()
            for daemon in daemons:
                daemon.step()
            wall, used = time.perf_counter() - started, time.thread_time() - cpu
            result.fleet_s.append(fleet.seconds - fleet_before[0])
            result.learner_s.append(learners.seconds - learners_before[0])
            result.controller_s.append(wall - result.fleet_s[-1] - result.learner_s[-1])
            # waiting on a learner's actor costs this thread no CPU; what it spends there is serialising
            result.controller_cpu_s.append(used - (fleet.cpu_s - fleet_before[1]))
            print(f"  {nodes} nodes, round {round_ + 1}/{args.rounds}: controller "
                  f"{result.controller_s[-1]:.2f} s ({result.controller_cpu_s[-1]:.2f} s CPU), learners "
                  f"{result.learner_s[-1]:.1f} s, twins {result.fleet_s[-1]:.1f} s", flush=True)
        result.controller_rss_mib, result.learners_rss_mib = rss_mib() - twins_mib, _learners_rss_mib()
    return result


def report(results: list[SizeResult]) -> str:
    lines = ["seconds per decision round (every pool once), medians; controller: wall and CPU",
             f"{'nodes':>5} {'pools':>5} {'ctrl s':>7} {'ctrl max':>8} {'ctrl CPU':>8} {'learners':>8} "
             f"{'twins':>6} {'ctrl MiB':>8} {'lrn MiB':>7} {'twin MiB':>8}"]
    for r in results:
        lines.append(f"{r.nodes:>5} {r.pools:>5} {statistics.median(r.controller_s):>7.2f} "
                     f"{max(r.controller_s):>8.2f} {statistics.median(r.controller_cpu_s):>8.2f} "
                     f"{statistics.median(r.learner_s):>8.1f} {statistics.median(r.fleet_s):>6.1f} "
                     f"{r.controller_rss_mib:>8.0f} {r.learners_rss_mib:>7.0f} {r.twins_mib:>8.0f}")
    first, last = results[0], results[-1]
    growth = statistics.median(last.controller_cpu_s) / statistics.median(first.controller_cpu_s)
    scale = last.nodes / first.nodes
    lines.append(f"controller CPU x{growth:.1f} for x{scale:.0f} nodes "
                 f"({'at most linear' if growth <= scale else 'faster than linear'}); goal at {last.nodes} nodes:")
    lines.append(f"  <= 2 s a round: {statistics.median(last.controller_s):.2f} s wall, "
                 f"{statistics.median(last.controller_cpu_s):.2f} s CPU; <= 1024 MiB: "
                 f"{last.controller_rss_mib:.0f} MiB")
    return "\n".join(lines) + "\n"


def figure_rows(results: list[SizeResult]) -> list[dict]:
    """Per fleet size, the medians of its rounds that the printed table shows."""
    return [{"nodes": r.nodes, "pools": r.pools, "controller_s": statistics.median(r.controller_s),
             "controller_s_max": max(r.controller_s), "controller_cpu_s": statistics.median(r.controller_cpu_s),
             "learners_s": statistics.median(r.learner_s), "twins_s": statistics.median(r.fleet_s),
             "controller_mib": r.controller_rss_mib, "learners_mib": r.learners_rss_mib, "twins_mib": r.twins_mib}
            for r in results]


def _plot(results: list[SizeResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    nodes = [r.nodes for r in results]
    ax.plot(nodes, [statistics.median(r.controller_s) for r in results], "o-", label="controller, wall (median)")
    ax.plot(nodes, [statistics.median(r.controller_cpu_s) for r in results], "s-", label="controller, CPU (median)")
    first_s = statistics.median(results[0].controller_cpu_s)
    ax.plot(nodes, [first_s * n / nodes[0] for n in nodes], ":", color="grey", label="linear from the first")
    ax.axhline(2.0, color="red", lw=0.8, label="goal 2 s")
    ax.set(xlabel="nodes", ylabel="s per decision round", title="controller time per round")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20,100,200", help="fleet sizes in nodes, each a multiple of --pool-nodes")
    parser.add_argument("--pool-nodes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--window", type=float, default=30.0, help="window length, simulated seconds")
    parser.add_argument("--rate", type=float, default=50.0, help="each node's offered load, events/s")
    parser.add_argument("--calibration", default="paper-2vcpu")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/evidence/fleet-scale")
    args = parser.parse_args()
    started = BenchResult.start("bench.fleet_scale")
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.pool_nodes < 2:
        parser.error(f"--pool-nodes must be >= 2 (a canary and a control), got {args.pool_nodes}")
    for size in sizes:
        if size < args.pool_nodes or size % args.pool_nodes:
            parser.error(f"--sizes: {size} is not a multiple of --pool-nodes {args.pool_nodes}")
    spawn = multiprocessing.get_context("spawn")
    results = []
    for size in sizes:
        with spawn.Pool(1) as fresh:
            results.append(fresh.apply(measure, (size, args)))
    text = report(results)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fleet_scale.txt").write_text(text)
    started.finish(figure_rows(results), {"sizes": [asdict(r) for r in results]}).write(args.out / RESULT_FILE)
    _plot(results, args.out / "fleet_scale.png")
    print(f"wrote {args.out / 'fleet_scale.txt'}, {args.out / RESULT_FILE}, fleet_scale.png")


if __name__ == "__main__":
    main()
