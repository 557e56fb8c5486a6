"""How a component declares one tunable setting: its kind, hard limits, default, unit and what changing it costs.

Keys are spelled as the components spell them, prefixed with the component
(`filebeat.queue.mem.flush.timeout`). Values use the component's own unit: durations that the
component writes as `1s`, `10ms` are float seconds here (`unit="s"`); parameters whose name carries
a unit keep it (`logstash.pipeline.batch.delay` is milliseconds in logstash.yml, so `unit="ms"`;
`kafka.consumer.fetch.max.wait.ms` and `kafka.producer.linger.ms` are milliseconds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Union

Value = Union[int, float, str, bool]


class ChangeCost(str, Enum):
    """What applying a new value takes on the running component, cheapest first."""

    LIVE = "live"  # changes while the component runs (Kafka dynamic broker config)
    RELOAD = "reload"  # the component reloads its pipeline (Logstash SIGHUP / automatic reload)
    RESTART = "restart"  # the process restarts (Filebeat, a recreated producer)

    @classmethod
    def dearest(cls, costs: Iterable["ChangeCost"]) -> "ChangeCost":
        """What a change made of `costs` takes: the dearest of them (LIVE for no change at all)."""
        order = list(cls)  # declaration order is cost order
        return max(costs, key=order.index, default=cls.LIVE)


LIVE, RELOAD, RESTART = ChangeCost.LIVE, ChangeCost.RELOAD, ChangeCost.RESTART


class ParamError(ValueError):
    """A value outside a parameter's allowed range or choices; the message names both."""

    def __init__(self, name: str, value: object, allowed: str) -> None:
        super().__init__(f"{name}={value!r} is not allowed: expected {allowed}")
        self.name = name
        self.value = value
        self.allowed = allowed


@dataclass(frozen=True)
class Param:
    """One tunable setting: kind, hard limits, default, unit and cost of change."""

    name: str
    component: str
    kind: str  # "float" | "int" | "bool" | "categorical"
    default: Value
    low: float | None = None
    high: float | None = None
    log_scale: bool = False
    unit: str = ""
    cost: ChangeCost = ChangeCost.RESTART
    choices: tuple[str, ...] = ()
    help: str = ""
    step: float | None = None  # finest resolution the component accepts (1.0: whole units); None: any value

    def snap(self, value: float, low: float, high: float) -> float:
        """`value` on this parameter's resolution (`step`) within [low, high], or clipped into it when no
        step of the resolution falls in between."""
        if self.step is None:
            return min(max(value, low), high)
        first, last = math.ceil(low / self.step) * self.step, math.floor(high / self.step) * self.step
        if first > last:
            return min(max(value, low), high)
        return min(max(round(value / self.step) * self.step, first), last)

    def allowed(self) -> str:
        """Human-readable description of the allowed values."""
        if self.kind == "categorical":
            return "one of " + ", ".join(self.choices)
        if self.kind == "bool":
            return "true or false"
        unit = f" {self.unit}" if self.unit else ""
        kind = "an integer" if self.kind == "int" else "a number"
        return f"{kind} in [{_fmt(self.low)}, {_fmt(self.high)}]{unit}"

    def validate(self, value: object) -> Value:
        """Return `value` coerced to this parameter's type, or raise `ParamError`."""
        if self.kind == "categorical":
            text = str(value)
            if text not in self.choices:
                raise ParamError(self.name, value, self.allowed())
            return text
        if self.kind == "bool":
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "false"):
                return str(value).lower() == "true"
            raise ParamError(self.name, value, self.allowed())
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):  # OverflowError: an integer no float holds
            raise ParamError(self.name, value, self.allowed()) from None
        if isinstance(value, bool) or not math.isfinite(number):
            raise ParamError(self.name, value, self.allowed())
        if self.kind == "int":
            if number != int(number):
                raise ParamError(self.name, value, self.allowed())
            number = int(number)
        assert self.low is not None and self.high is not None
        if not self.low <= number <= self.high:
            raise ParamError(self.name, value, self.allowed())
        return number


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def param(name: str, kind: str, default: Value, low: float | None = None, high: float | None = None, *,
          log: bool = False, unit: str = "", cost: ChangeCost = RESTART,
          choices: tuple[str, ...] = (), help: str = "", step: float | None = None) -> Param:
    """A `Param` of the component its key starts with."""
    return Param(name, name.split(".", 1)[0], kind, default, low, high, log, unit, cost, choices, help, step)
