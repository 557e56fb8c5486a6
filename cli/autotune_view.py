"""What `pipetune autotune` shows: the windows as they come, the end summary, and the run's plot."""

from __future__ import annotations

from collections import Counter, deque
from pathlib import Path
from typing import Iterable

from rich.console import Console
from rich.live import Live
from rich.table import Table

from cli.cost import core_share, per_second, shipper_cores
from cli.tables import Column, plain_line, print_rows, render_table
from controller.state import Decision

SHOWN_ROWS = 14  # the live table's last windows; more would scroll off a laptop's terminal


def _short_change(change: dict) -> str:
    parts = [f"{name.rsplit('.', 1)[-1]}={new:.4g}" if isinstance(new, (int, float)) else f"{name}={new}"
             for name, (_, new) in change.items()]
    return ", ".join(parts[:3]) + (f" +{len(parts) - 3}" if len(parts) > 3 else "") if parts else "–"


# In a narrow terminal the change and why a window did what it did come first, then the best P95 so far
WINDOW_COLUMNS = (Column("window"), Column("action", "left", plain="{value}"),
                  Column("change", "left", 1, flexible=True, max_width=38),
                  Column("P95 s", plain="P95 {value} s"),
                  # the window's cost beside its P95: the shippers' CPU as a share of a core, Produce requests/s
                  Column("CPU", plain="CPU {value}"), Column("req/s", priority=3, plain="{value} req/s"),
                  Column("out/in"),
                  Column("offered ev/s", priority=4, plain="offered {value} ev/s"),
                  Column("best P95 s", priority=2, plain="best {value} s"),
                  Column("why", "left", 1, flexible=True, max_width=64, plain="why: {value}"))


class WindowNumbers:
    """Each window's number in this run, of the run's total: the daemon numbers its decisions across a resumed
    state directory (and a warm-up window it could not read takes a number too), but `--windows 25` reads as
    1/25 to 25/25. Counted per pool; the revert on exit is no window."""

    def __init__(self, total: int | None) -> None:
        self.total = total  # None: a run until stopped
        self.shown: Counter[str] = Counter()

    def label(self, d: Decision, pool: str = "") -> str:
        if d.action == "revert":
            return "on exit"
        self.shown[pool] += 1
        return f"{self.shown[pool]}/{self.total}" if self.total else f"{self.shown[pool]}"


def _row(d: Decision, number: str, best: str) -> tuple[str, ...]:
    observed = d.observed
    return (number, d.action, _short_change(d.change), f"{observed['p95_s']:.3f}",
            core_share(shipper_cores(observed.get("cpu_cores"))), per_second(observed.get("produce_requests_per_s")),
            f"{observed['throughput_ratio']:.1%}", f"{observed['offered_eps']:.0f}", best, d.reason)


def pool_line(pool: str, d: Decision, numbers: WindowNumbers) -> str:
    """One pool's window as one plain line, the pool first: the pools' windows interleave as they come."""
    return plain_line(WINDOW_COLUMNS, _row(d, numbers.label(d, pool), ""), prefix=f"pool {pool}: ")


class WindowView:
    """The windows as they come: in a terminal, a live table of the last ones that fits its width; anywhere
    else, one plain line per window (a pipe or a log file cannot redraw)."""

    def __init__(self, total: int | None, console: Console) -> None:
        self.numbers = WindowNumbers(total)
        self.console = console
        self.rows: deque[tuple[str, ...]] = deque(maxlen=SHOWN_ROWS)
        self.best = float("inf")
        self._live = Live(self._render(), console=console, refresh_per_second=4) if console.is_terminal else None

    def __enter__(self) -> "WindowView":
        if self._live:
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live:
            self._live.__exit__(*exc)

    def add(self, d: Decision) -> None:
        if not d.guardrail:
            self.best = min(self.best, d.observed["p95_s"])
        row = _row(d, self.numbers.label(d), f"{self.best:.3f}")
        self.rows.append(row)
        if self._live:
            self._live.update(self._render())
        else:
            self.console.print(plain_line(WINDOW_COLUMNS, row), markup=False, highlight=False, soft_wrap=True)

    def _render(self) -> Table:
        return render_table("pipetune autotune", WINDOW_COLUMNS, list(self.rows), self.console.width)


def new_plot_path(directory: Path) -> Path:
    """Where a run in `directory` writes its plot: autotune.png, or on a resumed state directory the first of
    autotune-2.png, autotune-3.png, ... not yet written, so an earlier run's plot stays."""
    path, n = directory / "autotune.png", 1
    while path.exists():
        n += 1
        path = directory / f"autotune-{n}.png"
    return path


def plot_run(decisions: Iterable[Decision], path: Path, summary: dict | None, where: str) -> None:
    """P95 (log scale) and output/input over the run, changes in green, rollbacks in red, the fresh windows dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    decisions = [d for d in decisions if d.action != "revert"]  # a revert on exit measured no window
    t = [d.t_s for d in decisions]
    p95 = [d.observed["p95_s"] for d in decisions]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax1.plot(t, p95, "o-", ms=3, label="window P95")
    for d in decisions:
        if d.action in ("explore", "return", "remeasure") and d.change:
            ax1.axvline(d.t_s, color="tab:green", alpha=0.25, lw=1)
        if d.action == "rollback":
            ax1.axvline(d.t_s, color="tab:red", alpha=0.7, lw=1.5)
    for name, color in (("defaults", "tab:gray"), ("hybrid", "tab:orange"), ("final", "tab:blue")) if summary else ():
        ax1.axhline(summary[name]["p95_s"], color=color, ls="--", lw=1, label=f"{name} (fresh windows)")
    ax1.set_yscale("log")
    ax1.set_ylabel("P95 end-to-end (s)")
    ax1.set_title(f"pipetune autotune on {where} — green: config changes, red: rollbacks")
    if summary:
        ax1.legend(fontsize=8)
    ax2.plot(t, [d.observed["throughput_ratio"] for d in decisions], "o-", ms=3, color="tab:purple")
    ax2.set_ylabel("output / input")
    ax2.set_xlabel("simulated seconds" if summary else "seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


SUMMARY_COLUMNS = (Column("config", "left", plain="{value}:"), Column("P95 s", plain="P95 {value} s"),
                   Column("P50 s", priority=2, plain="P50 {value} s"), Column("out/in"),
                   Column("CPU", plain="CPU {value}"), Column("req/s", priority=3, plain="{value} req/s"),
                   Column("P95 vs final", priority=1, plain="P95 {value} the final's"))


def _summary_row(name: str, measured: dict, final_p95_s: float) -> tuple[str, ...]:
    return (name, f"{measured['p95_s']:.3f}", f"{measured['p50_s']:.3f}", f"{measured['throughput_ratio']:.1%}",
            core_share(shipper_cores(measured["cpu_cores"])), per_second(measured["produce_requests_per_s"]),
            f"×{measured['p95_s'] / final_p95_s:.1f}")


def print_summary(console: Console, summary: dict) -> None:
    rows = [_summary_row(name, summary[name], summary["final"]["p95_s"]) for name in ("final", "defaults", "hybrid")]
    print_rows(console, "fresh windows at the paper's load — pipetune's final config vs defaults and Hybrid",
               SUMMARY_COLUMNS, rows)
