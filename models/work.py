"""What a config makes a component do each second: the work its CPU follows, whatever the models have measured.

A shipper's CPU is the sum of what it does, each kind of work at its own price: every event read, parsed and
sent; every wake-up of a timer (a harvester polling its file at the end of it, a queue flushed to the output,
a micro-batch started); every scan of the input's paths. How often each happens follows from the config and
the load: a timer a batch ends sooner fires once per batch (`Timer.batch`: min(threshold, load × timeout)
events, at least one), one that runs out fires once per interval; a wait that grows (`Timer.grows_to`) polls
an idle file once per its longest wait; a periodic job (`Component.periodic`) runs once per its interval.

What each kind costs differs from pipeline to pipeline (a scan of 1,000 rotated files costs more than a scan of
one); the learner fits the prices on the windows it measured (`models.bayes.costs`). The rates are what carry a
measurement to a config not measured: a flush timeout of 5 ms at 6,600 ev/s flushes 200 times a second, not the
6,600 of 0.1 ms, so it costs a little more than 56 ms, not most of the way to 0.1 ms.
"""

from __future__ import annotations

import numpy as np

from models.components import Component
from models.latency_bounds import ValueOf, seconds_of, threshold_events

SHORTEST_S = 1e-3  # an interval below this runs at this: a poll at 0 is a busy loop, not an infinite rate


def work_names(component: Component) -> tuple[str, ...]:
    """The kinds of work `component` does, in `work_rates`' column order: the events, then by parameter."""
    timers = [t.param for t in component.timers] + [t.grows_to for t in component.timers if t.grows_to]
    return ("events", *timers, *component.periodic)


def work_rates(component: Component, value_of: ValueOf, offered_eps: np.ndarray | float) -> np.ndarray:
    """Each kind of work `component` does per second (`work_names`' columns), one row per config: at `offered_eps`
    events a second, under the values `value_of` gives."""
    load = np.asarray(offered_eps, dtype=float)
    columns = [load]
    for timer in component.timers:
        if timer.batch is None:
            columns.append(1.0 / _seconds(timer.param, value_of))
            continue
        # not held to SHORTEST_S: a batch holds an event at least
        fills = np.minimum(threshold_events(timer.batch, value_of), load * seconds_of(timer.param, value_of))
        columns.append(load / np.maximum(fills, 1.0))
    columns += [1.0 / _seconds(t.grows_to, value_of) for t in component.timers if t.grows_to]
    columns += [1.0 / _seconds(name, value_of) for name in component.periodic]
    rows = np.broadcast_arrays(*columns)
    return np.column_stack([np.atleast_1d(c) for c in rows])


def _seconds(name: str, value_of: ValueOf) -> np.ndarray:
    """`name`'s interval in seconds, at least `SHORTEST_S`."""
    return np.maximum(seconds_of(name, value_of), SHORTEST_S)
