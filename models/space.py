"""The pipeline's tunable parameters as one space: every component's (`models.components`), and configs over them.

A `Param` (what it may be, what changing it costs) is declared with its component; `Config` assigns every parameter
a validated value. The rest of the code meets parameters here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from typing import Collection, Iterable, Iterator, Mapping

import numpy as np

from models.components import COMPONENTS
from models.components.param import ChangeCost, Param, ParamError, Value

__all__ = ["IN_ORDER", "NOT_ABOVE", "PIPELINE_PARAMS", "PIPELINE_SPACE", "UNCHECKED_NOT_ABOVE", "ChangeCost", "Config",
           "Param", "ParamError", "RuleError", "SearchSpace", "Value", "check_rules", "kept_in_order"]


@dataclass(frozen=True)
class Config(Mapping[str, Value]):
    """A complete, validated assignment of every parameter of a `SearchSpace`."""

    values: Mapping[str, Value] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Value:
        return self.values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, repr(v)) for k, v in self.values.items())))

    def diff(self, other: Mapping[str, Value]) -> dict[str, tuple[Value, Value]]:
        """Parameters whose value differs: name -> (this value, other value)."""
        return {k: (v, other[k]) for k, v in self.values.items() if other.get(k) != v}


class SearchSpace:
    """An ordered set of `Param`s; builds and validates `Config`s over them."""

    def __init__(self, params: Iterable[Param]) -> None:
        self.params: dict[str, Param] = {p.name: p for p in params}

    def __contains__(self, name: object) -> bool:
        return name in self.params

    def __getitem__(self, name: str) -> Param:
        return self.params[name]

    def __iter__(self) -> Iterator[Param]:
        return iter(self.params.values())

    def defaults(self) -> Config:
        """Every parameter at its component's default."""
        return Config({p.name: p.default for p in self})

    def config(self, changes: Mapping[str, object] | None = None, base: Mapping[str, Value] | None = None) -> Config:
        """`base` (the defaults when omitted) with `changes` applied, every value validated.

        Raises `ParamError` for a value out of range and `KeyError` naming an unknown parameter.
        """
        values = dict(base if base is not None else self.defaults())
        for name, value in (changes or {}).items():
            if name not in self.params:
                raise KeyError(f"unknown parameter {name!r}; known: {', '.join(self.params)}")
            values[name] = self.params[name].validate(value)
        return Config(values)

    def in_order(self, config: Config, movable: Collection[str], ranges: Mapping[str, tuple[float, float]]) -> Config:
        """`config` with its `movable` values moved as the components' rules want them (`kept_in_order`, within
        `ranges`), each in its own kind."""
        named = [n for n in dict.fromkeys(n for pair in NOT_ABOVE for n in pair) if n in self]
        free = {n for n in movable if n in named}
        kept = kept_in_order({n: float(config[n]) for n in named}, free, ranges)
        changes = {n: int(round(float(kept[n]))) if self[n].kind == "int" else float(kept[n])
                   for n in free if float(kept[n]) != float(config[n])}
        return self.config(changes, base=config) if changes else config


class RuleError(ParamError):
    """Two values a component's rule forbids together: `name`'s above `other`'s; the message names both."""

    def __init__(self, name: str, value: object, other: str, other_value: object, rule: tuple[str, str]) -> None:
        super().__init__(name, value, f"at most {other}={other_value!r} (a rule of the component: "
                                      f"{rule[0]} <= {rule[1]})")
        self.other = other
        self.other_value = other_value


def check_rules(values: Mapping[str, Value], changed: Collection[str] | None = None,
                rules: tuple[tuple[str, str], ...] | None = None) -> None:
    """Raise `RuleError` for a rule (of `rules`, every one by default) that `values` break (a pair both of whose keys
    it holds) and that touches a name in `changed` (any, when None): one already broken and left alone is the
    operator's."""
    for a, b in NOT_ABOVE if rules is None else rules:
        if a in values and b in values and float(values[a]) > float(values[b]) and (
                changed is None or a in changed or b in changed):
            raise RuleError(a, values[a], b, values[b], (a, b))


def kept_in_order(values: Mapping[str, float | np.ndarray], movable: Collection[str],
                  ranges: Mapping[str, tuple[float, float]]) -> dict[str, np.ndarray]:
    """`values` (each a number, or an array of one per config) with the `movable` ones moved so that none breaks a
    rule where moving them can keep it: each first into what its range and the ranges of those it must stay above or
    below leave it (a fixed value's range is itself), then one above the value it must not exceed lowered to it.
    A config that keeps every rule is left as it is."""
    out = {n: np.asarray(v, dtype=float) for n, v in values.items()}

    def span(name: str) -> tuple[float | np.ndarray, float | np.ndarray]:
        return ranges[name] if name in movable else (out[name], out[name])

    for name in movable:
        low = reduce(np.maximum, [span(a)[0] for a, b in IN_ORDER if b == name and a in out], ranges[name][0])
        high = reduce(np.minimum, [span(b)[1] for a, b in IN_ORDER if a == name and b in out], ranges[name][1])
        out[name] = np.minimum(np.maximum(out[name], low), high)
    for _ in NOT_ABOVE:  # a lowered value may put the one below it out of order: as many passes as there are links
        for a, b in NOT_ABOVE:
            if a in movable and b in out:
                out[a] = np.minimum(out[a], out[b])
    return out


def _closure(pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    closed = dict.fromkeys(pairs)
    for _ in pairs:
        closed |= dict.fromkeys((a, d) for a, b in closed for c, d in pairs if b == c)
    return tuple(closed)


PIPELINE_PARAMS: tuple[Param, ...] = tuple(p for component in COMPONENTS for p in component.params)

PIPELINE_SPACE = SearchSpace(PIPELINE_PARAMS)

# Pairs (a, b) whose values a component refuses, or its reference forbids, when a > b (`Component.not_above`,
# `Component.unchecked_not_above`).
NOT_ABOVE: tuple[tuple[str, str], ...] = tuple(pair for component in COMPONENTS
                                               for pair in (*component.not_above, *component.unchecked_not_above))
# The ones no component checks itself: a node agent checks them before it writes anything (`check_rules`).
UNCHECKED_NOT_ABOVE: tuple[tuple[str, str], ...] = tuple(pair for component in COMPONENTS
                                                         for pair in component.unchecked_not_above)
# Every pair the rules put in order, through a chain of them too (backoff <= max_backoff <= scan_frequency puts
# backoff below scan_frequency).
IN_ORDER: tuple[tuple[str, str], ...] = _closure(NOT_ABOVE)
