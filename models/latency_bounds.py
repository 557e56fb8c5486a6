"""What a config's own waits say about a stage's latency, whatever the models have measured.

- Floor. A Filebeat harvester at the end of its file sleeps `filebeat.backoff` before it reads again, so a line
  written just after a read waits that long; a Spark query with a trigger interval starts a micro-batch only that
  often. An event arriving at a uniform moment waits half such an interval on average, and a stage's P95 is
  never below that mean. Timeouts that end early are no floor: Filebeat's `flush.timeout` (a batch flushed by
  its timer stays open, later events pass at once) and Logstash's `batch.delay` (it restarts with each event).
- Ceiling. A harvester that keeps up waits at most max(backoff, max_backoff) between reads, so no line waits
  longer to be read.
- Wait. What a stage's own timers make an event sit out at worst, while the stage keeps up: the harvester's
  backoff, Spark's trigger; Filebeat's flush timeout, Logstash's batch delay, a producer's linger and a
  consumer's fetch wait each only as long as its batch (flush.min_events, batch.size, batch bytes,
  fetch.min.bytes) takes to fill at the offered load. A stage's latency moves with it one for one where the
  stage waits out its timers; the learner expects that beyond where it has measured.
- Lull. A timer a filled batch ends sooner (Filebeat's flush timeout, a producer's linger, a consumer's fetch wait,
  Logstash's batch delay, Spark's maxTriggerDelay beside minOffsetsPerTrigger) and what a growing wait grows to
  (`max_backoff`) cost nothing at a load that fills the batch first or keeps the harvester reading, so no window
  prices raising them; in a lull every event waits them out in full. The learner holds each at most at the value
  the run started on (`lull_ceilings`): the operator's own worst case in a lull (`lull_wait_s`).

On the twin, over random configs at light and near-capacity loads, every stage's P95 stayed above 1.1 × its
floor and below 0.96 × its ceiling (tests/models/test_latency_bounds.py). The learner's models extrapolate
smoothly from what they measured; the bounds say what they cannot. Without the floor, a stage whose interval had
only moved a little looked as fast at a 39 s trigger as at 0.5 s. Without the ceiling, max_backoff had no
effect anywhere the models had looked (the harvester found lines before its wait grew), so they never
expected the 4 ms → 1 ms drop below twice the backoff.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from models.components import COMPONENTS, TOPOLOGIES, Timer
from models.learning import WHOLE_PIPELINE
from models.space import PIPELINE_SPACE, Config, Value
from models.units import SECONDS_PER_UNIT

ValueOf = Callable[[str], np.ndarray]  # a parameter's values, one per config in question

# Every component's timers by their parameter (`Timer`: the batch that ends one sooner, what one grows to).
TIMERS: dict[str, Timer] = {timer.param: timer for component in COMPONENTS for timer in component.timers}
# Each stage of each topology with each timer among the parameters that move it.
_STAGE_TIMERS = [(stage, TIMERS[name]) for topology in TOPOLOGIES.values()
                 for stage, names in topology.stage_params().items() for name in names if name in TIMERS]
# Stage -> the parameter (seconds) whose interval every event of that stage may wait for: a timer of it that always
# runs out.
STAGE_INTERVALS: dict[str, str] = {stage: timer.param for stage, timer in _STAGE_TIMERS if timer.batch is None}
# Stage -> the parameters (seconds) whose largest bounds every wait in it, while the stage keeps up: a wait that grows
# and what it grows to.
STAGE_LONGEST_WAITS: dict[str, tuple[str, ...]] = {stage: (timer.param, timer.grows_to)
                                                   for stage, timer in _STAGE_TIMERS if timer.grows_to is not None}
# The parameters whose wait a steady load hides and a lull's events sit out in full: each timer a filled batch ends
# sooner, and what each growing wait grows to.
LULL_WAITS: tuple[str, ...] = tuple(dict.fromkeys(
    [timer.param for timer in TIMERS.values() if timer.batch is not None]
    + [timer.grows_to for timer in TIMERS.values() if timer.grows_to is not None]))
# An access-log event as shipped (a JSON line and Filebeat's metadata), to count a threshold in bytes in events.
EVENT_BYTES = 800


def stage_wait_s(names: Sequence[str], value_of: ValueOf, offered_eps: np.ndarray | float) -> np.ndarray | float:
    """The longest an event sits out the timers among `names` (a stage's parameters) at `offered_eps`: the sum of
    their waits, each only as long as its threshold takes to fill (a byte threshold's events at least one)."""
    total: np.ndarray | float = 0.0
    for name in (n for n in names if n in TIMERS):
        wait_s = seconds_of(name, value_of)
        fills = TIMERS[name].batch
        if fills is not None:
            wait_s = np.minimum(wait_s, threshold_events(fills, value_of) / np.maximum(offered_eps, 1e-9))
        total = total + wait_s
    return total


def seconds_of(name: str, value_of: ValueOf) -> np.ndarray:
    """A duration parameter's values in seconds."""
    return np.asarray(value_of(name), dtype=float) * SECONDS_PER_UNIT[PIPELINE_SPACE[name].unit]


def threshold_events(name: str, value_of: ValueOf) -> np.ndarray:
    """A batch threshold's values in events: a byte threshold's at `EVENT_BYTES` an event, at least one."""
    events = np.asarray(value_of(name), dtype=float)
    return np.maximum(np.ceil(events / EVENT_BYTES), 1.0) if PIPELINE_SPACE[name].unit == "bytes" else events


def stage_floor_s(stage: str, value_of: ValueOf) -> np.ndarray | float:
    """The floor on `stage`'s P95 (s): half its interval, 0 for a stage without one. The whole pipeline's is its
    slowest stage's: every event passes through each stage."""
    if stage == WHOLE_PIPELINE:
        return np.maximum.reduce([np.asarray(value_of(name), dtype=float) / 2 for name in STAGE_INTERVALS.values()])
    name = STAGE_INTERVALS.get(stage)
    return 0.0 if name is None else np.asarray(value_of(name), dtype=float) / 2


def stage_ceiling_s(stage: str, value_of: ValueOf) -> np.ndarray | float:
    """The ceiling on `stage`'s P95 (s) while it keeps up: its longest wait, inf for a stage without one."""
    names = STAGE_LONGEST_WAITS.get(stage)
    if names is None:
        return np.inf
    return np.maximum.reduce([np.asarray(value_of(name), dtype=float) for name in names])


def lull_wait_s(config: Mapping[str, Value]) -> float:
    """The longest a lull's first event may sit out the waits of `config` a lull sits out in full: the sum of its
    `LULL_WAITS`, in seconds."""
    return sum(float(config[name]) * SECONDS_PER_UNIT[PIPELINE_SPACE[name].unit] for name in LULL_WAITS
               if name in config)


def lull_ceilings(start: Config) -> dict[str, float]:
    """The highest value the learner may give each of `LULL_WAITS`: its value in `start`, the config the run started on.

    Without it the paper pipeline at 1,750 ev/s ended on a 48.5 s flush timeout beside `min_events` 105: no window
    priced it (105 events fill in 0.09 s at the run's lightest load), and a lull's every event would wait it out
    (the operator's file: 1 s)."""
    return {name: float(start[name]) for name in LULL_WAITS if name in start}
