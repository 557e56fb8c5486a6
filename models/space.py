"""The pipeline's tunable parameters as one space: every component's (`models.components`), and configs over them.

A `Param` (what it may be, what changing it costs) is declared with its component; `Config` assigns every parameter
a validated value. The rest of the code meets parameters here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping

from models.components import COMPONENTS
from models.components.param import ChangeCost, Param, ParamError, Value

__all__ = ["NOT_ABOVE", "PIPELINE_PARAMS", "PIPELINE_SPACE", "ChangeCost", "Config", "Param", "ParamError",
           "SearchSpace", "Value"]


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


PIPELINE_PARAMS: tuple[Param, ...] = tuple(p for component in COMPONENTS for p in component.params)

PIPELINE_SPACE = SearchSpace(PIPELINE_PARAMS)

# Pairs (a, b) whose values a component refuses when a > b.
NOT_ABOVE: tuple[tuple[str, str], ...] = tuple(pair for component in COMPONENTS for pair in component.not_above)
