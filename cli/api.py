"""`pipetune api` (serve the REST API over a state dir) and the client commands that steer a daemon through it:
`status`, `policy show|set|pin|unpin`, `override`, `overrides`, `pause`, `resume`, `decisions`; each addresses
one pool with `--pool` (`status` without it shows every pool)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.table import Table

from api.auth import TOKEN_ENV, load_token
from api.client import DEFAULT_URL, URL_ENV, ApiClient, ApiError
from cli.cost import cost_text
from cli.listening import INSECURE_HTTP, TLS_CERT, TLS_KEY, tls_options
from controller.state import StateStore
from models.units import parse_duration_s

out = Console()
err = Console(stderr=True)

_URL = typer.Option(DEFAULT_URL, "--url", envvar=URL_ENV, help="The API's address.")
_TOKEN_FILE = typer.Option(None, "--token-file", help=f"File holding the API token (default: ${TOKEN_ENV}).",
                           exists=True, dir_okay=False)
_POOL = typer.Option(None, "--pool", envvar="PIPETUNE_POOL",
                     help="The pool to address (default: the daemon's only pool, or the one named default).")
_POLICY_FIELDS = ("mode", "min_throughput_ratio", "p95_ceiling_s", "min_dwell_windows", "max_restarts_per_hour",
                  "change_horizon_s", "tuned")


def _pairs(items: list[str], hint: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected NAME=VALUE, got {item!r}", param_hint=hint)
        pairs[key.strip()] = value.strip()
    return pairs


def _value(text: str) -> Any:
    """A number or true/false as JSON reads it, `none` as null, anything else as the string itself."""
    if text.lower() in ("none", "null"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _client(url: str, token_file: Optional[Path], pool: Optional[str]) -> ApiClient:
    return ApiClient(url, load_token(token_file), pool=pool)


def _run(call: Callable[[], Any]) -> Any:
    """The API's answer, or exit 1 with its message (which names the field and the allowed range)."""
    try:
        return call()
    except ApiError as exc:
        err.print(f"[red]pipetune API: {exc}[/]")
        raise typer.Exit(1) from None


def api_command(
    state_dir: Path = typer.Option(..., help="The daemon's state directory."),
    host: str = typer.Option("127.0.0.1", help="Address to bind (loopback unless told otherwise)."),
    port: int = typer.Option(8470, help="Port to listen on."),
    token_file: Optional[Path] = _TOKEN_FILE,
    tls_cert: Optional[Path] = TLS_CERT,
    tls_key: Optional[Path] = TLS_KEY,
    insecure_http: bool = INSECURE_HTTP,
) -> None:
    """Serve the REST API and status page over a daemon's state directory (off loopback: TLS or --insecure-http)."""
    import uvicorn

    from api.app import create_app

    token = require_token(token_file)
    if not state_dir.is_dir():
        raise typer.BadParameter(f"{state_dir} is not a directory", param_hint="--state-dir")
    scheme, ssl = tls_options(host, tls_cert, tls_key, insecure_http, "pipetune api")
    err.print(f"pipetune API on {scheme}://{host}:{port} over {state_dir}")
    uvicorn.run(create_app(StateStore(state_dir), token), host=host, port=port, log_level="info", **ssl)


def status_command(url: str = _URL, token_file: Optional[Path] = _TOKEN_FILE,
                   pool: Optional[str] = typer.Option(None, "--pool", envvar="PIPETUNE_POOL",
                                                      help="Show this pool only (default: every pool)."),
                   as_json: bool = typer.Option(False, "--json", help="Print the raw JSON.")) -> None:
    """Every pool's mode, nodes and the config version each runs, incumbent, last window, guardrails, overrides."""
    client = _client(url, token_file, pool)
    pools = [{"name": pool, "nodes": None, "status": _run(client.status)}] if pool else _run(client.pools)
    if as_json:
        out.print_json(data=pools[0]["status"] if pool else pools)
        return
    for entry in pools:
        _print_status(entry["name"], entry["nodes"], entry["status"])


def _print_status(pool: str, nodes: list[str] | None, status: dict) -> None:
    last = status.get("last_decision") or {}
    observed = last.get("observed") or {}
    inc = status.get("incumbent") or {}
    table = Table(title=f"pipetune pool {pool}: {status.get('pipeline') or '(daemon not started)'}", show_header=False)
    rows = [("mode", status["mode"] + (" (paused)" if status["paused"] else "")),
            ("nodes", _nodes(nodes, status.get("nodes") or {})),
            ("rollout", _rollout(status.get("rollout"))),
            *_space_rows(status.get("tuned_space"), status.get("current_config") or {}),
            ("window", _num(status.get("window"), 0)),
            ("last window", f"P95 {_num(observed.get('p95_s'))} s, out/in {_num(observed.get('throughput_ratio'))}, "
                            f"{last.get('action', '–')}: {last.get('reason', '')}"),
            ("last window cost", cost_text(observed) if last else "–"),
            ("incumbent P95", f"{_num(inc.get('p95_s'))} s at {_num(inc.get('offered_eps'), 0)} ev/s"),
            ("incumbent cost", cost_text(inc["cost"]) if inc.get("cost") else "–"),
            ("rollbacks", _num((status.get("guardrail") or {}).get("rollbacks"), 0)),
            ("learner", f"{_num((status.get('learner') or {}).get('observations'), 0)} observations"),
            ("overrides", "; ".join(f"{o['id']} {o['params']} {o['remaining_s']:.0f}s left" for o in status["overrides"])
             or "none"),
            ("clock offsets", "; ".join(f"{node} {o['offset_s'] * 1000:+.0f} ms ± {o['error_s'] * 1000:.0f}"
                                        + (" (WARNING: above 50 ms)" if o.get("warning") else "")
                                        for node, o in (status.get("clock_offsets") or {}).items()) or "not measured")]
    for key, value in rows:
        table.add_row(key, value)
    out.print(table)


def _nodes(names: list[str] | None, versions: dict[str, dict | None]) -> str:
    """Each node and the config version each of its components runs, as the daemon last read them."""
    def running(node: str) -> str:
        if node not in versions:
            return "not read yet"
        if versions[node] is None:
            return "agent not answering"
        return ", ".join(f"{component} v{version}" for component, version in versions[node].items())

    listed = list(names or []) + [n for n in versions if n not in (names or [])]
    return "; ".join(f"{node}: {running(node)}" for node in listed) or "–"


def _space_rows(space: dict | None, config: dict) -> list[tuple[str, str]]:
    """What the learner tunes, grouped by the agent's component that applies it, what it holds and why, and how high
    it takes the waits a lull sits out."""
    if not space:
        return [("tuned", "–")]
    by: dict[str, list[str]] = {}
    for param, appliers in space["tuned"].items():
        by.setdefault(", ".join(appliers), []).append(param)
    held = "; ".join(f"{param} {config.get(param, '–')} ({why})" for param, why in space["held"].items())
    ceilings = ", ".join(f"{param} {value:g}" for param, value in space.get("ceilings", {}).items())
    return [("tuned", "; ".join(f"{', '.join(params)} by {who}" for who, params in by.items())),
            ("held", held or "none"),
            ("at most", f"{ceilings} (as the run started: a lull's events wait them out)" if ceilings else "–")]


def _rollout(rollout: dict | None) -> str:
    """A pool of several nodes: the rollout's phase, each node's config version and state, the last judgement."""
    if not rollout:
        return "–"
    nodes = ", ".join(f"{node} v{r['version']} {r['state']}" for node, r in rollout["nodes"].items())
    return f"{rollout['phase']} (promoted v{rollout['promoted_version']}): {nodes}; {rollout['judgement'] or '–'}"


def _num(value: Any, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "–"


policy_app = typer.Typer(help="Show or change the policy the learner follows.", no_args_is_help=True)


@policy_app.command("show")
def policy_show(url: str = _URL, token_file: Optional[Path] = _TOKEN_FILE, pool: Optional[str] = _POOL) -> None:
    """Print the policy as JSON."""
    out.print_json(data=_run(_client(url, token_file, pool).policy))


@policy_app.command("set")
def policy_set(
    settings: list[str] = typer.Argument(None, help=f"FIELD=VALUE with FIELD one of {', '.join(_POLICY_FIELDS)}, "
                                                    "or bounds.PARAM=LOW:HIGH (VALUE none clears it)."),
    file: Optional[Path] = typer.Option(None, "--file", exists=True, dir_okay=False,
                                        help="Replace the whole policy with this JSON file."),
    url: str = _URL, token_file: Optional[Path] = _TOKEN_FILE, pool: Optional[str] = _POOL,
) -> None:
    """Change policy fields (or replace the policy from a file); takes effect at the next decision."""
    client = _client(url, token_file, pool)
    if file is not None:
        out.print_json(data=_run(lambda: client.put_policy(json.loads(file.read_text()))))
        return
    if not settings:
        raise typer.BadParameter("give FIELD=VALUE settings or --file", param_hint="SETTINGS")
    changes: dict[str, Any] = {}
    bounds: dict[str, Any] = {}
    for key, text in _pairs(settings, "SETTINGS").items():
        if key.startswith("bounds."):
            low, sep, high = text.partition(":")
            if text.lower() != "none" and not sep:
                raise typer.BadParameter(f"expected {key}=LOW:HIGH or {key}=none, got {text!r}", param_hint="SETTINGS")
            bounds[key.removeprefix("bounds.")] = None if text.lower() == "none" else [_value(low), _value(high)]
        elif key == "tuned":
            changes[key] = None if text.lower() == "none" else [n.strip() for n in text.split(",") if n.strip()]
        elif key in _POLICY_FIELDS:
            changes[key] = _value(text)
        else:
            raise typer.BadParameter(f"unknown field {key!r}: one of {', '.join(_POLICY_FIELDS)}, bounds.PARAM",
                                     param_hint="SETTINGS")
    if bounds:
        merged = dict(_run(client.policy)["bounds"]) | bounds
        changes["bounds"] = {k: v for k, v in merged.items() if v is not None}
    out.print_json(data=_run(lambda: client.patch_policy(changes)))


@policy_app.command("pin")
def policy_pin(pins: list[str] = typer.Argument(..., help="PARAM=VALUE to hold."),
               url: str = _URL, token_file: Optional[Path] = _TOKEN_FILE, pool: Optional[str] = _POOL) -> None:
    """Hold parameters at a value; the learner never moves them."""
    client = _client(url, token_file, pool)
    merged = dict(_run(client.policy)["pins"]) | {k: _value(v) for k, v in _pairs(pins, "PINS").items()}
    out.print_json(data=_run(lambda: client.patch_policy({"pins": merged})))


@policy_app.command("unpin")
def policy_unpin(names: list[str] = typer.Argument(..., help="Parameters to release."),
                 url: str = _URL, token_file: Optional[Path] = _TOKEN_FILE, pool: Optional[str] = _POOL) -> None:
    """Give pinned parameters back to the learner."""
    client = _client(url, token_file, pool)
    pins = dict(_run(client.policy)["pins"])
    missing = [n for n in names if n not in pins]
    if missing:
        raise typer.BadParameter(f"not pinned: {', '.join(missing)} (pinned: {', '.join(pins) or 'none'})",
                                 param_hint="NAMES")
    out.print_json(data=_run(lambda: client.patch_policy({"pins": {k: v for k, v in pins.items() if k not in names}})))


def override_command(
    param: list[str] = typer.Option(None, "--param", help="PARAM=VALUE to force (repeatable)."),
    ttl: str = typer.Option("10m", help="How long it holds: 90, 30s, 10m, 2h, 1d."),
    reason: str = typer.Option("", help="Why (kept in the audit log)."),
    override_bounds: bool = typer.Option(False, "--override-bounds",
                                         help="Allow values outside the policy's bounds and pins (audited)."),
    cancel: Optional[str] = typer.Option(None, help="End the override with this id instead."),
    url: str = _URL, token_file: Optional[Path] = _TOKEN_FILE, pool: Optional[str] = _POOL,
) -> None:
    """Force parameters for a while (applied at the next decision, guardrails still roll back); or --cancel one."""
    client = _client(url, token_file, pool)
    if cancel:
        _run(lambda: client.delete_override(cancel))
        out.print(f"override {cancel} ended; the learner is back in control")
        return
    if not param:
        raise typer.BadParameter("give at least one --param NAME=VALUE", param_hint="--param")
    if not reason.strip():
        raise typer.BadParameter("say why (it goes in the audit log)", param_hint="--reason")
    try:
        seconds = parse_duration_s(ttl)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--ttl") from None
    made = _run(lambda: client.add_override(_pairs(param, "--param"), seconds, reason, override_bounds))
    out.print(f"override {made['id']} holds {made['params']} for {made['remaining_s']:.0f} s")


def overrides_command(url: str = _URL, token_file: Optional[Path] = _TOKEN_FILE, pool: Optional[str] = _POOL) -> None:
    """List active overrides with their remaining TTL."""
    for o in _run(_client(url, token_file, pool).overrides) or []:
        flag = " (rolled back by a guardrail)" if o["vetoed"] else ""
        out.print(f"{o['id']}  {o['params']}  {o['remaining_s']:.0f}s left  {o['reason']}{flag}")


def pause_command(url: str = _URL, token_file: Optional[Path] = _TOKEN_FILE, pool: Optional[str] = _POOL) -> None:
    """Hold the current config from the next decision on (overrides and guardrails still act)."""
    _run(_client(url, token_file, pool).pause)
    out.print("paused")


def resume_command(url: str = _URL, token_file: Optional[Path] = _TOKEN_FILE, pool: Optional[str] = _POOL) -> None:
    """Give control back to the learner."""
    _run(_client(url, token_file, pool).resume)
    out.print("resumed")


def decisions_command(
    limit: int = typer.Option(20, min=1, max=1000, help="How many, newest first."),
    before: Optional[int] = typer.Option(None, min=0, help="Only decisions with seq below this (paging)."),
    as_json: bool = typer.Option(False, "--json", help="Print the raw JSON page."),
    url: str = _URL, token_file: Optional[Path] = _TOKEN_FILE, pool: Optional[str] = _POOL,
) -> None:
    """The daemon's decisions: config change, predicted vs observed, and why."""
    page = _run(lambda: _client(url, token_file, pool).decisions(limit, before))
    if as_json:
        out.print_json(data=page)
        return
    table = Table(title="decisions (newest first)")
    for col in ("seq", "action", "change", "P95 s", "predicted", "out/in", "why"):
        table.add_column(col, overflow="fold")
    for d in page["items"]:
        change = ", ".join(f"{k}: {a} → {b}" for k, (a, b) in d["change"].items()) or "–"
        table.add_row(str(d["seq"]), d["action"], change, _num(d["observed"].get("p95_s")),
                      _num(d["predicted"].get("p95_s")), _num(d["observed"].get("throughput_ratio")), d["reason"])
    out.print(table)
    if page["next_before"] is not None:
        out.print(f"[dim]older: --before {page['next_before']}[/]")


def register_api_commands(app: typer.Typer) -> None:
    """Add the API server and its client commands to the `pipetune` app."""
    app.command("api")(api_command)
    app.command("status")(status_command)
    app.add_typer(policy_app, name="policy")
    app.command("override")(override_command)
    app.command("overrides")(overrides_command)
    app.command("pause")(pause_command)
    app.command("resume")(resume_command)
    app.command("decisions")(decisions_command)


def require_token(token_file: Optional[Path]) -> str:
    """The API token, or a usage error saying where to put one (mutating calls are never open)."""
    token = load_token(token_file)
    if not token:
        raise typer.BadParameter(f"the API needs a token: set ${TOKEN_ENV} or pass --token-file",
                                 param_hint="--token-file")
    return token

