"""What the tuner knows of one component, declared once: the search space, the learner's stage models, the latency
bounds and the verdict all read it, so adding a parameter touches its component (and the agent that applies it).

Latency stages are named by the points an event passes (`Topology`): "<upstream>-><point>" is its way to a
point, "<point>" its time within a component that holds events (Filebeat's queue, Logstash's batches).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from models.components.param import Param, Value

# The events a component holds back at an offered rate (ev/s) while it keeps up, given a config.
Buffered = Callable[[Mapping[str, Value], float], float]


@dataclass(frozen=True)
class Timer:
    """A wait an event may sit out in a component: `param`'s value, a duration in the parameter's unit."""

    param: str
    batch: str | None = None  # the threshold (events or bytes) that ends the wait once filled; None: it runs out
    grows_to: str | None = None  # the parameter the wait grows up to, wait after wait (Filebeat's backoff doubles)


@dataclass(frozen=True)
class Component:
    """One component's parameters, where in the latency stages each acts, its timers and what it holds back."""

    name: str  # the prefix of its parameters' keys ("filebeat", "kafka.consumer")
    params: tuple[Param, ...]
    picks_up: tuple[str, ...] = ()  # the parameters that move an event's way to it (how it takes events in)
    holds: tuple[str, ...] | None = None  # the ones that move its own stage; None: events pass it at a point
    # The next component's name -> its output's parameters to it: they move the way there and, as a batch waits in
    # the component to be sent, its own stage.
    sends: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    timers: tuple[Timer, ...] = ()
    periodic: tuple[str, ...] = ()  # intervals (durations) of work it does whatever the events: a scan of its paths
    not_above: tuple[tuple[str, str], ...] = ()  # pairs (a, b) whose values the component refuses when a > b
    # Pairs (a, b) its reference requires a <= b of, which the component does not check itself: its agent does.
    unchecked_not_above: tuple[tuple[str, str], ...] = ()
    buffered: Buffered | None = None  # None: nothing it holds is cut off by a window's end
    presets: Mapping[str, Mapping[str, Value]] = field(default_factory=dict)  # its vendor's named configs


@dataclass(frozen=True)
class Topology:
    """The components an event passes, from its `source` on, each at its point in the stage names."""

    source: str  # the point events start from
    chain: tuple[tuple[str, Component], ...]  # (point, component), upstream first

    def stage_params(self) -> dict[str, tuple[str, ...]]:
        """Each latency stage, upstream first -> the parameters that move it."""
        stages: dict[str, tuple[str, ...]] = {}
        upstream_point, upstream = self.source, None
        for i, (point, component) in enumerate(self.chain):
            downstream = self.chain[i + 1][1] if i + 1 < len(self.chain) else None
            stages[f"{upstream_point}->{point}"] = _unique(_sent(upstream, component) + component.picks_up)
            if component.holds is not None:
                stages[point] = _unique(component.holds + _sent(component, downstream))
            upstream_point, upstream = point, component
        return stages

    def passes(self, component: Component) -> bool:
        """Whether events pass `component` on their way."""
        return any(c is component for _, c in self.chain)

    def tuned(self) -> tuple[str, ...]:
        """The parameters that move a stage, in their components' order: what a learner tunes by default."""
        moving = {name for names in self.stage_params().values() for name in names}
        return tuple(p.name for _, component in self.chain for p in component.params if p.name in moving)


def _sent(sender: Component | None, receiver: Component | None) -> tuple[str, ...]:
    """The parameters of `sender`'s output to `receiver` (none at either end of the chain)."""
    return sender.sends.get(receiver.name, ()) if sender is not None and receiver is not None else ()


def _unique(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))
