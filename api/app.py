"""The REST API over one daemon's state directory: status, policy, overrides, pause, history, metrics.

A daemon tunes one or more pools: each pool's routes are under `/pools/{name}`, and those of the only
pool (or of the pool `default`) also without the prefix, as before pools. `GET /pools` lists them all.

Everything goes through `StateStore`, which the daemon re-reads at each decision, so the API works the
same inside the daemon's process (`pipetune autotune --api-port`) and on its own (`pipetune api`).
GET endpoints are readable without a token; every mutating call needs the bearer token.
"""

from __future__ import annotations

import itertools
import math
import threading
from pathlib import Path
from typing import Annotated, Any, Callable, Mapping

from fastapi import APIRouter, Body, Depends, FastAPI, HTTPException, Query, Request
from fastapi import Path as FastApiPath
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel, ValidationError
from starlette.routing import Match

from api.auth import bearer_guard
from api.limits import MAX_BODY_BYTES, BodyLimit
from api.metrics import state_registry
from api.page import page_html
from api.schemas import (POLICY_EXAMPLE, DecisionOut, DecisionPage, DeletedOut, ErrorOut, HealthOut, OverrideOut,
                         OverrideRequest, PausedOut, PolicyPatch, PoolOut, RecommendationsOut, StatusOut,
                         TradeoffOut, ValidationErrorOut)
from controller.state import DEFAULT_POOL, Override, PoolDir, StateStore, load_pool_dirs
from models.policy import Policy
from models.presets import preset
from models.space import PIPELINE_SPACE, ParamError, RuleError, Value, check_rules
from models.tradeoff import STATIC_CHOICES, of_run

DESCRIPTION = f"""Steer a running pipetune daemon: read its status and decisions, set the policy the learner
must follow, force a config for a while, pause and resume.

GET endpoints need no token. Every mutating call needs `Authorization: Bearer <token>` (the daemon's
`PIPETUNE_API_TOKEN` or `--token-file`): 401 without one, 403 with a wrong one. Bodies are limited to
{MAX_BODY_BYTES} bytes (413). Invalid fields answer 422, naming the field and the allowed range."""

_READ = {422: {"model": ValidationErrorOut}}
_POLICY_OK = {200: {"content": {"application/json": {"example": POLICY_EXAMPLE}}}}
_WRITE = {400: {"model": ErrorOut}, 401: {"model": ErrorOut}, 403: {"model": ErrorOut}, 413: {"model": ErrorOut},
          422: {"model": ValidationErrorOut}}


def _invalid(errors: list[tuple[list[str | int], str, str]]) -> HTTPException:
    return HTTPException(422, [{"loc": loc, "msg": msg, "type": kind} for loc, msg, kind in errors])


def _from_pydantic(exc: ValidationError) -> HTTPException:
    return _invalid([(["body", *e["loc"]], e["msg"], e["type"]) for e in exc.errors()])


async def _raw_body(request: Request) -> bytes:
    return await request.body()


def _strict(model: type[BaseModel], raw: bytes) -> Any:
    """`raw` as `model`, held to JSON's own types: FastAPI's lax validation would take `false` for 0."""
    try:
        return model.model_validate_json(raw, strict=True)
    except ValidationError as exc:
        raise _from_pydantic(exc) from None


def _finite(doc: Any) -> Any:
    """`doc` with NaN and infinities as null: a window with no output has no P95, and JSON has no NaN."""
    if isinstance(doc, float) and not math.isfinite(doc):
        return None
    if isinstance(doc, dict):
        return {k: _finite(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_finite(v) for v in doc]
    return doc


def _param_error_loc(policy: Policy, named: str) -> list[str | int]:
    field, _, name = named.partition(".")
    if field in ("bounds", "pins") and name:
        return ["body", field, name]
    owner = next((f for f in ("bounds", "pins", "tuned") if named in (getattr(policy, f) or ())), None)
    return ["body", owner, named] if owner else ["body", named]


def _checked(policy: Policy) -> Policy:
    """`policy` if the parameter space allows it, else a 422 naming the field and the allowed range (both fields, for
    pins and bounds that leave a component's rule no values to keep)."""
    try:
        policy.check(PIPELINE_SPACE)
    except RuleError as exc:
        raise _invalid([(_param_error_loc(policy, named), str(exc), "param_rule")
                        for named in (exc.name, exc.other)]) from None
    except ParamError as exc:
        raise _invalid([(_param_error_loc(policy, exc.name), str(exc), "param_range")]) from None
    if policy.p95_ceiling_s is not None and not math.isfinite(policy.p95_ceiling_s):
        raise _invalid([(["body", "p95_ceiling_s"], "expected a finite number of seconds > 0", "value_error")])
    # Pins stored in each parameter's own type, so `"512"` from a command line reads back as 512.
    return policy.model_copy(update={"pins": {k: PIPELINE_SPACE[k].validate(v) for k, v in policy.pins.items()}})


def _refuse_held(fields: Mapping[str, Any], pool: str, managed: list[str] | None) -> None:
    """422 for a pin or bound in `fields` (a policy, or a patch's changes) on a parameter no agent of the pool
    applies (`managed`, from the daemon's status; None: every one): the daemon holds it at the running config's
    value, so the policy would promise what nothing does."""
    errors = [(["body", field, name], f"no agent of pool {pool} manages {name}: the daemon holds it at the running "
                                      f"config's value, and a {field.rstrip('s')} on it would have no effect",
               "param_held")
              for field in ("pins", "bounds") for name in (fields.get(field) or {})
              if managed is not None and name not in managed]
    if errors:
        raise _invalid(errors)


def _managed(store: StateStore) -> list[str] | None:
    """The parameters some agent of the pool applies, as the daemon's status says; None: every one (the twin, or
    no status yet)."""
    return (store.load_status().get("tuned_space") or {}).get("managed")


def _override_values(body: OverrideRequest, policy: Policy, pool: str, managed: list[str] | None,
                     running: Mapping[str, Value] | None) -> tuple[dict[str, Value], list[str]]:
    """The override's values validated against each Param's hard limits, and which leave the policy's bounds.

    Raises 422 for a value outside hard limits or for a parameter no agent of the pool applies (`managed`, from the
    daemon's status; None: every one); for one out of order with another a component's rule ties it to, in the
    config the daemon would apply (the `running` one, as the daemon's status has it, with the pins and the override's
    values), naming both; and for one outside the policy's bounds or against a pin unless the request sets
    `override_bounds`.
    """
    values: dict[str, Value] = {}
    errors, outside = [], []
    for name, raw in body.params.items():
        loc: list[str | int] = ["body", "params", name]
        if name not in PIPELINE_SPACE:
            errors.append((loc, f"unknown parameter {name!r}; known: {', '.join(p.name for p in PIPELINE_SPACE)}",
                           "unknown_param"))
            continue
        try:
            value = values[name] = PIPELINE_SPACE[name].validate(raw)
        except ParamError as exc:
            errors.append((loc, str(exc), "param_range"))
            continue
        if managed is not None and name not in managed:
            errors.append((loc, f"no agent of pool {pool} manages {name}: the daemon holds it at the running "
                                "config's value", "param_held"))
            continue
        if name in policy.pins and PIPELINE_SPACE[name].validate(policy.pins[name]) != value:
            outside.append((loc, f"{name} is pinned at {policy.pins[name]!r} by the policy; "
                                 "set override_bounds to force another value", "policy_bounds"))
        elif name in policy.bounds and not policy.bounds[name][0] <= float(value) <= policy.bounds[name][1]:
            low, high = policy.bounds[name]
            outside.append((loc, f"{name}={value!r} is outside the policy's bounds [{low:g}, {high:g}]; "
                                 "set override_bounds to force it", "policy_bounds"))
    if errors:
        raise _invalid(errors)
    try:
        check_rules({**(running or {}), **policy.pins, **values}, changed=values)
    except RuleError as exc:
        raise _invalid([(["body", "params", named], str(exc), "param_rule")  # the message names the other too
                        for named in (exc.name, exc.other) if named in values]) from None
    if outside and not body.override_bounds:
        raise _invalid(outside)
    return values, [str(loc[-1]) for loc, _, _ in outside]


class Pools:
    """The pools behind the API, as the state directory's `pools.json` lists them (re-read at each request, so
    `pipetune api` over a daemon's directory sees what the daemon wrote); one `StateStore` per pool."""

    def __init__(self, root: StateStore, registries: Mapping[str, CollectorRegistry] | None = None) -> None:
        self.root = root
        self._registries = dict(registries or {})
        self._stores: dict[Path, StateStore] = {root.dir: root}
        self._lock = threading.Lock()

    def listed(self) -> list[PoolDir]:
        return load_pool_dirs(self.root.dir)

    def store(self, pool: PoolDir) -> StateStore:
        with self._lock:
            if pool.directory not in self._stores:
                self._stores[pool.directory] = StateStore(pool.directory)
            return self._stores[pool.directory]

    def registry(self, pool: PoolDir) -> CollectorRegistry:
        store = self.store(pool)
        with self._lock:
            if pool.name not in self._registries:
                self._registries[pool.name] = state_registry(store)
            return self._registries[pool.name]

    def named(self, name: str) -> PoolDir:
        """The pool called `name`; 404 naming the known ones."""
        pools = self.listed()
        for pool in pools:
            if pool.name == name:
                return pool
        raise HTTPException(404, f"no pool {name!r}; pools: {', '.join(p.name for p in pools)}")

    def default(self) -> PoolDir:
        """What the unprefixed routes address: the only pool, or the one called `default`."""
        pools = self.listed()
        if len(pools) == 1:
            return pools[0]
        for pool in pools:
            if pool.name == DEFAULT_POOL:
                return pool
        raise HTTPException(404, f"this daemon tunes pools {', '.join(p.name for p in pools)}: "
                                 "address one as /pools/{name}/...")


def _addressed_store(request: Request) -> StateStore | None:
    """The state of the pool the request addresses, set by its router's dependency (None when the pool's name
    was invalid: FastAPI answers 422 then, without calling the route)."""
    return getattr(request.state, "store", None)


_STORE = Depends(_addressed_store)
_POOL_NAME = FastApiPath(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="the pool's name, as the deployment file has it")


def create_app(store: StateStore, token: str, registries: Mapping[str, CollectorRegistry] | None = None) -> FastAPI:
    """The API over the state directory of `store`: each pool's routes under `/pools/{name}`, and the only (or
    `default`) pool's also without the prefix. `/metrics` serves `registries[pool]` (the daemon's) or
    figures read from the pool's state directory."""
    pools = Pools(store, registries)
    require_token = Depends(bearer_guard(token))
    lock = threading.Lock()  # read-modify-write of the state files, one request at a time

    app = FastAPI(title="pipetune", version="0.1.0", description=DESCRIPTION)
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)

    @app.exception_handler(405)
    async def method_not_allowed(request: Request, exc: Exception) -> JSONResponse:
        # One route per method: Starlette's own Allow would name only the first route's method.
        allowed = sorted({m for r in app.routes if isinstance(r, APIRoute) and r.matches(request.scope)[0] != Match.NONE
                          for m in r.methods})
        return JSONResponse({"detail": "Method Not Allowed"}, 405, headers={"Allow": ", ".join(allowed)})

    @app.get("/", response_class=HTMLResponse, summary="Status page", tags=["page"])
    def page() -> str:
        return page_html()

    @app.get("/healthz", response_model=HealthOut, tags=["status"])
    def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/pools", response_model=list[PoolOut], tags=["status"],
             summary="Every pool: its nodes, the config version each runs, and its status")
    def list_pools() -> list[dict]:
        return [{"name": pool.name, "nodes": list(pool.nodes), "status": _status(pools.store(pool))}
                for pool in pools.listed()]

    def default_pool() -> PoolDir:
        return pools.default()

    def named_pool(name: Annotated[str, _POOL_NAME]) -> PoolDir:
        return pools.named(name)

    for resolve, prefix in ((default_pool, ""), (named_pool, "/pools/{name}")):
        app.include_router(_pool_router(pools, resolve, require_token, lock), prefix=prefix)
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _plain_tuples(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _status(store: StateStore) -> dict:
    """The daemon's last report with the steering now in force (the policy, pause and overrides people set)."""
    policy = store.load_policy() or Policy()
    return _finite(store.load_status()) | {"mode": policy.mode, "paused": store.paused(),
                                           "policy": policy.model_dump(), "overrides": _overrides_out(store)}


def _overrides_out(store: StateStore) -> list[dict]:
    vetoed = store.vetoed_overrides()
    return [_override_out(o, o.id in vetoed) for o in store.overrides()]


def _pool_router(pools: Pools, resolve: Callable[..., PoolDir], require_token: Any, lock: threading.Lock) -> APIRouter:
    """One pool's routes; `resolve` says which pool a request addresses (404 naming the pools when none)."""
    def addressed(request: Request, pool: PoolDir = Depends(resolve)) -> None:
        request.state.pool = pool
        request.state.store = pools.store(pool)

    router = APIRouter(responses={404: {"model": ErrorOut}}, dependencies=[Depends(addressed)])

    def policy_now(store: StateStore) -> Policy:
        return store.load_policy() or Policy()

    def audit(store: StateStore, request: Request, action: str, **details: Any) -> None:
        store.append_audit({"actor": "api", "client": request.client.host if request.client else None,
                            "action": action, **details})

    @router.get("/status", response_model=StatusOut, tags=["status"],
                summary="Mode, pipeline, incumbent, last observation, guardrails, overrides, learner progress")
    def status(store: StateStore = _STORE) -> dict:
        return _status(store)

    @router.get("/policy", response_model=Policy, tags=["policy"], responses=_POLICY_OK,
                summary="The policy the learner follows")
    def get_policy(store: StateStore = _STORE) -> Policy:
        return policy_now(store)

    @router.put("/policy", response_model=Policy, tags=["policy"], responses=_WRITE | _POLICY_OK,
                dependencies=[require_token], summary="Replace the policy (takes effect at the next decision)")
    def put_policy(request: Request, body: Annotated[Policy, Body(openapi_examples={"pin and bound": {
            "value": POLICY_EXAMPLE}})], raw: bytes = Depends(_raw_body), store: StateStore = _STORE) -> Policy:
        policy = _checked(_strict(Policy, raw))
        _refuse_held(policy.model_dump(), request.state.pool.name, _managed(store))
        with lock:
            store.save_policy(policy)
            audit(store, request, "policy_set", policy=policy.model_dump())
        return policy

    @router.patch("/policy", response_model=Policy, tags=["policy"], responses=_WRITE | _POLICY_OK,
                  dependencies=[require_token],
                  summary="Change some fields of the policy (takes effect at the next decision)")
    def patch_policy(request: Request, body: PolicyPatch,  # type: ignore[valid-type]
                     raw: bytes = Depends(_raw_body), store: StateStore = _STORE) -> Policy:
        changes = _strict(PolicyPatch, raw).model_dump(exclude_unset=True)
        with lock:
            try:
                policy = Policy.model_validate(policy_now(store).model_dump() | changes)
            except ValidationError as exc:
                raise _from_pydantic(exc) from None
            policy = _checked(policy)
            _refuse_held(changes, request.state.pool.name, _managed(store))
            store.save_policy(policy)
            audit(store, request, "policy_patched", changes=changes)
        return policy

    @router.get("/overrides", response_model=list[OverrideOut], tags=["overrides"], summary="Active overrides")
    def list_overrides(store: StateStore = _STORE) -> list[dict]:
        return _overrides_out(store)

    @router.post("/overrides", response_model=OverrideOut, status_code=201, tags=["overrides"], responses=_WRITE,
                 dependencies=[require_token],
                 summary="Force parameters for ttl_s seconds (applied at the next decision, guardrails still apply)")
    def add_override(request: Request, body: OverrideRequest, store: StateStore = _STORE) -> dict:
        with lock:
            values, outside = _override_values(body, policy_now(store), request.state.pool.name, _managed(store),
                                               store.load_status().get("current_config"))
            override = store.add_override(values, body.ttl_s, body.reason, override_bounds=body.override_bounds)
            audit(store, request, "override_added", id=override.id, params=values, ttl_s=body.ttl_s,
                  reason=body.reason, override_bounds=body.override_bounds, outside_policy=outside)
        return _override_out(override, False)

    @router.delete("/overrides/{override_id}", response_model=DeletedOut, tags=["overrides"],
                   responses={**_WRITE, 404: {"model": ErrorOut}}, dependencies=[require_token],
                   summary="End an override now; control returns to the learner")
    def delete_override(request: Request, override_id: str, store: StateStore = _STORE) -> dict:
        with lock:
            if not store.delete_override(override_id):
                raise HTTPException(404, f"no active override {override_id!r}")
            audit(store, request, "override_deleted", id=override_id)
        return {"deleted": override_id}

    def set_paused(store: StateStore, request: Request, paused: bool) -> dict:
        with lock:
            store.set_paused(paused)
            audit(store, request, "paused" if paused else "resumed")
        return {"paused": paused}

    @router.post("/pause", response_model=PausedOut, tags=["control"], responses=_WRITE, dependencies=[require_token],
                 summary="Hold the current config (overrides and guardrails still act)")
    def pause(request: Request, store: StateStore = _STORE) -> dict:
        return set_paused(store, request, True)

    @router.post("/resume", response_model=PausedOut, tags=["control"], responses=_WRITE,
                 dependencies=[require_token], summary="Give control back to the learner")
    def resume(request: Request, store: StateStore = _STORE) -> dict:
        return set_paused(store, request, False)

    @router.get("/decisions", response_model=DecisionPage, tags=["history"], responses=_READ,
                summary="Decisions, newest first, each with its config diff, predicted vs observed and reason")
    def decisions(limit: int = Query(50, ge=1, le=1000, description="decisions per page"),
                  before: int | None = Query(None, ge=0, description="only decisions with seq < before"),
                  store: StateStore = _STORE) -> dict:
        # newest first across the rotated files; one more than the page tells whether an older page exists
        older = (d for d in store.decisions_newest_first() if before is None or d["seq"] < before)
        page = list(itertools.islice(older, limit + 1))
        items = [_decision_out(d) for d in page[:limit]]
        return {"items": items, "next_before": items[-1].seq if len(page) > limit else None}

    @router.get("/recommendations", response_model=RecommendationsOut, tags=["history"], responses=_READ,
                summary="In advise mode: the learner's recommendations, newest first")
    def recommendations(limit: int = Query(10, ge=1, le=1000), store: StateStore = _STORE) -> dict:
        mode = policy_now(store).mode
        if mode != "advise":
            return {"mode": mode, "items": []}
        advised = (d for d in store.decisions_newest_first() if d.get("action") == "advise" and d.get("recommendation"))
        return {"mode": mode, "items": [_decision_out(d) for d in itertools.islice(advised, limit)]}

    @router.get("/tradeoff", response_model=TradeoffOut, tags=["history"], responses=_READ,
                summary="P95 against the pipeline's CPU for every config the run measured, and the front")
    def tradeoff(store: StateStore = _STORE) -> dict:
        run = of_run(store.observations(), {name: preset(name) for name in STATIC_CHOICES})
        if run is None:
            return {"rate_eps": None, "points": []}
        return {"rate_eps": run.rate_eps, "points": [
            {"label": p.label, "p95_s": p.p95_s, "cpu_cores": p.cpu_cores, "windows": p.windows, "kept_up": p.kept_up,
             "on_front": p in run.front, "config": dict(p.config)} for p in run.points]}

    @router.get("/metrics", response_class=PlainTextResponse, tags=["status"], summary="Prometheus metrics",
                responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
                           404: {"description": "no such pool", "content": {  # JSON, unlike the metrics
                               "application/json": {"schema": ErrorOut.model_json_schema()}}}})
    def metrics(request: Request) -> PlainTextResponse:
        return PlainTextResponse(generate_latest(pools.registry(request.state.pool)), media_type=CONTENT_TYPE_LATEST)

    return router


def _plain_tuples(schema: Any) -> Any:
    """`schema` with each fixed-length array of like items (the bounds' [low, high]) as `items`, not `prefixItems`.

    Tools that read OpenAPI 3.0-style JSON Schema (schemathesis, some code generators) reject a list
    under `items`; for two numbers both forms mean the same.
    """
    if isinstance(schema, list):
        return [_plain_tuples(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    doc = {k: _plain_tuples(v) for k, v in schema.items()}
    prefix = doc.get("prefixItems")
    if isinstance(prefix, list) and prefix and all(item == prefix[0] for item in prefix):
        doc.pop("prefixItems")
        doc["items"] = prefix[0]
    return doc


def _override_out(override: Override, vetoed: bool) -> dict:
    return override.report(vetoed).model_dump()


def _decision_out(decision: dict) -> DecisionOut:
    return DecisionOut.model_validate(_finite(decision))
