"""Replay engine figures: sustained events/s into a file, and send lag at fixed rates.

Run: `scripts/pipetune` sets up the venv; then `python -m bench.replay [--json PATH]`.
Sustained rate: a schedule far faster than the engine can write, so it runs flat out; the figure is
events / seconds until the last write. Send lag: how late events went out at 1k and 10k ev/s.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.result import BenchResult
from replay import arrivals
from replay.engine import run
from replay.sinks import SinkSpec


def sustained_eps(processes: int, seconds: float = 2.0, offered_eps: float = 150_000) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        result = run(arrivals.steady(offered_eps, seconds), SinkSpec("file", str(Path(tmp) / "bench.log")),
                     run_id="bench", processes=processes)
    return result.events / float(result.sent_at_s.max())


def send_lag_ms(rate_eps: float, seconds: float = 5.0) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        result = run(arrivals.steady(rate_eps, seconds, poisson=True, seed=1),
                     SinkSpec("file", str(Path(tmp) / "bench.log")), run_id="lag")
    return result.lag_ms(50), result.lag_ms(99), result.achieved_eps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path, help="also write the result (bench/result.py) here")
    args = parser.parse_args()
    result = BenchResult.start("bench.replay")
    figures = {
        "sustained_eps_1_process": sustained_eps(1),
        "sustained_eps_2_processes": sustained_eps(2),
    }
    for rate in (1_000, 10_000):
        p50, p99, achieved = send_lag_ms(rate)
        figures[f"send_lag_p50_ms_at_{rate}"] = p50
        figures[f"send_lag_p99_ms_at_{rate}"] = p99
        figures[f"achieved_eps_at_{rate}"] = achieved
    table = Table(title="pipetune replay into a file (goals: >= 50k ev/s from one process, P99 lag <= 5 ms at 10k ev/s)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in figures.items():
        table.add_row(name, f"{value:,.3f}" if "ms" in name else f"{value:,.0f}")
    Console().print(table)
    if args.json:
        result.finish([{"figure": name, "value": value} for name, value in figures.items()]).write(args.json)


if __name__ == "__main__":
    main()
