"""A long run stays bounded: the daemon on the twin for many windows, as fast as it can go, with its state
directory, while the process's resident memory is sampled (goal: RSS at the end ≤ 1.10 × RSS at 5 %).

The learner runs in this process (as `pipetune autotune` runs it inside its Ray actor), so the figure
covers the daemon, the learner and its history, the store and the twin. The twin's own arrays are sized
for the whole run when it is built, so they weigh the same at the first checkpoint as at the last.

    python -m bench.soak [--windows 2000] [--window 10] [--rate 300] [--state-dir DIR] [--no-screen] [--json PATH]

`--no-screen` leaves out the learner's twin pre-screen of candidates. It holds nothing from one window
to the next (each screen builds and drops its own twin), so memory is not what it changes; it is most of
a window's compute, and without it 2,000 windows fit in well under an hour on a busy machine.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rich.console import Console
from threadpoolctl import threadpool_limits

from bench.result import BenchResult
from controller.daemon import Daemon
from controller.state import StateStore
from controller.tuning_run import LearnerSetup, tuning_learner, twin_pipeline
from models.policy import Policy
from models.presets import preset
from models.twin import load
from replay.profiles import WorkloadSpec

PROGRESS_EVERY = 50  # windows between progress lines


def rss_mib() -> float:
    """This process's resident set size, MiB (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def dir_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.iterdir() if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=2000, help="windows to run (>= 20)")
    parser.add_argument("--window", type=float, default=10.0, help="window length, simulated seconds (> 0)")
    parser.add_argument("--rate", type=float, default=300.0, help="offered load, events/s (> 0)")
    parser.add_argument("--calibration", default="paper-2vcpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--state-dir", type=Path, default=None, help="default: a temporary directory")
    parser.add_argument("--no-screen", action="store_true", help="no twin pre-screen of candidates (faster)")
    parser.add_argument("--json", type=Path, help="also write the result (bench/result.py) here")
    args = parser.parse_args()
    result = BenchResult.start("bench.soak")
    for ok, flag, message in ((args.windows >= 20, "--windows", f"must be >= 20, got {args.windows}"),
                              (args.window > 0, "--window", f"must be > 0 s, got {args.window:g}"),
                              (args.rate > 0, "--rate", f"must be > 0 events/s, got {args.rate:g}")):
        if not ok:
            parser.error(f"{flag} {message}")
    console = Console(stderr=True)
    directory = args.state_dir or Path(tempfile.mkdtemp(prefix="pipetune-soak-"))
    cal = load(args.calibration)
    policy, start = Policy(), preset("defaults")
    learner = tuning_learner(LearnerSetup("pipetune", policy, start, cal.topology, args.seed,
                                           screen=None if args.no_screen else cal),
                             remote=False)
    pipeline = twin_pipeline(start, cal, WorkloadSpec("steady", args.rate, seed=args.seed), args.windows, args.window)
    daemon = Daemon(pipeline, learner, policy, window_s=args.window, store=StateStore(directory))
    checkpoints = {args.windows // 20, args.windows // 2, args.windows}
    rss: dict[int, float] = {}
    started = last = time.monotonic()

    def sample(decision: object) -> None:
        nonlocal last
        done = daemon.window
        if done in checkpoints:
            rss[done] = rss_mib()
        if done % PROGRESS_EVERY == 0:
            now = time.monotonic()
            console.print(f"window {done}/{args.windows}: RSS {rss_mib():.1f} MiB, state {dir_bytes(directory) / 2**20:.2f} "
                          f"MiB, {1000 * (now - last) / PROGRESS_EVERY:.0f} ms/window, learner history "
                          f"{len(learner.history.configs)}", highlight=False)
            last = now

    console.print(f"soak: {args.windows} windows of {args.window:g} s at {args.rate:g} ev/s on the twin "
                  f"({args.calibration}{', no pre-screen' if args.no_screen else ''}); state in {directory}", highlight=False)
    # one BLAS thread, as a daemon sharing a small node should: on 2 busy cores, more threads make GP fits 4× slower
    with threadpool_limits(1):
        daemon.run(args.windows, on_decision=sample)
    print(f"windows {args.windows} in {time.monotonic() - started:.0f} s wall")
    for done in sorted(rss):
        print(f"RSS at {done} windows: {rss[done]:.1f} MiB")
    print(f"state directory: {dir_bytes(directory) / 2**20:.2f} MiB ({directory})")
    first, end = min(rss), max(rss)
    print(f"RSS({end})/RSS({first}) = {rss[end] / rss[first]:.3f} (goal <= 1.10)")
    if args.json:
        rows = [{"windows": done, "rss_mib": rss[done]} for done in sorted(rss)]
        result.finish(rows, {"rss_ratio": rss[end] / rss[first], "state_dir_mib": dir_bytes(directory) / 2**20,
                             "wall_s": time.monotonic() - started}).write(args.json)


if __name__ == "__main__":
    main()
