"""Clock jump and skew on a node (issue 41, fault 5): a two-node testbed (real Filebeat, Kafka, Prometheus, the
probe) whose node-2 has nginx as its log source on a clock of its own (Debian's libfaketime) and its agent on the same
clock; node-1 runs the probe on this host's clock. Mid-window node-2's clock steps back 2 s while the daemon judges a
change: that window and the next (whose first second the probe still reads on the old offset) are held as disturbed,
neither credited nor blamed on the config; the one after, measured on the offset taken as the step was found, reads
the latency the client's own `X-Sent` stamps give, though nginx's clock stays 2 s behind."""

from __future__ import annotations

import math
import statistics
import threading
import time
from typing import Iterator

import pytest

from bench.faults import CLOCK_CONFIG, WITHIN, Windows
from controller.daemon import Daemon
from controller.state import StateStore
from models.policy import Policy
from models.space import PIPELINE_SPACE
from testbed.endpoints import live_pipeline
from testbed.faketime import FakeClock
from testbed.nginx_source import Arrival, SentLoad, TruthReader, clocked_node_testbed
from testbed.pipeline import NodeLayout, PipelineSpec, load_pipeline
from tests.conftest import _write_pipeline, free_ports
from tests.controller.test_daemon import Scripted

pytestmark = pytest.mark.slow
WINDOW_S = 10.0
STEP_S = -2.0  # back: every latency of the node reads 2 s longer, which judged would blame the candidate
STEP_AFTER_S = 3.0  # into the judged window: most of its events are stamped on the stepped clock
RATE_EPS = 100.0
PRIME_S = 10.0  # of load before the daemon's first window
STARTING_WINDOWS = 5  # at most, before the daemon has its incumbent and applies the candidate


class ClockNode:
    """The running testbed, its node-2 (nginx on `port`) and the clock node-2 runs on."""

    def __init__(self, spec: PipelineSpec, node: NodeLayout, clock: FakeClock, port: int) -> None:
        self.spec, self.node, self.clock, self.port = spec, node, clock, port


@pytest.fixture(scope="module")
def clock_node(installed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClockNode]:
    """Two nodes into one broker; node-2's agent (and so its offset as the daemon measures it) and its nginx on a
    FakeClock, node-1 (which runs the probe) on this host's."""
    path = _write_pipeline(tmp_path_factory.mktemp("clock-step"), "clockstep", config=CLOCK_CONFIG)
    spec = load_pipeline(path).sized(2, 1)
    node = spec.node_layouts()[1]
    clock = FakeClock()
    [port] = free_ports(1)
    try:
        with clocked_node_testbed(spec, node, clock, port):
            yield ClockNode(spec, node, clock, port)
    finally:
        clock.close()


def _each_window(windows: Windows, truth: TruthReader) -> list[tuple[float, float, int]]:
    """Every window so far as (the probe's mean latency, the truth's, lines the truth saw arrive), for a failure's
    message."""
    out = []
    for start, end, seen in windows.seen:
        arrivals = truth.between(start, end)
        mean_s = statistics.fmean(a.latency_s for a in arrivals) if arrivals else math.nan
        out.append((round(seen.mean_s, 3), round(mean_s, 3), len(arrivals)))
    return out


def _mean_latency_s(arrivals: list[Arrival]) -> float:
    assert len(arrivals) >= RATE_EPS * WINDOW_S / 2, f"only {len(arrivals)} lines of node-2 arrived in the window"
    return statistics.fmean(a.latency_s for a in arrivals)


def test_a_clock_step_mid_window_is_not_judged_and_the_next_window_reads_the_truth(clock_node, tmp_path):
    pipeline = live_pipeline(clock_node.spec)
    windows = Windows(pipeline)
    node = clock_node.node.name
    try:
        candidate = PIPELINE_SPACE.config({"filebeat.backoff": 0.02}, base=pipeline.current())  # a live change
        learner = Scripted(candidate)
        store = StateStore(tmp_path / "state")
        daemon = Daemon(pipeline, learner, Policy(), window_s=WINDOW_S, store=store)
        topic = clock_node.spec.probe.topic
        with TruthReader(clock_node.spec.bootstrap, topic, node) as truth, SentLoad(clock_node.port, RATE_EPS):
            # Filebeat finds nginx's new log at its next scan, and the probe's node-2 series are born with the first
            # lines (a series born inside a window misses its first count there): both before the first window
            truth.wait_for(RATE_EPS * PRIME_S / 2, PRIME_S * 3)
            time.sleep(PRIME_S)
            daemon.warm_up()
            started = []
            while pipeline.current() != candidate and len(started) < STARTING_WINDOWS:
                started.append((len(windows.seen), daemon.step()))
            [first, explore] = started[-1]
            assert explore.action == "explore" and pipeline.current() == candidate, [d.reason for _, d in started]
            incumbent, told = daemon.incumbent, len(learner.told)
            start, end, seen = windows.seen[first]  # before the step the probe reads what the client's stamps give
            truth_s = _mean_latency_s(truth.between(start, end))
            assert abs(seen.mean_s - truth_s) <= WITHIN * truth_s, _each_window(windows, truth)

            stepper = threading.Timer(STEP_AFTER_S, clock_node.clock.set, args=(STEP_S,))
            stepper.start()
            first = len(windows.seen)
            disturbed = daemon.step()  # the window that judges the candidate, node-2's clock stepped in it
            stepper.join()
            start, end, seen = windows.seen[first]
            stamped = truth.between(start, end)
            # nginx did write on the stepped clock (its stamps 2 s behind the client's by the window's end) ...
            assert stamped[-1].clock_ahead_s == pytest.approx(STEP_S, abs=0.1), stamped[-1]
            # ... and the window as read is off by most of the step: judged, it would have blamed the candidate
            assert seen.mean_s - _mean_latency_s(stamped) > 0.5 * abs(STEP_S), (seen.mean_s, stamped[-1])
            assert disturbed.action == "hold" and not disturbed.change and not disturbed.guardrail, disturbed.reason
            assert disturbed.reason.startswith("disturbed: clock step: ") and f"node {node}'s clock moved -" \
                in disturbed.reason, disturbed.reason
            assert daemon.rollbacks == 0 and pipeline.current() == candidate  # not blamed
            assert len(learner.told) == told and daemon.incumbent == incumbent  # nor credited
            assert store.decisions()[-1]["reason"] == disturbed.reason
            assert seen.clock_offsets[node].offset_s == pytest.approx(STEP_S, abs=0.05)  # re-measured at its end

            after = daemon.step()  # its first second read on the old offset
            assert after.action == "hold" and not after.change, after.reason
            assert f"node {node}'s clock moved -" in after.reason and "as the window before ended" in after.reason
            assert daemon.rollbacks == 0 and len(learner.told) == told and daemon.incumbent == incumbent

            first = len(windows.seen)
            judged = daemon.step()  # the candidate's own window answers for it
            start, end, seen = windows.seen[first]
            assert not judged.reason.startswith("disturbed"), judged.reason
            assert len(learner.told) == told + 1 and learner.told[-1][0] == candidate
            arrivals = truth.between(start, end)
            assert all(a.clock_ahead_s == pytest.approx(STEP_S, abs=0.1) for a in arrivals)  # still 2 s behind
            truth_s = _mean_latency_s(arrivals)
            assert abs(seen.mean_s - truth_s) <= WITHIN * truth_s, _each_window(windows, truth)
    finally:
        pipeline.close()
