"""What people allow the tuner to do: objective limits, bounds, pins, change limits and mode."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from models.budget import CpuBudget, RequestBudget
from models.space import IN_ORDER, PIPELINE_SPACE, Config, ParamError, RuleError, SearchSpace, Value

Mode = Literal["auto", "advise", "frozen"]


class Policy(BaseModel):
    """The rules every suggestion must follow; takes effect at the next decision."""

    model_config = ConfigDict(extra="forbid")

    mode: Mode = "auto"
    min_throughput_ratio: float = Field(0.95, gt=0.0, le=1.0,
                                        description="output must keep up with this share of the offered load")
    p95_ceiling_s: float | None = Field(None, gt=0.0, description="roll back when a window's P95 exceeds it")
    bounds: dict[str, tuple[float, float]] = Field(default_factory=dict,
                                                   description="narrower [low, high] per parameter")
    pins: dict[str, Value] = Field(default_factory=dict, description="parameters held at a value")
    tuned: list[str] | None = Field(None, description="parameters the learner may change (default: the pipeline's)")
    min_dwell_windows: int = Field(1, ge=1, description="windows a config is kept before the next change")
    max_restarts_per_hour: int | None = Field(None, ge=0, description="component restarts allowed per hour")
    cpu_budget: CpuBudget | None = Field(default_factory=CpuBudget, description="CPU each component may use; "
                                         "null lifts the budget")
    request_budget: RequestBudget | None = Field(None, description="Produce requests per second the node may send "
                                                 "Kafka; null (the default): no budget")
    change_horizon_s: float = Field(3600.0, gt=0.0, description="a change that restarts a component must repay, "
                                    "within this time, the delay its pause puts on the events arriving in it")

    def check(self, space: SearchSpace = PIPELINE_SPACE) -> None:
        """Raise `ParamError` (naming the field and the allowed range) for anything the space forbids."""
        for name in [*self.bounds, *self.pins, *(self.tuned or [])]:
            if name not in space:
                raise ParamError(name, name, "a known parameter: " + ", ".join(p.name for p in space))
        for name, (low, high) in self.bounds.items():
            param = space[name]
            if param.kind not in ("int", "float"):
                raise ParamError(f"bounds.{name}", [low, high], "bounds only on numeric parameters")
            if low > high:
                raise ParamError(f"bounds.{name}", [low, high], "low <= high")
            for value in (low, high):
                try:
                    param.validate(value)
                except ParamError:
                    raise ParamError(f"bounds.{name}", [low, high], param.allowed()) from None
        for name, value in self.pins.items():
            try:
                value = space[name].validate(value)
            except ParamError as exc:
                raise ParamError(f"pins.{name}", value, exc.allowed) from None
            if name in self.bounds and not self.bounds[name][0] <= float(value) <= self.bounds[name][1]:
                raise ParamError(f"pins.{name}", value, f"within its bounds {list(self.bounds[name])}")
        for a, b in IN_ORDER:  # a component's rule that the pins and bounds leave no values to keep
            if a in space and b in space:
                (low_field, low), (high_field, high) = self._extreme(a, space, 0), self._extreme(b, space, 1)
                if low > high:
                    raise RuleError(low_field, low, high_field, high, (a, b))

    def _extreme(self, name: str, space: SearchSpace, end: int) -> tuple[str, float]:
        """The lowest (`end` 0) or highest (1) value the policy leaves `name`, and the field that sets it."""
        if name in self.pins:
            return f"pins.{name}", float(space[name].validate(self.pins[name]))
        return (f"bounds.{name}" if name in self.bounds else name), self.range_of(name, space)[end]

    def range_of(self, name: str, space: SearchSpace = PIPELINE_SPACE) -> tuple[float, float]:
        """The numeric range the learner may use for `name`: its bounds, else the hard limits."""
        param = space[name]
        low, high = self.bounds.get(name, (param.low, param.high))
        return float(low), float(high)

    def enforce(self, config: Config, space: SearchSpace = PIPELINE_SPACE) -> Config:
        """`config` with pins applied and bounded values clipped into their bounds; where that puts a value out of
        order with another a component's rule ties it to, the other (unless pinned) follows it, within its bounds."""
        changes: dict[str, Value] = {}
        for name, (low, high) in self.bounds.items():
            value = float(config[name])
            if not low <= value <= high:
                clipped = min(max(value, low), high)
                changes[name] = int(round(clipped)) if space[name].kind == "int" else clipped
        changes.update(self.pins)
        enforced = space.config(changes, base=config)
        moved = {name for name in changes if enforced[name] != config[name]}
        partners = {n for pair in IN_ORDER if moved & set(pair) for n in pair} - moved - set(self.pins)
        return space.in_order(enforced, partners, {n: self.range_of(n, space) for n in partners})
