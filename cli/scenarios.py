"""`pipetune scenarios`: the paper's study (Tables 9-11) run on the twin, beside the paper's figures."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from models.paper_scenarios import (BURST_FACTOR, BURST_SCENARIOS, PAPER, PAPER_BURST, SCENARIOS, burst_window_s,
                                    run_study)
from models.twin import available, load
from replay.profiles import Profile, WorkloadSpec, build_schedule

# Table 10 compares OVAT variants with its own Hybrid runs (P95 29.06 s), not with Baseline.
PAPER_OVAT_REFERENCE_P95_S = 29.06
SAME_WITHIN = 0.03  # relative P95 change counted as "no change" when comparing directions


def scenarios_command(
    calibration: str = typer.Option("paper-2vcpu", help=f"calibration name ({', '.join(available())}) or YAML path"),
    rate: float = typer.Option(300.0, help="offered load, events per second (Poisson)"),
    duration: float = typer.Option(180.0, help="seconds of load per run (the paper: 180)"),
    reps: int = typer.Option(5, min=1, help="repetitions per scenario, each with its own seed"),
    only: str = typer.Option("", help="comma-separated subset: " + ",".join(s.name for s in SCENARIOS) + ",burst"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="write the figures as JSON here"),
    plots: Optional[Path] = typer.Option(None, help="write PNG plots into this directory"),
    seed: int = typer.Option(0, help="base seed; repetition r uses seed + 1000 r"),
) -> None:
    """Run Baseline, Zero-Wait, Micro-Batching, I/O Control, Hybrid, the OVAT variants and the burst
    check on the twin and print a Table-9-style comparison with the paper's figures."""
    names = [n.strip() for n in only.split(",") if n.strip()] or [s.name for s in SCENARIOS] + ["burst"]
    try:
        cal = load(calibration)
    except (KeyError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--calibration") from None
    if rate <= 0 or duration <= 0:
        raise typer.BadParameter("--rate and --duration must be > 0")

    def arrivals(kind: str, run_seed: int) -> np.ndarray:
        burst = {"profile": Profile.burst, "burst_window_s": burst_window_s(duration), "burst_factor": BURST_FACTOR}
        spec = WorkloadSpec(rate_eps=rate, duration_s=duration, seed=run_seed, poisson=True,
                            **(burst if kind == "burst" else {}))
        return build_schedule(spec).schedule.times_s

    try:
        result = run_study(cal, arrivals, rate_eps=rate, duration_s=duration, reps=reps, names=names, seed=seed)
    except KeyError as exc:
        raise typer.BadParameter(str(exc.args[0]), param_hint="--only") from None
    summary = result.summary()
    console = Console(width=max(Console().width, 150))
    if result.scenarios:
        console.print(scenario_table(summary))
    if result.burst:
        console.print(burst_table(summary))
    console.print("Absolute latencies differ from the paper's by design; see docs/twin.md (why, and what "
                  "each disagreement means).")
    if json_path:
        json_path.write_text(json.dumps(_finite(summary), indent=2) + "\n")
        console.print(f"figures written to {json_path}")
    if plots:
        from cli.scenario_plots import write_plots

        written = write_plots(result, plots)
        console.print(f"plots written: {', '.join(str(p) for p in written)}")


def direction(relative: float) -> str:
    if math.isnan(relative):
        return "?"
    return "same" if abs(relative) <= SAME_WITHIN else ("lower" if relative < 0 else "higher")


def verdict(name: str, summary: dict) -> str:
    """Does the twin move P95 the same way the paper saw (vs Baseline; OVAT vs Hybrid)?"""
    rows = summary["scenarios"]
    reference = "hybrid" if name.startswith("ovat") else "baseline"
    if name == "baseline" or reference not in rows:
        return ""
    twin = direction(rows[name]["p95_s"] / rows[reference]["p95_s"] - 1)
    paper_ref = PAPER_OVAT_REFERENCE_P95_S if reference == "hybrid" else PAPER["baseline"]["p95_s"]
    paper = direction(PAPER[name]["p95_s"] / paper_ref - 1)
    if twin == paper:
        return f"agrees: {twin} than {reference}" if twin != "same" else f"agrees: same as {reference}"
    return f"[bold red]DISAGREES[/]: twin {twin}, paper {paper} than {reference}"


def scenario_table(summary: dict) -> Table:
    """One twin row and one paper row per scenario; the last column says whether P95 moves alike."""
    table = Table(title=f"Scenarios on the twin ({summary['calibration']}, {summary['rate_eps']:g} ev/s, "
                        f"{summary['duration_s']:g} s, {summary['reps']} reps) beside the paper")
    for column in ("scenario", "", "mean E2E s", "P95 s", "steady P95", "peak ev/s", "sustained",
                   "packets/s", "backlog", "p vs base", "P95 vs paper"):
        table.add_column(column, justify="left" if column in ("scenario", "", "P95 vs paper") else "right")
    labels = {s.name: s.label for s in SCENARIOS}
    for name, row in summary["scenarios"].items():
        paper = PAPER.get(name, {})
        table.add_row(labels[name], "twin", f"{row['mean_s']:.2f} ± {row['mean_s_sd']:.2f}",
                      f"{row['p95_s']:.2f} ± {row['p95_s_sd']:.2f}", f"{row['steady_p95_s']:.2f}",
                      f"{row['peak_throughput_eps']:.0f}", f"{row['sustained_throughput_eps']:.0f}",
                      f"{row['packets_per_s']:.0f}", f"{row['backlog_end_events']:.0f}",
                      _p(row["p_value_vs_baseline"]), verdict(name, summary))
        table.add_row("", "[dim]paper[/]", *(f"[dim]{v}[/]" for v in (
            _paper(paper, "mean_s"), _paper(paper, "p95_s"), _paper(paper, "steady_p95_s"),
            _paper(paper, "peak_throughput_eps", 0), "", _paper(paper, "packets_per_s", 0), "",
            _paper(paper, "p_value", 4))), "", end_section=True)
    return table


def burst_table(summary: dict) -> Table:
    table = Table(title="Burst check (load x2 for the middle sixth of the run) — twin | paper")
    for column in ("scenario", "P95 during burst s", "max stage lag s", "recovery P95 s"):
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for name in BURST_SCENARIOS:
        row = summary["burst"].get(name)
        if row is None:
            continue
        paper = PAPER_BURST[name]
        table.add_row(name,
                      f"{row['burst_p95_s']:.2f} ± {row['burst_p95_s_sd']:.2f} | {paper['burst_p95_s']}",
                      f"{row['max_stage_lag_s']:.2f} | {paper['max_stage_lag_s']}",
                      f"{row['recovery_p95_s']:.2f} ± {row['recovery_p95_s_sd']:.2f} | {paper['recovery_p95_s']}")
    return table


def _paper(figures: dict, key: str, digits: int = 2) -> str:
    return f"{figures[key]:.{digits}f}" if key in figures else "-"


def _p(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.4f}"


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value

