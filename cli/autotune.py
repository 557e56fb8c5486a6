"""`pipetune autotune`: the daemon on the twin (the embedded default) or on the live testbed through its
node agent, with a live table and a summary."""

from __future__ import annotations

import json
import math
import signal
import threading
import time
from collections import deque
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Iterator, Optional

import typer
from rich.console import Console

from cli.api import require_token
from cli.autotune_view import WindowNumbers, WindowView, new_plot_path, plot_run, pool_line, print_summary
from cli.cost import cost_text
from cli.listening import tls_options
from controller.daemon import Daemon, PersistentError
from controller.deployment import (Deployment, DeploymentError, is_deployment_file, load_deployment, pool_managers,
                                   pool_pipeline, pool_pipelines)
from controller.deployment import live_pipeline as deployment_pipeline
from controller.fresh_windows import measure_fresh
from controller.live import LivePipeline
from controller.pipelines import PipelineUnavailable
from controller.pools import PoolRunner, pool_runs, relearn
from controller.realizer import Driven
from controller.state import (DEFAULT_POOL, BudgetReport, Decision, StateStore, load_pool_dirs, plan_pool_dirs,
                              save_pool_dirs)
from controller.tuned_space import NothingToTune, TunedSpace
from controller.tuning_run import LearnerSetup, tuning_learner, twin_pipeline
from models.budget import CpuBudget, RequestBudget
from models.learning import Learner
from models.listening import ListenFlags
from models.policy import Policy
from models.presets import preset
from models.space import Config
from models.strategies import STRATEGIES
from models.twin import Calibration, available, load as load_calibration
from replay.profiles import GENERATED_NAMES, WorkloadSpec
from testbed.endpoints import deployment as testbed_deployment
from testbed.harness import BackgroundLoad
from testbed.pipeline import PipelineError, PipelineSpec, load_pipeline

err = Console(stderr=True)
TWIN_WINDOWS = 30  # the twin's run ends (its workload is built for a known length); so does the profile's span live
KEPT_WINDOWS = 2000  # the plot and --json show the last ones: a run until stopped must not hold them all


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set `stop` (the run finishes its window and ends); a second one acts as usual."""
    def handler(signum: int, _frame: object) -> None:
        err.print(f"\n{signal.Signals(signum).name}: finishing the window in progress, then stopping "
                  "(send it again to stop at once)")
        stop.set()
        for sig, old in previous.items():
            signal.signal(sig, old)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


LOADS = ("none", "replay")


def _live_pipeline(pipeline: str, load: str | None) -> tuple[PipelineSpec | None, LivePipeline, Deployment] | None:
    """None for the twin; else the file's pipeline through its agents: a deployment file (an operator's, or
    the one `testbed up` wrote) or a testbed pipeline file. The testbed spec comes along when autotune
    drives its replay (`load` replay, the testbed's default); with `none` the windows measure the traffic
    the pipeline carries, as on an operator's (whose default it is)."""
    if pipeline == "twin":
        if load is not None:
            raise typer.BadParameter("the twin generates its own load (--profile, --rate): --load is for a "
                                     "--pipeline FILE", param_hint="--load")
        return None
    path = Path(pipeline)
    testbed: PipelineSpec | None = None
    try:
        if is_deployment_file(path):
            described = load_deployment(path)
            testbed = load_pipeline(described.testbed) if described.testbed else None
        else:
            testbed = load_pipeline(path)
            described = testbed_deployment(testbed)
    except (PipelineError, DeploymentError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--pipeline") from None
    if load == "replay" and testbed is None:
        raise typer.BadParameter("replay needs the testbed (its deployment file has `testbed:`); an operator's "
                                 "pipeline carries its own traffic: --load none", param_hint="--load")
    live: LivePipeline | None = None
    try:
        live = deployment_pipeline(described)  # OSError: a token file that cannot be read
        live.current()  # asks every agent: fails now, not after Ray has started, when a node is down
    except (OSError, PipelineUnavailable) as exc:
        if live is not None:
            live.close()
        said = (f"the testbed's agent does not answer ({exc}); start the testbed with "
                f"`pipetune testbed up --pipeline {pipeline}`") if testbed else f"an agent does not answer ({exc})"
        raise typer.BadParameter(said, param_hint="--pipeline") from None
    drives_replay = (load or ("replay" if testbed else "none")) == "replay"
    return (testbed if drives_replay else None), live, described


def _budget_line(budget: BudgetReport | None) -> str:
    """The budgets at the last window: each cost's limit and use (`--cpu-budget none` lifts the CPU's)."""
    if budget is None:
        return "budget: none (--cpu-budget none)"
    if not budget.limits:
        return "budget: not set yet (no window of the starting config kept up)"
    parts = ", ".join(f"{name} {budget.used.get(name, math.nan):.3f} of {limit:.3f} {budget.units.get(name, '')}"
                      for name, limit in budget.limits.items())
    return f"budget on the last window, used of allowed: {parts} (--cpu-budget none lifts the CPU's)"


def _flag_number(flag: str, lowest: float, strictly: bool, option: str, what: str) -> float:
    """A budget flag's number, at least `lowest` (above it when `strictly`); else BadParameter naming `option`."""
    try:
        number = float(flag)
    except ValueError:
        number = math.nan
    if not (number > lowest if strictly else number >= lowest) or math.isinf(number):
        raise typer.BadParameter(f"must be default, none or {what}, got {flag!r}", param_hint=option)
    return number


def _cpu_budget(flag: str) -> CpuBudget | None:
    """`--cpu-budget`: the protective default, none, or the default with CORES of extra cores."""
    if flag in ("default", "none"):
        return CpuBudget() if flag == "default" else None
    return CpuBudget(extra_cores=_flag_number(flag, 0.0, False, "--cpu-budget", "a number of cores >= 0"))


def _request_budget(flag: str) -> RequestBudget | None:
    """`--request-budget`: none, the default relative budget, or a cap of N Produce requests per second."""
    if flag in ("default", "none"):
        return RequestBudget() if flag == "default" else None
    return RequestBudget(per_s=_flag_number(flag, 0.0, True, "--request-budget",
                                            "a number of requests per second > 0"))


def _default_calibration(described: Deployment | None) -> str:
    """The twin the learner screens with when none is named: the paper's node on the twin; live, the paper testbed's
    when a Spark job ends the pipeline (the deployment's latency is to its table; its Spark stage the learner
    tunes), else this machine's Filebeat -> Kafka. Read from the deployment, whatever drives the load."""
    if described is None:
        return "paper-2vcpu"
    return "paper-testbed" if described.latency.stage == "warehouse" else "local-filebeat-kafka"


def autotune_command(
    pipeline: str = typer.Option("twin", help="'twin' (the embedded simulated pipeline), a deployment FILE "
                                              "(docs/deploy.md) or a testbed pipeline FILE."),
    calibration: Optional[str] = typer.Option(None, help=f"Twin calibration: one of {', '.join(available())}, or a YAML path (default: paper-2vcpu on the twin; live, paper-testbed where a Spark job ends the pipeline, else local-filebeat-kafka)."),
    profile: str = typer.Option("burst", help=f"Workload: one of {', '.join(GENERATED_NAMES)}."),
    rate: float = typer.Option(300.0, help="Base offered load, events/s (the paper's ~300)."),
    windows: Optional[int] = typer.Option(None, help=f"Measurement windows to run (default: {TWIN_WINDOWS} on the twin; on a pipeline FILE, until SIGTERM or SIGINT)."),
    window: float = typer.Option(30.0, help="Window length, seconds (simulated on the twin, wall-clock live)."),
    speed: float = typer.Option(15.0, help="Simulated seconds per wall second on the twin (0: as fast as possible)."),
    slo_p95: Optional[float] = typer.Option(None, help="P95 ceiling in seconds: a window above it rolls back."),
    min_throughput_ratio: float = typer.Option(0.95, help="Output must keep up with this share of the offered load."),
    cpu_budget: str = typer.Option("default", help="CPU each component (filebeat, logstash) may use: 'default' (the CPU per event of the config it started on, +25 %, +0.05 cores), CORES (that +25 %, +CORES instead of 0.05) or 'none' (no budget)."),
    request_budget: str = typer.Option("none", help="Produce requests per second the node may send Kafka: 'none' (no budget), 'default' (twice the requests per event of the config it started on, +10/s) or N (that, capped at N/s)."),
    mode: str = typer.Option("auto", help="auto (apply), advise (recommend only), frozen (hold)."),
    strategy: str = typer.Option("pipetune", help=f"Tuning strategy: one of {', '.join(STRATEGIES)}."),
    state_dir: Optional[Path] = typer.Option(None, help="State directory; an existing one is resumed (default: a new one under ~/.cache/pipetune/runs)."),
    ray_address: Optional[str] = typer.Option(None, help="Join this Ray cluster instead of starting a local one."),
    seed: int = typer.Option(0, help="Seed of the workload and the learner."),
    plot: Optional[Path] = typer.Option(None, help="PNG of P95 over time with changes marked (default: in the state dir; with several pools, one in each pool's)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the run's figures as JSON here."),
    api_port: Optional[int] = typer.Option(None, help="Serve the REST API and status page on this port while tuning."),
    api_host: str = typer.Option("127.0.0.1", help="Address the API binds (off loopback: --api-tls-cert/--api-tls-key or --api-insecure-http)."),
    api_tls_cert: Optional[Path] = typer.Option(None, help="PEM certificate the API serves HTTPS with."),
    api_tls_key: Optional[Path] = typer.Option(None, help="PEM private key of --api-tls-cert (mode 0600)."),
    api_insecure_http: bool = typer.Option(False, help="Serve the API as plain HTTP off loopback anyway (warned)."),
    token_file: Optional[Path] = typer.Option(None, help="File holding the API token (default: $PIPETUNE_API_TOKEN)."),
    on_exit: str = typer.Option("keep", help="When the run ends: keep the config in force, or revert to the one it started from."),
    load: Optional[str] = typer.Option(None, help="On a pipeline FILE: 'replay' (drive the testbed's replay at --profile/--rate; the testbed's default) or 'none' (tune on the traffic the pipeline carries; an operator's default)."),
) -> None:
    """Tune the pipeline on line: observe a window, check guardrails, decide, apply, settle, record."""
    checks = [(rate > 0, "--rate", f"must be > 0 events/s, got {rate:g}"),
              (windows is None or windows >= 1, "--windows", f"must be >= 1, got {windows}"),
              (on_exit in ("keep", "revert"), "--on-exit", f"must be keep or revert, got {on_exit!r}"),
              (load is None or load in LOADS, "--load", f"must be none or replay, got {load!r}"),
              (window > 0, "--window", f"must be > 0 seconds, got {window:g}"),
              (speed >= 0, "--speed", f"must be >= 0, got {speed:g}"),
              (profile in GENERATED_NAMES, "--profile", f"must be one of {', '.join(GENERATED_NAMES)}, got {profile!r}"),
              (mode in ("auto", "advise", "frozen"), "--mode", f"must be auto, advise or frozen, got {mode!r}"),
              (0 < min_throughput_ratio <= 1, "--min-throughput-ratio",
               f"must be in (0, 1], got {min_throughput_ratio:g}"),
              (slo_p95 is None or slo_p95 > 0, "--slo-p95", f"must be > 0 seconds, got {slo_p95}"),
              (strategy in STRATEGIES, "--strategy", f"must be one of {', '.join(STRATEGIES)}, got {strategy!r}")]
    for ok, flag, message in checks:
        if not ok:
            raise typer.BadParameter(message, param_hint=flag)
    budget, requests_budget = _cpu_budget(cpu_budget), _request_budget(request_budget)
    scheme, api_ssl = tls_options(api_host, api_tls_cert, api_tls_key, api_insecure_http, "pipetune autotune API",
                                  ListenFlags("--api-tls-cert", "--api-tls-key", "--api-insecure-http")) \
        if api_port is not None else ("http", {})
    spec, live, described = _live_pipeline(pipeline, load) or (None, None, None)
    if windows is None and not live:
        windows = TWIN_WINDOWS
    if live and not spec:
        err.print("no replay of pipetune's own: offered load is what the agents see appended to the harvested "
                  "files, throughput what the probe consumes, backlog the files' unshipped events and the "
                  "consumer group's lag")
    try:
        cal = load_calibration(calibration or _default_calibration(described))
    except (KeyError, FileNotFoundError, ValueError) as exc:
        raise typer.BadParameter(str(exc).splitlines()[0], param_hint="--calibration") from None
    policy = Policy(mode=mode, min_throughput_ratio=min_throughput_ratio, p95_ceiling_s=slo_p95, cpu_budget=budget,
                    request_budget=requests_budget)
    token = require_token(token_file) if api_port is not None else ""
    directory = state_dir or Path.home() / ".cache" / "pipetune" / "runs" / time.strftime("%Y%m%d-%H%M%S")
    if described is not None and len(described.pool_specs()) > 1:
        live.close()  # it asked every agent once; each pool gets a pipeline over its own nodes
        if plot is not None:
            raise typer.BadParameter("one PNG per pool: with several pools each is autotune.png in the pool's state "
                                     "directory (pools/NAME/)", param_hint="--plot")
        _autotune_pools(described, spec, PoolsSetup(policy, strategy, cal, seed, WorkloadSpec(profile, rate, seed=seed),
                                                     window, windows, directory, ray_address, on_exit),
                        api=(token, api_host, api_port, scheme, api_ssl) if api_port is not None else None,
                        json_path=json_path)
        return
    driven = Driven.direct(live, live.node_versions) if live else None
    pool, managers = DEFAULT_POOL, None  # the twin takes every parameter
    if described is not None:  # the API names the pool and lists its nodes
        save_pool_dirs(directory, plan_pool_dirs(directory, {p.name: p.nodes for p in described.pool_specs()}))
        (only,) = described.pool_specs()
        pool, managers = only.name, live.managers()
        if len(only.nodes) > 1:  # several nodes: each change canary first, its rollout kept with the state
            live.close()
            driven = pool_pipeline(described, only, directory)
    store = StateStore(directory)
    stored = store.load_policy()
    if stored is not None:
        policy = stored
        err.print(f"[dim]resuming with the policy stored in {directory}[/]")
    resumed_incumbent = store.load_incumbent()
    start = resumed_incumbent.config if resumed_incumbent else \
        driven.pipeline.current() if driven else preset("defaults")
    setup = LearnerSetup(strategy, policy, start, cal.topology, seed, screen=cal, managers=managers, pool=pool,
                         ceilings=store.ceilings(start))
    try:
        space = setup.space()
    except NothingToTune as exc:
        raise typer.BadParameter(str(exc), param_hint="--pipeline") from None

    # Ray is imported only here: it takes seconds, and every other subcommand should start at once.
    from controller.ray_learner import start_ray

    err.print(f"[dim]starting Ray{' at ' + ray_address if ray_address else ''}; state in {directory}[/]")
    start_ray(ray_address)
    learner = tuning_learner(setup, remote=True)
    workload = WorkloadSpec(profile, rate, seed=seed)
    driven = driven or Driven.direct(twin_pipeline(start, cal, workload, windows or TWIN_WINDOWS, window))
    tuned = driven.pipeline
    started_from = tuned.current()
    daemon = Daemon(tuned, learner, policy, window_s=window, store=store, realizer=driven.realizer, space=space)
    learner.on_restore = partial(relearn, daemon)  # an actor lost with its Ray node is taught again from the store
    resumed = daemon.resume()
    if api_port is not None:
        from api.server import serve_state_in_thread  # FastAPI loads only when the API is asked for

        pool = load_pool_dirs(directory)[0].name
        serve_state_in_thread(store, token, {pool: daemon.metrics.registry}, api_host, api_port, **api_ssl)
        err.print(f"API and status page on {scheme}://{api_host}:{api_port}/")
    if resumed:
        err.print(f"resumed {resumed} observations from {directory}; incumbent P95 {resumed_incumbent.p95_s:.3f}s"
                  if resumed_incumbent else f"resumed {resumed} observations from {directory}")

    # Live, the replay engine offers the load in the background and each window is wall-clock time; the
    # profile spans the nominal run (its burst falls inside it) and steady load follows.
    background = BackgroundLoad(spec, replace(workload, duration_s=(windows or TWIN_WINDOWS) * window)) if spec else None
    decisions: deque[Decision] = deque(maxlen=KEPT_WINDOWS)

    def shown(decision: Decision) -> None:
        view.add(decision)
        decisions.append(decision)

    stopped_by: PersistentError | None = None
    with background or nullcontext(), WindowView(windows, err) as view, stop_on_signals(daemon.stop):
        try:
            daemon.run(windows, on_decision=shown, wall_s_per_window=window / speed if speed > 0 and not live else 0.0)
        except PersistentError as exc:  # the summary still tells what the run did before it
            stopped_by = exc
        if on_exit == "revert":
            shown(daemon.revert(started_from))
    ledger = background.ledger() if background else None

    final = daemon.incumbent.config if daemon.incumbent else tuned.current()
    summary = None if live else {
        name: measure_fresh(cfg, cal, rate, window, seed=seed + 1000).to_dict()
        for name, cfg in (("final", final), ("defaults", preset("defaults")), ("hybrid", preset("hybrid")))}
    err.print()
    if summary:
        summary["final"]["config"] = dict(final)
        print_summary(err, summary)
    # Live, the start is the operator's own config as the agents read it (their files' values, or what the
    # component reads where they set none), not pipetune's defaults.
    baseline, called = (started_from, "the config the run started from") if live else (preset("defaults"), "defaults")
    changed = baseline.diff(final)
    err.print(f"final config vs {called}: " + (", ".join(f"{k} {a:.4g} → {b:.4g}" if isinstance(b, float) else
                                                         f"{k} {a} → {b}" for k, (a, b) in changed.items()) or "unchanged"))
    if live and daemon.incumbent is not None and daemon.incumbent.cost is not None:
        err.print("final config's cost, on its last window as the incumbent: "
                  + cost_text(daemon.incumbent.cost.model_dump()))
    if space.held:
        err.print("held, not tuned: " + "; ".join(f"{k} {final[k]:.4g} ({why})" if isinstance(final[k], float) else
                                                  f"{k} {final[k]} ({why})" for k, why in space.held.items()))
    if space.ceilings:
        err.print("at most as the run started (a lull's events wait them out): "
                  + ", ".join(f"{k} {v:g}" for k, v in space.ceilings.items()))
    err.print(_budget_line(daemon.status(decisions[-1] if decisions else None).budget))
    err.print(f"rollbacks {daemon.rollbacks}, seconds in guardrail violation {daemon.violation_s:g} "
              f"of {daemon.t_s:g} {'wall-clock' if live else 'simulated'}")
    if ledger:
        err.print(f"events lost across every change: {ledger['lost']} of {ledger['expected']} "
                  f"({ledger['duplicates']} duplicated; the probe's ledger over {ledger['runs']} replay runs)")
    if on_exit == "revert":
        err.print(f"on exit: {decisions[-1].reason}")
    plot_path = plot or new_plot_path(directory)
    plot_run(decisions, plot_path, summary, f"the live pipeline {spec.name!r}" if spec else "the live pipeline" if live else "the twin")
    err.print(f"plot: {plot_path}\ndecision log: {directory / 'decisions.jsonl'}")
    if json_path:
        doc = {"windows": [vars(d) for d in decisions], **(summary or {"final": {"config": dict(final)}}),
               "rollbacks": daemon.rollbacks,
               "violation_s": daemon.violation_s, "state_dir": str(directory), "ledger": ledger}
        json_path.write_text(json.dumps(doc, indent=1, default=str))
    if stopped_by is not None:
        err.print(f"[red]stopped:[/red] {stopped_by}")
        raise typer.Exit(1)


@dataclass(frozen=True)
class PoolsSetup:
    """What every pool's daemon shares: the policy a pool without a stored one starts with, the learner's
    strategy, calibration and seed, the windows, the state directory and the Ray cluster."""

    policy: Policy
    strategy: str
    calibration: Calibration
    seed: int
    workload: WorkloadSpec  # what the testbed's replay offers, when autotune drives it
    window_s: float
    windows: int | None
    directory: Path
    ray_address: str | None
    on_exit: str


def _autotune_pools(deployment: Deployment, spec: PipelineSpec | None, setup: PoolsSetup,
                    api: tuple[str, str, int, str, dict] | None, json_path: Path | None) -> None:
    """Every pool of `deployment` in this process: a daemon each, in a thread of its own, its learner a Ray
    actor of its own, its state in `pools/NAME` of the state directory; one line per decision, pool first; at the
    end each pool's plot in its directory and, with `json_path`, every pool's windows and figures."""
    from controller.ray_learner import node_for, start_ray

    err.print(f"[dim]starting Ray{' at ' + setup.ray_address if setup.ray_address else ''}; "
              f"state in {setup.directory}[/]")
    start_ray(setup.ray_address)
    runs = pool_runs(pool_pipelines(deployment, setup.directory), setup.directory)

    index = {run.name: i for i, run in enumerate(runs)}

    def learner(pool: str, start: Config, policy: Policy) -> tuple[Learner, TunedSpace]:
        cal = setup.calibration
        tuning = LearnerSetup(setup.strategy, policy, start, cal.topology, setup.seed, screen=cal,
                              managers=pool_managers(deployment, pool), pool=pool,
                              ceilings=runs[index[pool]].store.ceilings(start))
        space = tuning.space()  # NothingToTune ends this pool's run, naming what its agents manage
        return tuning_learner(tuning, remote=True, node_id=node_for(index[pool])), space

    runner = PoolRunner(runs, learner, setup.policy, window_s=setup.window_s)
    if api is not None:
        from api.server import serve_state_in_thread

        token, host, port, scheme, ssl = api
        serve_state_in_thread(StateStore(setup.directory), token, {r.name: r.metrics.registry for r in runs}, host,
                              port, **ssl)
        err.print(f"API and status page on {scheme}://{host}:{port}/ (a pool's routes under /pools/NAME)")
    err.print("pools: " + "; ".join(f"{r.name} ({', '.join(r.pool.nodes)})" for r in runs))
    span_s = (setup.windows or TWIN_WINDOWS) * setup.window_s
    numbers = WindowNumbers(setup.windows)
    background = BackgroundLoad(spec, replace(setup.workload, duration_s=span_s)) if spec else None
    decided: dict[str, deque[Decision]] = {run.name: deque(maxlen=KEPT_WINDOWS) for run in runs}

    def on_decision(pool: str, decision: Decision) -> None:
        decided[pool].append(decision)
        err.print(pool_line(pool, decision, numbers), markup=False, highlight=False, soft_wrap=True)

    with background or nullcontext(), stop_on_signals(runner.stop):
        runner.start(setup.windows, on_decision=on_decision)
        while not runner.join(1.0):
            pass  # wakes every second so a signal is handled at once
    figures = {}
    for run in runs:
        if setup.on_exit == "revert" and run.daemon is not None and run.started_from is not None:
            err.print(pool_line(run.name, run.daemon.revert(run.started_from), numbers),
                      markup=False, highlight=False, soft_wrap=True)
        run.pipeline.close()
        daemon = run.daemon
        said = (f"ended: {run.error}" if run.error else "never answered: nothing tuned" if daemon is None else
                f"{daemon.window} windows, rollbacks {daemon.rollbacks}, seconds in guardrail violation "
                f"{daemon.violation_s:g}, decision log {run.store.dir / 'decisions.jsonl'}")
        if decided[run.name]:
            plot_path = new_plot_path(run.store.dir)
            plot_run(decided[run.name], plot_path, None, f"pool {run.name!r}")
            said += f", plot {plot_path}"
        err.print(f"pool {run.name}: {said}")
        figures[run.name] = {"windows": [vars(d) for d in decided[run.name]], "error": run.error,
                             "rollbacks": daemon.rollbacks if daemon else 0,
                             "violation_s": daemon.violation_s if daemon else 0.0, "state_dir": str(run.store.dir)}
    if json_path:
        json_path.write_text(json.dumps({"pools": figures}, indent=1, default=str))
    if any(run.error for run in runs):
        raise typer.Exit(1)
