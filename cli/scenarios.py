"""`pipetune scenarios`: the paper's study (Tables 9-11) run on the twin, beside the paper's figures; with
`--pipeline FILE`, the five scenarios on that running testbed too (testbed.scenarios), beside the twin and the paper."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from models.paper_scenarios import (BURST_FACTOR, BURST_SCENARIOS, PAPER, PAPER_BURST, PAPER_OVAT_REFERENCE_P95_S,
                                    SCENARIOS, burst_window_s,
                                    run_study)
from models.scenario_study import REAL_SCENARIOS, twin_beside_real, verdicts
from models.scenario_study import collapse_rate as find_collapse
from models.twin import available, load
from replay.profiles import Profile, WorkloadSpec, build_schedule

SAME_WITHIN = 0.03  # relative P95 change counted as "no change" when comparing directions


# Real runs are minutes each on a shared 2-core machine: short by default (the twin's stay the paper's 180 s x 5).
REAL_DURATION_S, REAL_REPS, REAL_WARMUP_S = 45.0, 1, 10.0
TWIN_REPS_BESIDE_REAL = 3
PAPER_RATE_EPS = 300.0


def scenarios_command(
    calibration: Optional[str] = typer.Option(None, help=f"calibration name ({', '.join(available())}) or YAML "
                                              "path (default: paper-2vcpu, the paper's node; paper-testbed, the "
                                              "testbed's own pipeline, with --pipeline or --report)"),
    rate: float = typer.Option(300.0, help="offered load, events per second (Poisson)"),
    duration: Optional[float] = typer.Option(None, help="seconds of load per run (default: the paper's 180 on the "
                                                        f"twin, {REAL_DURATION_S:g} with --pipeline)"),
    reps: Optional[int] = typer.Option(None, help="repetitions per scenario, each with its own seed (default: 5 on "
                                                  f"the twin, {REAL_REPS} with --pipeline)"),
    only: str = typer.Option("", help="comma-separated subset: " + ",".join(s.name for s in SCENARIOS) + ",burst"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="write the figures as JSON here"),
    plots: Optional[Path] = typer.Option(None, help="write PNG plots into this directory"),
    seed: int = typer.Option(0, help="base seed; repetition r uses seed + 1000 r"),
    pipeline: Optional[Path] = typer.Option(None, "--pipeline", help="a running testbed's pipeline file with nginx in "
                                            "front (e.g. the paper's): run the five scenarios on it for real too"),
    collapse_rate: Optional[float] = typer.Option(None, "--collapse-rate", help="with --pipeline, the second rate, "
                                                  "ev/s (default: the lowest at which the twin's Zero-Wait falls "
                                                  "behind; 0: none)"),
    warmup: float = typer.Option(REAL_WARMUP_S, help="with --pipeline, seconds of each run's load before its window"),
    report: Optional[list[Path]] = typer.Option(None, "--report", help="print a saved `--pipeline --json` "
                                                "document's tables again (no runs); repeat it for several"),
    fit_to: Optional[Path] = typer.Option(None, "--fit", help="with --report: fit the twin (of --calibration: its "
                                          "Spark stage and request round trip) to the documents' real runs, print "
                                          "its P95 error per run before and after and whether it picks the real "
                                          "runs' winner and collapse, write the calibration here"),
) -> None:
    """Run Baseline, Zero-Wait, Micro-Batching, I/O Control, Hybrid, the OVAT variants and the burst
    check on the twin and print a Table-9-style comparison with the paper's figures; with --pipeline,
    the scenarios on the running testbed too, beside the twin's and the paper's."""
    if fit_to is not None and not report:
        raise typer.BadParameter("needs --report FILE (a saved `scenarios --pipeline --json` document)",
                                 param_hint="--fit")
    # The real runs are of the testbed's pipeline, which has no Logstash: its twin is paper-testbed's.
    calibration = calibration or ("paper-testbed" if pipeline is not None or report else "paper-2vcpu")
    if report:
        docs = [report_command(path) for path in report]
        if fit_to is not None:
            fit_command(docs, calibration, fit_to)
        return
    names = [n.strip() for n in only.split(",") if n.strip()] or [s.name for s in SCENARIOS] + ["burst"]
    try:
        cal = load(calibration)
    except (KeyError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--calibration") from None
    if rate <= 0:
        raise typer.BadParameter(f"{rate:g}: must be > 0 ev/s", param_hint="--rate")
    if duration is not None and duration <= 0:
        raise typer.BadParameter(f"{duration:g}: must be > 0 s", param_hint="--duration")
    if reps is not None and reps < 1:
        raise typer.BadParameter(f"{reps}: must be at least 1", param_hint="--reps")
    if pipeline is not None:
        real_command(pipeline, cal, rate, duration or REAL_DURATION_S, reps or REAL_REPS, warmup, only, collapse_rate,
                     json_path, seed)
        return
    duration = duration or 180.0
    reps = reps or 5

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


def real_command(pipeline: Path, cal, rate: float, duration: float, reps: int, warmup: float, only: str,
                 collapse_rate: Optional[float], json_path: Optional[Path], seed: int) -> None:
    """`--pipeline`: the scenarios on the running testbed at --rate and at the collapse rate, beside the twin's."""
    from testbed import lifecycle
    from testbed.pipeline import PipelineError, load_pipeline
    from testbed.processes import TestbedError
    from testbed.scenarios import nginx_url, study

    names = [n.strip() for n in only.split(",") if n.strip()] or list(REAL_SCENARIOS)
    known = [s.name for s in SCENARIOS]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise typer.BadParameter(f"unknown or not run for real: {', '.join(unknown)}; known: {', '.join(known)}",
                                 param_hint="--only")
    if not 0 <= warmup < duration:
        raise typer.BadParameter(f"{warmup:g}: allowed 0 to --duration ({duration:g}) excluded", param_hint="--warmup")
    if collapse_rate is not None and collapse_rate < 0:
        raise typer.BadParameter(f"{collapse_rate:g}: must be >= 0 ev/s (0: no collapse run)",
                                 param_hint="--collapse-rate")
    try:
        spec = load_pipeline(pipeline)
        nginx_url(spec)
    except (PipelineError, TestbedError, OSError) as err:
        raise typer.BadParameter(str(err), param_hint="--pipeline") from None
    if not lifecycle.running(spec):
        raise typer.BadParameter(f"the testbed {spec.name!r} is not running; start it with `pipetune testbed up "
                                 f"--pipeline {pipeline}`", param_hint="--pipeline")
    console = Console(width=max(Console().width, 150))

    def arrivals(rate_eps: float, run_seed: int, length_s: float = duration) -> np.ndarray:
        spec_ = WorkloadSpec(rate_eps=rate_eps, duration_s=length_s, seed=run_seed, poisson=True)
        return build_schedule(spec_).schedule.times_s

    if collapse_rate is None:
        length_s = max(duration, 60.0)  # long enough for a backlog to show on the twin
        found = find_collapse(cal, lambda r, s: arrivals(r, s, length_s), duration_s=length_s, seed=seed)
        console.print(f"collapse rate: {found.why()}")
        collapse_rate = found.rate_eps or 0.0
    rates = [(rate, "paper" if rate == PAPER_RATE_EPS else "chosen")] + ([(collapse_rate, "collapse")] if collapse_rate else [])

    def twin(rate_eps: float, configs: dict) -> dict:
        return twin_beside_real(cal, configs, arrivals, rate_eps=rate_eps, duration_s=duration,
                                reps=TWIN_REPS_BESIDE_REAL, seed=seed)

    try:
        doc = study(spec, names, rates, duration, warmup, reps, twin, seed=seed, say=console.print)
    except TestbedError as err:
        console.print(f"[red]error: {err}[/]")
        raise typer.Exit(2) from None
    doc["calibration"] = cal.name
    doc["twin_reps"] = TWIN_REPS_BESIDE_REAL
    print_real(doc, console)
    if json_path:
        json_path.write_text(json.dumps(_finite(doc), indent=2) + "\n")
        console.print(f"figures written to {json_path}")


def print_real(doc: dict, console: Console) -> None:
    """A real study's tables and verdicts (`--pipeline`'s, or a saved `--json` document's with `--report`)."""
    labels = {s.name: s.label for s in SCENARIOS}
    for comparison in doc["comparisons"]:
        console.print(real_table(comparison, doc))
        console.print(real_verdict(comparison))
        for name, moved in comparison.get("ovat_vs_hybrid", {}).items():
            console.print(f"{labels[name]} against Hybrid: " + ", ".join(
                f"{side} {direction(value)} ({value:+.0%})" for side, value in moved.items()))
    error = doc["median_abs_twin_p95_error"]
    console.print(f"median |twin P95 - real P95| / real P95 over every run: "
                  f"{'-' if error is None else f'{error:.0%}'}. Real figures are one window per run on a shared 2-core "
                  "machine: noisy.")


def report_command(path: Path) -> dict:
    """`--report`: print a saved `--pipeline --json` document's tables again, its verdicts worked out anew."""
    try:
        doc = json.loads(path.read_text())
        for comparison in doc["comparisons"]:
            comparison.update(verdicts(comparison["scenarios"], comparison["kind"]))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise typer.BadParameter(f"{path}: not a saved `scenarios --pipeline --json` document ({err!r})",
                                 param_hint="--report") from None
    print_real(doc, Console(width=max(Console().width, 150)))
    return doc


def fit_command(docs: list[dict], calibration: str, out: Path) -> None:
    """`--fit`: the twin of `calibration` fitted to the documents' real runs; the error per run, the verdicts."""
    from models.scenario_fit import agreements, fit_scenarios, median_abs
    from testbed.calibration_design import calibration_yaml

    try:
        base = load(calibration)
    except (KeyError, ValueError) as err:
        raise typer.BadParameter(str(err), param_hint="--calibration") from None
    console = Console(width=max(Console().width, 150))
    try:
        with console.status(f"fitting {calibration} to the real runs of {len(docs)} document(s): each evaluation runs "
                            "the twin once per run (minutes)"):
            result, errors = fit_scenarios(docs, base)
    except (KeyError, ValueError) as err:  # a calibration without Spark, documents that cannot be fitted together
        raise typer.BadParameter(str(err), param_hint="--calibration, --report") from None
    table = Table(title=f"the twin's P95 against the real runs: {calibration} and fitted "
                        f"({', '.join(f'{k.split(chr(95) * 2)[1]} {v:.3g}' for k, v in result.values.items())})")
    for column in ("scenario", "ev/s", "real P95 s", "twin P95 s", "error", "fitted P95 s", "error", "kept up: real",
                   "twin", "fitted"):
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for i, e in enumerate(errors):
        point = e.run.measurement
        last_of_its_comparison = i + 1 == len(errors) or errors[i + 1].run.comparison != e.run.comparison
        table.add_row(e.run.scenario, f"{point.rate_eps:g}", f"{point.p95_s:.2f}", f"{e.base_p95_s:.2f}",
                      f"{e.base_error:+.0%}", f"{e.fitted_p95_s:.2f}", f"{e.fitted_error:+.0%}",
                      *("yes" if up else "[red]NO[/]" for up in (e.run.keeps_up, e.base_keeps_up, e.fitted_keeps_up)),
                      end_section=last_of_its_comparison)
    console.print(table)
    console.print(f"median |error|: {median_abs([e.base_error for e in errors]):.0%} before, "
                  f"{median_abs([e.fitted_error for e in errors]):.0%} after ({result.evaluations} evaluations)")
    for fitted in (False, True):
        found = agreements(errors, fitted)
        console.print(f"{'fitted' if fitted else 'before the fit'}: same winner in "
                      f"{sum(a.same_winner for a in found)} of {len(found)} comparisons, same collapse in "
                      f"{sum(a.same_collapse for a in found)}")
        for a in found:
            if not (a.same_winner and a.same_collapse):
                console.print(f"  {a.rate_eps:g} ev/s: winner real {' = '.join(a.real_winners) or 'none'}, twin "
                              f"{' = '.join(a.twin_winners) or 'none'}; fell behind: real "
                              f"{', '.join(a.real_behind) or 'none'}, twin {', '.join(a.twin_behind) or 'none'}")
    out.write_text(calibration_yaml(result.calibration, result.values, len(errors), result.loss))
    console.print(f"calibration written to {out}")


def real_table(comparison: dict, doc: dict) -> Table:
    """Per scenario: the real run (median of reps), the twin's at the same rate, the paper's (at 300 ev/s)."""
    labels = {s.name: s.label for s in SCENARIOS}
    table = Table(title=f"\\[{comparison['kind']}] {comparison['rate_eps']:g} ev/s on {doc['pipeline']} (real: "
                        f"{doc['duration_s']:g} s load, window after {doc['warmup_s']:g} s, {doc['reps']} rep(s); "
                        f"twin {doc['calibration']}, {doc['twin_reps']} reps; latency {doc.get('latency', 'to the table')})")
    for column in ("scenario", "", "mean s", "P95 s", "out ev/s", "offered ev/s", "out/in", "keeps up",
                   "twin P95 err"):
        table.add_column(column, justify="left" if column in ("scenario", "") else "right")
    for name, row in comparison["scenarios"].items():
        for side in ("real", "twin", "paper"):
            f = row[side]
            if side == "paper":
                if not f:
                    continue
                cells = [_paper(f, "mean_s"), _paper(f, "p95_s"), _paper(f, "peak_throughput_eps", 0) + " peak",
                         "300", "", "", ""]
            else:
                cells = [f"{f['mean_s']:.2f}", f"{f['p95_s']:.2f}", f"{f['throughput_eps']:.0f}",
                         f"{f['offered_eps']:.0f}", f"{f['out_in']:.0%}", "yes" if f["keeps_up"] else "[red]NO[/]",
                         f"{row['twin_p95_error']:+.0%}" if side == "twin" and row["twin_p95_error"] is not None
                         and math.isfinite(row["twin_p95_error"]) else ""]
            style = "[dim]{}[/]" if side == "paper" else "{}"
            table.add_row(labels[name] if side == "real" else "", style.format(side), *(style.format(c) for c in cells),
                          end_section=side == ("paper" if row["paper"] else "twin"))
    return table


def real_verdict(comparison: dict) -> str:
    """Same winner (one the sides share among their ties), same collapse?"""
    won = comparison["winner"]
    text = " ".join(f"{side} {' = '.join(won[side]) or 'none'}," for side in won)
    text = f"winner (lowest P95 among those keeping up): {text[:-1]}"
    same = bool(set(won["real"]) & set(won["twin"]))
    behind = comparison["behind"]
    text += (f" ({'same' if same else 'DIFFERENT'}); fell behind: real {', '.join(behind['real']) or 'none'}, twin "
             f"{', '.join(behind['twin']) or 'none'} ({'same' if behind['real'] == behind['twin'] else 'DIFFERENT'})")
    return text


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

