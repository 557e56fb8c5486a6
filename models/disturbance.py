"""A window the Kafka cluster disturbed (a broker lost, partitions' leaders moved, replicas out of sync), or a node's
clock that moved in it.

Such a window measures the cluster's failover, not the config: producers wait for new leaders (acks=all waits
for the in-sync replicas too), so its output stalls and its latency jumps whatever the config. Judged, it would
roll a good candidate back; taken as a figure, it would credit or blame whichever config happened to run. The
daemon holds through it instead and tells nobody its figures (controller.daemon).

What says so is what the brokers export (their JMX exporter, scraped by Prometheus, one target per broker): a
broker that stops answering its scrapes (the exporter runs inside the broker's JVM, so a broker that does not
answer it is gone or stalled), a broker whose count of partitions led changes (a leader election moved them),
partitions whose followers are not all in sync (a replica lost or catching up), and partitions without a
leader. The consumer group's lag rising is said with them, not on its own: a config that falls behind raises
it too, and that is the config's to answer for (the verdict's backlog rule).

A component that restarted in a window that pipetune did not restart (an operator loading a hand edit, a supervisor
after a crash) stopped shipping for its restart, and the events it held back arrive in a burst after it: the window
measures the restart (on an operator-style pipeline, 0 % of the input shipped and a P95 of 4.3 s where the config
held 42 ms), and judged, it read as the incumbent falling behind and sent the search back to the defaults. What
says so is each component's process start time, which the probe exports beside its CPU (`--cpu-of`).

A node's clock that steps (or drifts far) in a window moves the latencies of that node's events by as much, since
the probe corrects them by the offset measured as the window began: a forward step reads as a faster pipeline, a
backward one as a slower. Its offset is measured at each window's start and end, and a window the clock moved in by
more than its figure can bear (models.clock_offset.ClockMove) is disturbed alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Mapping

from models.clock_offset import ClockMove

# Scrapes a broker may miss in a window before it counts as gone: one is a slow scrape on a busy machine, two
# at a 1 s interval are a broker that stopped (its leaders move some 10 s later, when the controller fences it).
MISSED_SCRAPES = 2


class Cause(StrEnum):
    """What disturbed a window, in the decision log's words."""

    BROKER_SILENT = "broker silent"  # a broker stopped answering its scrapes
    LEADER_CHANGE = "leader change"  # a broker's count of partitions led changed
    UNDER_REPLICATED = "under-replicated partitions"  # a partition's followers were not all in sync
    OFFLINE = "offline partitions"  # a partition had no leader
    CLOCK_STEP = "clock step"  # a node's clock moved against the controller's more than the window's P95 bears
    RESTARTED = "restarted outside pipetune"  # a component's process started anew, no change of pipetune's asked


@dataclass(frozen=True)
class BrokerWindow:
    """What one broker's exporter said over a window."""

    missed_scrapes: int = 0
    leader_changes: int = 0  # times its count of partitions led changed between the window's scrapes
    leaders_from: float = math.nan  # partitions it led as the window began (its last scrape before; NaN: none)
    leaders_to: float = math.nan  # ... and at its last sample in the window
    under_replicated: int = 0  # the most partitions it led, at any scrape, with a follower out of sync


@dataclass(frozen=True)
class Disturbance:
    """Why a window measured a fault rather than the config: its causes, the brokers and nodes they name, in words."""

    causes: tuple[Cause, ...]
    brokers: tuple[str, ...]
    detail: str
    nodes: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.detail


def disturbance(brokers: Mapping[str, BrokerWindow], offline_partitions: int = 0,
                lag_rise_events: float = math.nan) -> Disturbance | None:
    """The window's disturbance from each broker's figures (by broker id) and the most partitions without a leader
    the controllers counted in it; None when the cluster was whole and steady. `lag_rise_events`, how far the
    consumer group's lag floor rose in the window, is said with a disturbance, never one by itself."""
    ordered = sorted(brokers.items(), key=lambda item: (len(item[0]), item[0]))  # broker 2 before broker 10
    silent = {b: w.missed_scrapes for b, w in ordered if w.missed_scrapes >= MISSED_SCRAPES}
    moved = {b: w for b, w in ordered if w.leader_changes > 0 or _moved(w.leaders_from, w.leaders_to)}
    lagging = {b: w.under_replicated for b, w in ordered if w.under_replicated > 0}
    found = {Cause.BROKER_SILENT: ", ".join(f"broker {b} missed {n} scrapes" for b, n in silent.items()),
             Cause.LEADER_CHANGE: ", ".join(f"broker {b} leads {_count(w.leaders_from)} → {_count(w.leaders_to)} "
                                            f"partitions" for b, w in moved.items()),
             Cause.UNDER_REPLICATED: ", ".join(f"{n} on broker {b}" for b, n in lagging.items()),
             Cause.OFFLINE: f"{offline_partitions} without a leader" if offline_partitions > 0 else ""}
    causes = tuple(cause for cause, said in found.items() if said)
    if not causes:
        return None
    parts = [f"{cause}: {found[cause]}" for cause in causes]
    if lag_rise_events >= 1:
        parts.append(f"consumer lag rose {lag_rise_events:.0f} events")
    named = tuple(b for b, _ in ordered if b in silent or b in moved or b in lagging)
    return Disturbance(causes, named, "; ".join(parts))


# a move found as the window before ended: the probe applies the offset measured then at its next bookkeeping
_BEFORE_WINDOW = " as the window before ended (the probe applies its new offset a second or so later)"


def clock_disturbance(moves: Mapping[str, ClockMove], p95_s: float, resolution_s: float) -> Disturbance | None:
    """The window's disturbance from how far each node's clock moved in it (by node), judged against the window's
    P95 and the event time's resolution; None when no clock moved enough to put the figure off."""
    stepped = {node: move for node, move in sorted(moves.items()) if move.disturbs(p95_s, resolution_s)}
    if not stepped:
        return None
    said = ", ".join(f"node {node}'s clock moved {move.moved_s * 1000:+.0f} ms (± {move.error_s * 1000:.0f} ms)"
                     f"{_BEFORE_WINDOW if move.before_window else ''}" for node, move in stepped.items())
    return Disturbance((Cause.CLOCK_STEP,), (), f"{Cause.CLOCK_STEP}: {said}, its events' latencies with it",
                       tuple(stepped))


def restart_disturbance(starts: Mapping[str, int]) -> Disturbance | None:
    """The window's disturbance from how many times each component's process started anew in it (by component, as
    `pipetune_component_start_time_seconds` changed inside it, where pipetune's own restarts never fall); None when
    none did."""
    restarted = {name: n for name, n in sorted(starts.items()) if n > 0}
    if not restarted:
        return None
    said = ", ".join(f"{name} started {n} time{'s' if n > 1 else ''}" for name, n in restarted.items())
    return Disturbance((Cause.RESTARTED,), (), f"{Cause.RESTARTED}: {said} in the window")


def combined(first: Disturbance | None, second: Disturbance | None) -> Disturbance | None:
    """Both disturbances of one window as one (either alone when the other is None)."""
    if first is None or second is None:
        return first or second
    return Disturbance(first.causes + second.causes, first.brokers + second.brokers,
                       f"{first.detail}; {second.detail}", first.nodes + second.nodes)


def _moved(leaders_from: float, leaders_to: float) -> bool:
    """Whether a broker led another count at the window's end than as it began: a change between its last scrape
    before the window and its first in it, which no change inside the window shows."""
    return math.isfinite(leaders_from) and math.isfinite(leaders_to) and leaders_from != leaders_to


def _count(leaders: float) -> str:
    """A broker's partitions led, or `?` where it did not say."""
    return f"{leaders:.0f}" if math.isfinite(leaders) else "?"
