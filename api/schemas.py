"""Request and response bodies of the REST API, with the examples its OpenAPI schema shows.

The policy body is `models.policy.Policy` itself; `PolicyPatch` is the same fields, each optional
(a PATCH replaces the top-level fields it names and keeps the rest). Decisions, the status and
overrides are the daemon's own documents (`controller.state`), with the API's few additions.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from controller.state import Decision, OverrideReport, Status
from models.policy import Mode, Policy
from models.space import PIPELINE_SPACE, Value

MAX_TTL_S = 7 * 86400.0
MIN_TTL_S = 1.0

POLICY_EXAMPLE = {
    "mode": "auto", "min_throughput_ratio": 0.95, "p95_ceiling_s": 2.0,
    "bounds": {"filebeat.queue.mem.flush.timeout": [0.0, 1.0]},
    "pins": {"filebeat.output.bulk_max_size": 512}, "tuned": None,
    "min_dwell_windows": 2, "max_restarts_per_hour": 6,
}

PolicyPatch = create_model(
    "PolicyPatch",
    __config__=ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"mode": "frozen"}, {"pins": {"filebeat.output.bulk_max_size": 512}, "p95_ceiling_s": 1.5}]}),
    __doc__="Some of the policy's fields; those named replace the stored ones, the rest are kept.",
    **{name: (f.annotation, FieldInfo.merge_field_infos(f, default=None, default_factory=None))
       for name, f in Policy.model_fields.items()},
)


class ErrorOut(BaseModel):
    """An error that is not about one field (401, 403, 404, 413)."""

    detail: str = Field(examples=["missing bearer token"])


class FieldError(BaseModel):
    """One invalid field: where it is, and what is allowed there."""

    loc: list[str | int] = Field(examples=[["body", "params", "filebeat.output.bulk_max_size"]])
    msg: str = Field(examples=["filebeat.output.bulk_max_size=0 is not allowed: expected an integer in [1, 65536] events"])
    type: str = Field(examples=["param_range"])


class ValidationErrorOut(BaseModel):
    """422: every field the request got wrong."""

    detail: list[FieldError]


class OverrideRequest(BaseModel):
    """Force some parameters for a while; the learner takes over again when the TTL runs out."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, json_schema_extra={"examples": [
        {"params": {"filebeat.queue.mem.flush.timeout": 0.1, "filebeat.output.bulk_max_size": 256},
         "ttl_s": 600, "reason": "incident 4711: latency first"}]})

    params: dict[str, Value] = Field(min_length=1, max_length=len(PIPELINE_SPACE.params),
                                     description="parameter -> value, each within its hard limits")
    ttl_s: float = Field(ge=MIN_TTL_S, le=MAX_TTL_S, description="seconds the override holds")
    reason: str = Field(min_length=1, max_length=500, description="why (kept in the audit log)")
    override_bounds: bool = Field(False, description="allow values outside the policy's bounds and pins (audited)")


class OverrideOut(OverrideReport):
    """An active override and how long it has left."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"id": "3f2a9c1b7d4e", "params": {"filebeat.output.bulk_max_size": 256}, "reason": "incident 4711",
         "created_at": 1767000000.0, "expires_at": 1767000600.0, "remaining_s": 598.2, "override_bounds": False,
         "vetoed": False}]})


class DeletedOut(BaseModel):
    deleted: str = Field(examples=["3f2a9c1b7d4e"])


class PausedOut(BaseModel):
    paused: bool


class HealthOut(BaseModel):
    status: Literal["ok"] = "ok"


COST_EXAMPLE = {"cpu_cores": {"filebeat": 0.061, "probe": 0.02, "broker-1": 0.12}, "busiest_cpu_share": 0.18,
                "packets_per_s": 41.0, "produce_requests_per_s": 44.0, "kafka_bytes_in_per_s": 240000.0}

DECISION_EXAMPLE = {
    "window": 12, "t_s": 390.0, "action": "explore", "reason": "expected improvement 0.12 s, feasible with 97 %",
    "config": {"filebeat.output.bulk_max_size": 2048}, "change": {"filebeat.output.bulk_max_size": [2048, 512]},
    "predicted": {"p95_s": 0.41}, "observed": {"p95_s": 0.52, "throughput_ratio": 1.0, **COST_EXAMPLE},
    "guardrail": [], "recommendation": {}, "incumbent_p95_s": 0.5, "pause_s": 2.0}


class DecisionOut(Decision):
    """One decision of the daemon: the window's config and measurement, what it did and why."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [
        {"seq": 12, "wall_time": 1767000000.0, **DECISION_EXAMPLE}]})

    seq: int = Field(description="position in the whole decision log, rotated files included; pass it as `before` to page back")
    wall_time: float | None = None


class DecisionPage(BaseModel):
    """Decisions, newest first; `next_before` fetches the page before this one (null: no more)."""

    items: list[DecisionOut]
    next_before: int | None


class RecommendationsOut(BaseModel):
    """What the learner recommends while the mode is `advise` (newest first; empty in other modes)."""

    mode: Mode
    items: list[DecisionOut]


class StatusOut(Status):
    """The daemon's last report (null fields until it has run a window) with the current steering."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [{
        "pipeline": "pipeline", "mode": "auto", "paused": False, "window": 12, "t_s": 390.0, "updated_at": 1767000000.0,
        "current_config": {"filebeat.output.bulk_max_size": 512},
        "incumbent": {"config": {"filebeat.output.bulk_max_size": 512}, "p95_s": 0.48, "offered_eps": 300.0,
                      "cost": COST_EXAMPLE},
        "last_decision": DECISION_EXAMPLE,
        "guardrail": {"last_breaches": [], "rollbacks": 1, "violation_s": 30.0},
        "learner": {"observations": 13, "last_reason": "minimum dwell of 2 windows"},
        "overrides": [], "policy": POLICY_EXAMPLE}]})

    overrides: list[OverrideOut]
    policy: Policy


class PoolOut(BaseModel):
    """A pool of the daemon: its nodes (the config version each runs is in `status.nodes`) and its status."""

    name: str = Field(examples=["edge"])
    nodes: list[str] = Field(examples=[["node-1", "node-2"]], description="empty when the state directory "
                                                                          "predates pools")
    status: StatusOut


class TradeoffPoint(BaseModel):
    """One config the run measured: its median P95 and the pipeline's CPU at the trade-off's load."""

    label: str = Field(description="a preset's name (defaults, balanced, ... hybrid), or config N in run order")
    p95_s: float
    cpu_cores: float = Field(description="the pipeline's own CPU at rate_eps, cores: the budget this config needs")
    windows: int
    kept_up: bool = Field(description="most of its windows kept up; only such a config is on the front")
    on_front: bool = Field(description="no config that kept up is at least as fast for no more CPU")
    config: dict[str, Value]


class TradeoffOut(BaseModel):
    """P95 against CPU for the configs the run measured (`pipetune tradeoff`, docs/tradeoff.md)."""

    rate_eps: float | None = Field(description="the load CPU is shown at: the run's median offered load")
    points: list[TradeoffPoint]
