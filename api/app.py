"""The REST API over one daemon's state directory: status, policy, overrides, pause, history, metrics.

Everything goes through `StateStore`, which the daemon re-reads at each decision, so the API works the
same inside the daemon's process (`pipetune autotune --api-port`) and on its own (`pipetune api`).
GET endpoints are readable without a token; every mutating call needs the bearer token.
"""

from __future__ import annotations

import itertools
import math
import threading
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, HTTPException, Query, Request
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
                         OverrideRequest, PausedOut, PolicyPatch, RecommendationsOut, StatusOut, ValidationErrorOut)
from controller.state import Override, StateStore
from models.policy import Policy
from models.space import PIPELINE_SPACE, ParamError, Value

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


def _param_error_loc(policy: Policy, exc: ParamError) -> list[str | int]:
    field, _, name = exc.name.partition(".")
    if field in ("bounds", "pins") and name:
        return ["body", field, name]
    owner = next((f for f in ("bounds", "pins", "tuned") if exc.name in (getattr(policy, f) or ())), None)
    return ["body", owner, exc.name] if owner else ["body", exc.name]


def _checked(policy: Policy) -> Policy:
    """`policy` if the parameter space allows it, else a 422 naming the field and the allowed range."""
    try:
        policy.check(PIPELINE_SPACE)
    except ParamError as exc:
        raise _invalid([(_param_error_loc(policy, exc), str(exc), "param_range")]) from None
    if policy.p95_ceiling_s is not None and not math.isfinite(policy.p95_ceiling_s):
        raise _invalid([(["body", "p95_ceiling_s"], "expected a finite number of seconds > 0", "value_error")])
    # Pins stored in each parameter's own type, so `"512"` from a command line reads back as 512.
    return policy.model_copy(update={"pins": {k: PIPELINE_SPACE[k].validate(v) for k, v in policy.pins.items()}})


def _override_values(body: OverrideRequest, policy: Policy) -> tuple[dict[str, Value], list[str]]:
    """The override's values validated against each Param's hard limits, and which leave the policy's bounds.

    Raises 422 for a value outside hard limits, and for one outside the policy's bounds or against a
    pin unless the request sets `override_bounds`.
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
        if name in policy.pins and PIPELINE_SPACE[name].validate(policy.pins[name]) != value:
            outside.append((loc, f"{name} is pinned at {policy.pins[name]!r} by the policy; "
                                 "set override_bounds to force another value", "policy_bounds"))
        elif name in policy.bounds and not policy.bounds[name][0] <= float(value) <= policy.bounds[name][1]:
            low, high = policy.bounds[name]
            outside.append((loc, f"{name}={value!r} is outside the policy's bounds [{low:g}, {high:g}]; "
                                 "set override_bounds to force it", "policy_bounds"))
    if errors:
        raise _invalid(errors)
    if outside and not body.override_bounds:
        raise _invalid(outside)
    return values, [str(loc[-1]) for loc, _, _ in outside]


def create_app(store: StateStore, token: str, metrics_registry: CollectorRegistry | None = None) -> FastAPI:
    """The API over `store`; `/metrics` serves `metrics_registry` (the daemon's) or figures read from the store."""
    require_token = Depends(bearer_guard(token))
    registry = metrics_registry or state_registry(store)
    lock = threading.Lock()  # read-modify-write of the state files, one request at a time

    app = FastAPI(title="pipetune", version="0.1.0", description=DESCRIPTION)
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)

    @app.exception_handler(405)
    async def method_not_allowed(request: Request, exc: Exception) -> JSONResponse:
        # One route per method: Starlette's own Allow would name only the first route's method.
        allowed = sorted({m for r in app.routes if isinstance(r, APIRoute) and r.matches(request.scope)[0] != Match.NONE
                          for m in r.methods})
        return JSONResponse({"detail": "Method Not Allowed"}, 405, headers={"Allow": ", ".join(allowed)})

    def policy_now() -> Policy:
        return store.load_policy() or Policy()

    def overrides_out() -> list[dict]:
        vetoed = store.vetoed_overrides()
        return [_override_out(o, o.id in vetoed) for o in store.overrides()]

    def audit(request: Request, action: str, **details: Any) -> None:
        store.append_audit({"actor": "api", "client": request.client.host if request.client else None,
                            "action": action, **details})

    @app.get("/", response_class=HTMLResponse, summary="Status page", tags=["page"])
    def page() -> str:
        return page_html()

    @app.get("/healthz", response_model=HealthOut, tags=["status"])
    def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/status", response_model=StatusOut, tags=["status"],
             summary="Mode, pipeline, incumbent, last observation, guardrails, overrides, learner progress")
    def status() -> dict:
        policy = policy_now()
        return _finite(store.load_status()) | {"mode": policy.mode, "paused": store.paused(),
                                               "policy": policy.model_dump(), "overrides": overrides_out()}

    @app.get("/policy", response_model=Policy, tags=["policy"], responses=_POLICY_OK,
             summary="The policy the learner follows")
    def get_policy() -> Policy:
        return policy_now()

    @app.put("/policy", response_model=Policy, tags=["policy"], responses=_WRITE | _POLICY_OK,
             dependencies=[require_token], summary="Replace the policy (takes effect at the next decision)")
    def put_policy(request: Request, body: Annotated[Policy, Body(openapi_examples={"pin and bound": {
            "value": POLICY_EXAMPLE}})], raw: bytes = Depends(_raw_body)) -> Policy:
        policy = _checked(_strict(Policy, raw))
        with lock:
            store.save_policy(policy)
            audit(request, "policy_set", policy=policy.model_dump())
        return policy

    @app.patch("/policy", response_model=Policy, tags=["policy"], responses=_WRITE | _POLICY_OK,
               dependencies=[require_token], summary="Change some fields of the policy (takes effect at the next decision)")
    def patch_policy(request: Request, body: PolicyPatch,  # type: ignore[valid-type]
                     raw: bytes = Depends(_raw_body)) -> Policy:
        changes = _strict(PolicyPatch, raw).model_dump(exclude_unset=True)
        with lock:
            try:
                policy = Policy.model_validate(policy_now().model_dump() | changes)
            except ValidationError as exc:
                raise _from_pydantic(exc) from None
            policy = _checked(policy)
            store.save_policy(policy)
            audit(request, "policy_patched", changes=changes)
        return policy

    @app.get("/overrides", response_model=list[OverrideOut], tags=["overrides"], summary="Active overrides")
    def list_overrides() -> list[dict]:
        return overrides_out()

    @app.post("/overrides", response_model=OverrideOut, status_code=201, tags=["overrides"], responses=_WRITE,
              dependencies=[require_token],
              summary="Force parameters for ttl_s seconds (applied at the next decision, guardrails still apply)")
    def add_override(request: Request, body: OverrideRequest) -> dict:
        with lock:
            values, outside = _override_values(body, policy_now())
            override = store.add_override(values, body.ttl_s, body.reason, override_bounds=body.override_bounds)
            audit(request, "override_added", id=override.id, params=values, ttl_s=body.ttl_s, reason=body.reason,
                  override_bounds=body.override_bounds, outside_policy=outside)
        return _override_out(override, False)

    @app.delete("/overrides/{override_id}", response_model=DeletedOut, tags=["overrides"],
                responses={**_WRITE, 404: {"model": ErrorOut}}, dependencies=[require_token],
                summary="End an override now; control returns to the learner")
    def delete_override(request: Request, override_id: str) -> dict:
        with lock:
            if not store.delete_override(override_id):
                raise HTTPException(404, f"no active override {override_id!r}")
            audit(request, "override_deleted", id=override_id)
        return {"deleted": override_id}

    def set_paused(request: Request, paused: bool) -> dict:
        with lock:
            store.set_paused(paused)
            audit(request, "paused" if paused else "resumed")
        return {"paused": paused}

    @app.post("/pause", response_model=PausedOut, tags=["control"], responses=_WRITE, dependencies=[require_token],
              summary="Hold the current config (overrides and guardrails still act)")
    def pause(request: Request) -> dict:
        return set_paused(request, True)

    @app.post("/resume", response_model=PausedOut, tags=["control"], responses=_WRITE, dependencies=[require_token],
              summary="Give control back to the learner")
    def resume(request: Request) -> dict:
        return set_paused(request, False)

    @app.get("/decisions", response_model=DecisionPage, tags=["history"], responses=_READ,
             summary="Decisions, newest first, each with its config diff, predicted vs observed and reason")
    def decisions(limit: int = Query(50, ge=1, le=1000, description="decisions per page"),
                  before: int | None = Query(None, ge=0, description="only decisions with seq < before")) -> dict:
        # newest first across the rotated files; one more than the page tells whether an older page exists
        older = (d for d in store.decisions_newest_first() if before is None or d["seq"] < before)
        page = list(itertools.islice(older, limit + 1))
        items = [_decision_out(d) for d in page[:limit]]
        return {"items": items, "next_before": items[-1].seq if len(page) > limit else None}

    @app.get("/recommendations", response_model=RecommendationsOut, tags=["history"], responses=_READ,
             summary="In advise mode: the learner's recommendations, newest first")
    def recommendations(limit: int = Query(10, ge=1, le=1000)) -> dict:
        mode = policy_now().mode
        if mode != "advise":
            return {"mode": mode, "items": []}
        advised = (d for d in store.decisions_newest_first() if d.get("action") == "advise" and d.get("recommendation"))
        return {"mode": mode, "items": [_decision_out(d) for d in itertools.islice(advised, limit)]}

    @app.get("/metrics", response_class=PlainTextResponse, tags=["status"], summary="Prometheus metrics",
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}})
    def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _plain_tuples(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


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
