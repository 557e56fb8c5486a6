"""`pipetune tradeoff`: P95 against CPU for the configs a run measured, the front of the best, and the presets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NoReturn, Optional

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from cli.cost import core_share
from controller.fresh_windows import measure_fresh
from controller.state import StateStore, load_pool_dirs
from models.observation import pipeline_cpu_cores
from models.policy import Policy
from models.presets import PRESETS, preset
from models.tradeoff import STATIC_CHOICES, Point, best_within, front, of_run
from models.twin import available, load

# Budgets shown, as the CPU the defaults use plus this share of a core (None: unbounded)
BUDGETS_OVER_DEFAULTS = (0.0, 0.05, 0.25, None)


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _pool_store(state_dir: Path, pool: str | None) -> StateStore:
    """The state of the run's only pool, or of `pool`; a clear error for a directory that is not a run's."""
    if not state_dir.is_dir():
        _fail(f"--state-dir: {state_dir} is not a directory (a run's, as `pipetune autotune --state-dir` writes)")
    pools = load_pool_dirs(state_dir)
    if pool is None and len(pools) > 1:
        _fail(f"--pool: the run tuned pools {', '.join(p.name for p in pools)}; name one")
    chosen = pools[0] if pool is None else next((p for p in pools if p.name == pool), None)
    if chosen is None:
        _fail(f"--pool: no pool {pool!r} in {state_dir}; pools: {', '.join(p.name for p in pools)}")
    if not (chosen.directory / "observations.jsonl").is_file():
        _fail(f"--state-dir: {chosen.directory} holds no measured window (observations.jsonl)")
    return StateStore(chosen.directory)


def _table(shown: list[Point], on_front: list[Point], defaults: Point | None, rate_eps: float) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1),
                  title=f"P95 against the pipeline's CPU (% of a core) at {rate_eps:.0f} ev/s")
    for col in ("config", "P95 s", "CPU", "vs defaults", "windows", "front"):
        table.add_column(col, justify="left" if col == "config" else "right", no_wrap=True)
    for point in sorted(shown, key=lambda p: p.cpu_cores):
        over = f"{100 * point.cpu_over(defaults):+.1f} %" if defaults else "–"
        mark = "yes" if point in on_front else "" if point.kept_up else "behind"
        table.add_row(point.label, f"{point.p95_s:.4f}", core_share(point.cpu_cores), over, str(point.windows), mark)
    return table


def _budgets(shown: list[Point], defaults: Point | None) -> list[dict]:
    """The fastest point within each budget: the defaults' own CPU plus a share of a core, and unbounded."""
    rows = []
    for extra in BUDGETS_OVER_DEFAULTS:
        if extra is not None and defaults is None:
            continue
        budget = float("inf") if extra is None else defaults.cpu_cores + extra
        best = best_within(shown, budget)
        rows.append({"budget": "unbounded" if extra is None else f"defaults + {100 * extra:.0f} % of a core",
                     "budget_cores": None if extra is None else budget,
                     "best": best.label if best else None, "p95_s": best.p95_s if best else None})
    return rows


def _plot(shown: list[Point], on_front: list[Point], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    fig, ax = plt.subplots(figsize=(8, 5))
    measured = [p for p in shown if p.label not in PRESETS]
    ax.scatter([100 * p.cpu_cores for p in measured], [p.p95_s for p in measured], s=14, color="tab:gray",
               label="configs the run measured")
    ax.step([100 * p.cpu_cores for p in on_front], [p.p95_s for p in on_front], where="post", color="tab:blue",
            label="front (none faster for less CPU)")
    at: dict[tuple[float, float], list[str]] = {}  # presets that measure alike share one marker
    for p in shown:
        if p.label in PRESETS:
            at.setdefault((100 * p.cpu_cores, p.p95_s), []).append(p.label)
    for (cpu, p95), labels in at.items():
        ax.scatter([cpu], [p95], marker="D", color="tab:orange")
        ax.annotate(", ".join(labels), (cpu, p95), fontsize=8, xytext=(4, 4), textcoords="offset points")
    ax.set(yscale="log", xlabel="the pipeline's CPU, % of a core", ylabel="P95 end-to-end, s", title=title)
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def tradeoff_command(
    state_dir: Path = typer.Option(..., help="A run's state directory (`pipetune autotune --state-dir`)."),
    pool: Optional[str] = typer.Option(None, help="The pool to show, when the run tuned several."),
    calibration: Optional[str] = typer.Option(None, help=f"Twin: also measure the static presets ({', '.join(STATIC_CHOICES)}) on this calibration ({', '.join(available())}, or a YAML path), at --rate."),
    rate: Optional[float] = typer.Option(None, help="Load the CPU is shown at and the presets measured at, events/s (default: the run's median offered load)."),
    window: float = typer.Option(30.0, help="Window length for the presets' fresh measurement, seconds (> 0)."),
    plot: Optional[Path] = typer.Option(None, help="PNG to write (default: STATE_DIR/tradeoff.png)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the points and the front as JSON here."),
) -> None:
    """Show what each config a run measured costs in CPU for its P95, the front of the best, the static presets
    beside them (on the twin), and the fastest config within each CPU budget."""
    store = _pool_store(state_dir, pool)
    if window <= 0:
        _fail(f"--window: {window} is not above 0 seconds")
    if rate is not None and rate <= 0:
        _fail(f"--rate: {rate} is not above 0 events/s")
    run = of_run(store.observations(), {name: preset(name) for name in STATIC_CHOICES}, rate)
    if run is None:
        _fail(f"--state-dir: {store.dir} holds no window with load")
    rate_eps, shown = run.rate_eps, run.points
    if calibration is not None:
        try:
            cal = load(calibration)
        except (KeyError, ValueError) as err:
            _fail(f"--calibration: {err}")
        shown = [p for p in shown if p.label not in STATIC_CHOICES]
        for name in STATIC_CHOICES:
            fresh = measure_fresh(preset(name), cal, rate_eps, window)
            shown.append(Point(name, preset(name), fresh.p95_s, pipeline_cpu_cores(fresh.cpu_cores), 3,
                               fresh.throughput_ratio >= Policy().min_throughput_ratio))
    if not shown:
        _fail(f"--state-dir: no window of {store.dir} has both a P95 and the pipeline's CPU")
    on_front = front(shown)
    defaults = next((p for p in shown if p.label == "defaults"), None)
    console = Console(width=80)
    console.print(_table(shown, on_front, defaults, rate_eps))
    budgets = _budgets(shown, defaults)
    for row in budgets:
        best = f"{row['best']}, P95 {row['p95_s']:.4f} s" if row["best"] else "no config that kept up"
        console.print(f"within {row['budget']}: {best}", highlight=False)
    plot_path = plot or store.dir / "tradeoff.png"
    _plot(shown, on_front, plot_path, f"{store.dir.name}: P95 against CPU at {rate_eps:.0f} ev/s")
    console.print(f"plot: {plot_path}")
    if json_path is not None:
        def doc(p: Point) -> dict:
            return {"label": p.label, "p95_s": p.p95_s, "cpu_cores": p.cpu_cores, "windows": p.windows,
                    "kept_up": p.kept_up, "config": dict(p.config)}
        json_path.write_text(json.dumps({"points": [doc(p) for p in shown], "front": [p.label for p in on_front],
                                         "budgets": budgets}, indent=1))
