"""`pipetune autotune`: the daemon on the twin (the embedded default) or on the live testbed through its
node agent, with a live table and a summary."""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from controller.api_cmd import require_token, start_api_thread
from controller.daemon import Daemon, Decision
from controller.live import LivePipeline
from controller.live_load import BackgroundLoad
from controller.pipelines import Pipeline, PipelineUnavailable, TwinPipeline
from controller.state import StateStore
from controller.twin_runs import PROFILES, measure_fresh, workload
from models.learning import Box, tuned_names
from models.policy import Policy
from models.presets import preset
from models.screen import TwinScreen
from models.strategies import STRATEGIES
from models.twin import available, load
from testbed.endpoints import live_pipeline
from testbed.pipeline import PipelineError, PipelineSpec, load_pipeline

err = Console(stderr=True)
_SHOWN_ROWS = 14


def _short_change(change: dict) -> str:
    parts = [f"{name.rsplit('.', 1)[-1]}={new:.4g}" if isinstance(new, (int, float)) else f"{name}={new}"
             for name, (_, new) in change.items()]
    return ", ".join(parts[:3]) + (f" +{len(parts) - 3}" if len(parts) > 3 else "") if parts else "–"


class _LiveTable:
    """The last windows: change, P95, throughput, best so far, and why."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.rows: list[tuple[str, ...]] = []
        self.best = float("inf")

    def add(self, d: Decision) -> None:
        ok = not d.guardrail
        if ok:
            self.best = min(self.best, d.observed["p95_s"])
        action = f"[red]{d.action}[/]" if d.action == "rollback" else d.action
        self.rows.append((f"{d.window + 1}/{self.total}", action, _short_change(d.change),
                          f"{d.observed['p95_s']:.3f}", f"{d.observed['throughput_ratio']:.1%}",
                          f"{d.observed['offered_eps']:.0f}", f"{self.best:.3f}", d.reason))

    def render(self) -> Table:
        table = Table(title="pipetune autotune", expand=False)
        for col, justify in (("window", "right"), ("action", "left"), ("change", "left"), ("P95 s", "right"),
                             ("out/in", "right"), ("offered ev/s", "right"), ("best P95 s", "right"), ("why", "left")):
            table.add_column(col, justify=justify, no_wrap=True, overflow="ellipsis",
                             min_width=None if col in ("change", "why") else len(col),
                             max_width={"change": 38, "why": 64}.get(col), ratio=1 if col == "why" else None)
        for row in self.rows[-_SHOWN_ROWS:]:
            table.add_row(*row)
        return table


def _plot(decisions: list[Decision], path: Path, summary: dict | None, where: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [d.t_s for d in decisions]
    p95 = [d.observed["p95_s"] for d in decisions]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax1.plot(t, p95, "o-", ms=3, label="window P95")
    for d in decisions:
        if d.action in ("explore", "remeasure") and d.change:
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


def _summary_table(summary: dict) -> Table:
    table = Table(title="fresh windows at the paper's load — pipetune's final config vs defaults and Hybrid")
    for col in ("config", "P95 s", "P50 s", "out/in", "P95 vs final"):
        table.add_column(col, justify="right" if col != "config" else "left")
    for name in ("final", "defaults", "hybrid"):
        m = summary[name]
        table.add_row(name, f"{m['p95_s']:.3f}", f"{m['p50_s']:.3f}", f"{m['throughput_ratio']:.1%}",
                      f"×{m['p95_s'] / summary['final']['p95_s']:.1f}")
    return table


def _live_pipeline(pipeline: str) -> tuple[PipelineSpec, LivePipeline] | None:
    """None for the twin; else the pipeline file's running testbed, reachable through its agent."""
    if pipeline == "twin":
        return None
    try:
        spec = load_pipeline(Path(pipeline))
        live = live_pipeline(spec)
        live.current()  # asks the agent: fails now, not after Ray has started, when the testbed is down
    except PipelineError as exc:
        raise typer.BadParameter(str(exc), param_hint="--pipeline") from None
    except (OSError, PipelineUnavailable) as exc:
        raise typer.BadParameter(f"the testbed's agent does not answer ({exc}); start the testbed with "
                                 f"`pipetune testbed up --pipeline {pipeline}`", param_hint="--pipeline") from None
    return spec, live


def autotune_command(
    pipeline: str = typer.Option("twin", help="'twin' (the embedded simulated pipeline) or a pipeline FILE."),
    calibration: Optional[str] = typer.Option(None, help=f"Twin calibration: one of {', '.join(available())}, or a YAML path (default: paper-2vcpu on the twin, local-filebeat-kafka live)."),
    profile: str = typer.Option("burst", help=f"Workload: one of {', '.join(PROFILES)}."),
    rate: float = typer.Option(300.0, help="Base offered load, events/s (the paper's ~300)."),
    windows: int = typer.Option(30, help="Measurement windows to run."),
    window: float = typer.Option(30.0, help="Window length, seconds (simulated on the twin, wall-clock live)."),
    speed: float = typer.Option(15.0, help="Simulated seconds per wall second on the twin (0: as fast as possible)."),
    slo_p95: Optional[float] = typer.Option(None, help="P95 ceiling in seconds: a window above it rolls back."),
    min_throughput_ratio: float = typer.Option(0.95, help="Output must keep up with this share of the offered load."),
    mode: str = typer.Option("auto", help="auto (apply), advise (recommend only), frozen (hold)."),
    strategy: str = typer.Option("pipetune", help=f"Tuning strategy: one of {', '.join(STRATEGIES)}."),
    state_dir: Optional[Path] = typer.Option(None, help="State directory; an existing one is resumed (default: a new one under ~/.cache/pipetune/runs)."),
    ray_address: Optional[str] = typer.Option(None, help="Join this Ray cluster instead of starting a local one."),
    seed: int = typer.Option(0, help="Seed of the workload and the learner."),
    plot: Optional[Path] = typer.Option(None, help="PNG of P95 over time with changes marked (default: in the state dir)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the run's figures as JSON here."),
    api_port: Optional[int] = typer.Option(None, help="Serve the REST API and status page on this port while tuning."),
    api_host: str = typer.Option("127.0.0.1", help="Address the API binds (loopback unless told otherwise)."),
    token_file: Optional[Path] = typer.Option(None, help="File holding the API token (default: $PIPETUNE_API_TOKEN)."),
) -> None:
    """Tune the pipeline on line: observe a window, check guardrails, decide, apply, settle, record."""
    checks = [(rate > 0, "--rate", f"must be > 0 events/s, got {rate:g}"),
              (windows >= 1, "--windows", f"must be >= 1, got {windows}"),
              (window > 0, "--window", f"must be > 0 seconds, got {window:g}"),
              (speed >= 0, "--speed", f"must be >= 0, got {speed:g}"),
              (profile in PROFILES, "--profile", f"must be one of {', '.join(PROFILES)}, got {profile!r}"),
              (mode in ("auto", "advise", "frozen"), "--mode", f"must be auto, advise or frozen, got {mode!r}"),
              (0 < min_throughput_ratio <= 1, "--min-throughput-ratio",
               f"must be in (0, 1], got {min_throughput_ratio:g}"),
              (slo_p95 is None or slo_p95 > 0, "--slo-p95", f"must be > 0 seconds, got {slo_p95}"),
              (strategy in STRATEGIES, "--strategy", f"must be one of {', '.join(STRATEGIES)}, got {strategy!r}")]
    for ok, flag, message in checks:
        if not ok:
            raise typer.BadParameter(message, param_hint=flag)
    spec, live = _live_pipeline(pipeline) or (None, None)
    try:
        cal = load(calibration or ("local-filebeat-kafka" if live else "paper-2vcpu"))
    except (KeyError, FileNotFoundError, ValueError) as exc:
        raise typer.BadParameter(str(exc).splitlines()[0], param_hint="--calibration") from None
    policy = Policy(mode=mode, min_throughput_ratio=min_throughput_ratio, p95_ceiling_s=slo_p95)
    token = require_token(token_file) if api_port is not None else ""
    directory = state_dir or Path.home() / ".cache" / "pipetune" / "runs" / time.strftime("%Y%m%d-%H%M%S")
    store = StateStore(directory)
    stored = store.load_policy()
    if stored is not None:
        policy = stored
        err.print(f"[dim]resuming with the policy stored in {directory}[/]")
    resumed_incumbent = store.load_incumbent()
    start = resumed_incumbent.config if resumed_incumbent else live.current() if live else preset("defaults")
    box = Box(tuned_names(policy, cal.topology), policy)

    # Ray is imported only here: it takes seconds, and every other subcommand should start at once.
    from controller.ray_learner import RemoteLearner, start_ray

    err.print(f"[dim]starting Ray{' at ' + ray_address if ray_address else ''}; state in {directory}[/]")
    start_ray(ray_address)
    learner = RemoteLearner(strategy, box, start, cal.topology, seed, screen=TwinScreen(cal))
    # The twin's schedule must outlast settling after restarts and rollbacks (up to a window per change);
    # live, the profile spans the nominal run (its burst falls inside it) and steady load follows.
    load_s = windows * window if live else windows * window * 2.2 + 120.0
    tuned: Pipeline = live or TwinPipeline(start, workload(profile, rate, load_s, seed), cal, seed=seed)
    daemon = Daemon(tuned, learner, policy, window_s=window, store=store, explain=learner.explain)
    resumed = daemon.resume()
    if api_port is not None:
        start_api_thread(store, token, daemon.metrics.registry, api_host, api_port)
    if resumed:
        err.print(f"resumed {resumed} observations from {directory}; incumbent P95 {resumed_incumbent.p95_s:.3f}s"
                  if resumed_incumbent else f"resumed {resumed} observations from {directory}")

    table = _LiveTable(windows)
    # Live, the replay engine offers the load in the background and each window is wall-clock time.
    background = BackgroundLoad(spec, profile, rate, load_s, seed) if spec else None
    with background or nullcontext(), Live(table.render(), console=err, refresh_per_second=4) as shown:
        decisions = daemon.run(windows, on_decision=lambda d: (table.add(d), shown.update(table.render())),
                               wall_s_per_window=window / speed if speed > 0 and not live else 0.0)
    ledger = background.ledger() if background else None

    final = daemon.incumbent.config if daemon.incumbent else tuned.current()
    summary = None if live else {
        name: measure_fresh(cfg, cal, rate, window, seed=seed + 1000).to_dict()
        for name, cfg in (("final", final), ("defaults", preset("defaults")), ("hybrid", preset("hybrid")))}
    err.print()
    if summary:
        summary["final"]["config"] = dict(final)
        err.print(_summary_table(summary))
    changed = preset("defaults").diff(final)
    err.print("final config vs defaults: " + (", ".join(f"{k} {a:.4g} → {b:.4g}" if isinstance(b, float) else
                                                         f"{k} {a} → {b}" for k, (a, b) in changed.items()) or "unchanged"))
    err.print(f"rollbacks {daemon.rollbacks}, seconds in guardrail violation {daemon.violation_s:g} "
              f"of {daemon.t_s:g} {'wall-clock' if live else 'simulated'}")
    if ledger:
        err.print(f"events lost across every change: {ledger['lost']} of {ledger['expected']} "
                  f"({ledger['duplicates']} duplicated; the probe's ledger over {ledger['runs']} replay runs)")
    plot_path = plot or directory / "autotune.png"
    _plot(decisions, plot_path, summary, f"the live pipeline {spec.name!r}" if spec else "the twin")
    err.print(f"plot: {plot_path}\ndecision log: {directory / 'decisions.jsonl'}")
    if json_path:
        doc = {"windows": [vars(d) for d in decisions], **(summary or {"final": {"config": dict(final)}}),
               "rollbacks": daemon.rollbacks,
               "violation_s": daemon.violation_s, "state_dir": str(directory), "ledger": ledger}
        json_path.write_text(json.dumps(doc, indent=1, default=str))
