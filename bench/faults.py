"""Faults a production pipeline meets, injected several times under load (issue 41): did pipetune hold its judgement,
lose nothing and keep every node's record true?

    python -m bench.faults [--reps 2] [--window 10] [--rate 100] [--faults network,broker,...] [--out DIR]

It prints one table, a row per fault in the issue's order: fault, injections, windows frozen or marked disturbed,
decisions that blamed or credited a config wrongly (goal 0), events lost (goal 0), nodes left on a version they did
not report (goal 0), sockets off loopback (goal 0), the worst time to recover. Writes result.json (bench/result.py)
with every injection's record to --out. Each fault runs on a testbed of its own, one after the other; every address
is this machine's (loopback, or the network namespaces the network fault makes).

Common to the faults on a live testbed (2, 3, 4's agent, 5, 7): the daemon runs over the live pipeline with a
learner that proposes a change every time it is asked, so every injection lands while a change is judged. Wrong decisions:
anything judged, told to the learner, rolled back or adopted on a window held for the fault, and the first window
judged again if it rolled back, breached a guardrail or (where a truth is kept) read a mean latency more than 10 %
off the truth's. Nodes off version: each node's agent's report against what its files hold, read from disk, after
each injection and at the end. Time to recover: from the injection to the end of the first window judged again.

Faults 3, 4's agent, 5 and 7 share one testbed shape: two nodes into one broker, node-2's nginx (its log source)
loaded with --rate requests/s, each carrying its client's send time, and a Kafka consumer of the bench's own timing each line
(the truth; events lost: requests nginx answered whose line never reached Kafka).

1. Network (partition, 300 ms each way, 5 % of packets lost; `testbed.net_pool`, as tests/faults/test_network.py):
   two `pipetune agent`s over stand-in Filebeats, each in a network namespace behind a link in user space
   (`testbed.netns`, what `tc netem` does; this kernel has no `sch_netem`), the daemon over a canary pool of them with
   1 s windows and a stand-in Prometheus whose latency follows each node's flush timeout, a better timeout proposed.
   Partition: node-2 cut off once the canary runs the candidate, for two windows, then healed; delay and loss: every
   link shaped from the start. Each on a fresh pool. Wrong: the candidate not promoted on both nodes in the end, or a
   rollback. Recovered in: from the heal (or the shaping) until the pool is on one version. Events lost '-': no
   events cross this harness (the link carries the controller's requests; the pipeline's data does not use it).
2. Broker loss: one Filebeat node into three brokers (topic replicated 3 times, `min.insync.replicas` 2, acks=all),
   200 events/s replayed; 2 s into the window judging a change the leader of the topic's partition is killed
   (SIGKILL); after two windows it is started again, back in sync and leading (testbed/broker_loss.py), so the time to
   recover includes that restart. Events lost: the replay's ledger.
3. Disk full: node-2's Filebeat home (its config files and, under it, its registry) on a 16 MiB tmpfs, filled to its
   last byte 3 s into a judged window; two windows later the room is given back. Filebeat ships on; a change the
   daemon makes meanwhile is refused (507, or the node not healthy) and must leave the running version as it was.
   Wrong: a rollback or a judged window off the truth; a window frozen because its change was refused judged a fair
   window first (the disk does not touch latency), so what it told the learner is no wrong decision. Recovered in:
   from the room given back.
4. SIGKILL of the agent mid-apply: the learner alternates a flush timeout (Filebeat restarts to take it); node-2's
   agent is killed once the daemon's change has written node-2's files and before its health check passed, then
   started again over the same state; if it does not start, the Filebeats the killed agent left running are killed
   by hand (as an operator would) and it is started once more, and that injection counts as not recovered. Frozen:
   the window whose change the kill cut short, and any after it. The agent's audit log (`interrupted`, `recovered`)
   is in the record.
4. SIGKILL of the daemon between promotion steps (`testbed.daemon_kill`, as tests/faults/test_sigkill.py's real
   daemon test): `pipetune autotune --pipeline` over a canary pool of two real `pipetune agent`s on loopback (over
   stand-in Filebeats, `testbed.net_pool.loopback_nodes`), a stand-in Prometheus whose latency follows each node's flush
   timeout, and a broker of its own for the consumer group's lag; a person's override (a shorter flush timeout) is put
   on the canary, judged better and promoted, and the daemon's process group is SIGKILLed while node-2's step waits for
   its Filebeat's health. Node-2's step then ends, once applied and once failed (its new Filebeat killed: the agent
   puts the version before back), and the daemon is started again on its state directory for one window: twice per
   --reps, each on a fresh pool. Wrong: the promotion not ended on every node, or anything rolled back. Nodes off
   version: an agent reporting another flush timeout than its files hold, or files holding another than the version
   the rollout places the node on. Recovered in: from the restart until the rollout is steady with every node on one
   version (Ray's start included). Events lost '-': no events flow through the stand-in Filebeats. Whether the
   decision log said what happened (one `recover` decision naming what was found and done) is printed under the
   table and in the record (`logged`). Its windows are 2 s (the figures are the stand-in Prometheus's).
5. Clock step: node-2's nginx and agent on a clock of their own (Debian's libfaketime); it steps by 2 s, back then
   forth, 3 s into the window judging a change (tests/faults/test_clock.py checks the same once).
6. Listening: not an injection but a property of every run: every 2 s while the other faults run, the sockets this
   process and every process it started (brokers, Prometheus, agents, Filebeats, nginx, the probe, and the `pipetune
   autotune` of the daemon kill with its local Ray) listen on, counted off loopback when outside 127.0.0.0/8 and ::1
   (the testbed's simulated hosts are other 127/8 addresses). Injections are the listings taken; every other column
   '-' (nothing is disturbed or decided). The agents in network namespaces listen on their namespace's address by
   design and are outside this namespace's listing. tests/test_listening.py holds a whole `autotune` run, its REST
   API too, to the stricter listening rule (127.0.0.1, ::1 only), with the same listing (`testbed.faults`).
7. Bad input: 3 s into a judged window, the lines of `testbed.faults.BAD_LINES` (no event time, invalid UTF-8,
   binary garbage, 1 MiB) appended to node-2's log beside nginx's, and `BAD_CONFIG_BODIES` sent to node-2's agent
   (each must be a 422 naming the field: the record says so). Frozen/disturbed '-' when none was held: bad input is
   counted and skipped, not a disturbance. The schemathesis fuzzing and the malformed files are
   tests/faults/test_bad_input.py's (no window to judge them in).

The machine's load at the start and end is in result.json: figures taken on a loaded machine are slower, not wrong.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Iterator

import httpx
import yaml

from agents.filebeat.adapter import FilebeatAdapter
from agents.filebeat.patch import InputSelector
from agents.filebeat.render import input_selector
from bench.result import RESULT_FILE, BenchResult
from controller.daemon import Daemon
from controller.kafka_lag import close_open_watches
from controller.live import LivePipeline
from controller.state import Decision, StateStore
from models.learning import Suggestion
from models.observation import Observation
from models.policy import Policy
from models.space import PIPELINE_SPACE, Config
from replay.profiles import Profile, WorkloadSpec
from testbed import lifecycle, processes
from testbed.agent import agent_dir, agent_url, client as agent_client, token_file
from testbed.broker_loss import KILL_AFTER_S, kill_broker, leader_of, restart_broker
from testbed.calibration_design import LOW_LATENCY
from testbed.endpoints import live_pipeline
from testbed.faketime import FakeClock
from testbed.faults import (BAD_CONFIG_BODIES, BAD_LINES, fill, kill_when_pending, listeners, mount_small_disk,
                            off_loopback, pending_file, process_tree, processes_with, unmount)
from testbed.filebeat_layout import filebeat_layout
from testbed.harness import BackgroundLoad
from testbed.install import install_all
from testbed.daemon_kill import (Recovery, autotune, brokers_only, commit_group, kill_between_steps, recover_reason,
                                 restart, write_deployment)
from testbed.net_pool import (DEFAULTS as NET_DEFAULTS, FASTER, NAMES as NET_NAMES, TIMEOUT, NetNode, Pool,
                              StandInPrometheus, build_pool, loopback_nodes, net_nodes, until, untruthful)
from testbed.nginx_source import SentLoad, TruthReader, clocked_node_testbed
from testbed.pipeline import DEFAULT_PIPELINE, NodeLayout, PipelineSpec, load_pipeline
from testbed.probe import checkout_env
from testbed.processes import Service, TestbedError

ROOT = Path(__file__).resolve().parents[1]
PORT_SHIFT = 700  # the testbed's ports, above the default pipeline's
NGINX_PORT = 19780
STEP_S = 2.0  # the clock's jump, back then forth
STEP_AFTER_S = 3.0  # into the judged window
WITHIN = 0.10  # of the truth: a window judged on a figure further off is a wrong decision
MAX_WINDOWS = 6  # after an injection, before it counts as not recovered
PRIME_S = 10.0  # of load before the first window: Filebeat's first scan of nginx's log
BACKOFFS_S = (0.02, 0.01)  # the two values the learner proposes in turn (live changes: the input reloads)
# Latencies of a few hundred ms (the queue's 0.5 s flush): 10 % of them is well above what a loopback offset estimate
# can be off by, and a 2 s step is still several times the P95.
CLOCK_CONFIG = {"preset": "defaults", "set": {"filebeat.backoff": 0.01, "filebeat.max_backoff": 0.05,
                                              "filebeat.queue.mem.flush.min_events": 2048,
                                              "filebeat.queue.mem.flush.timeout": 0.5,
                                              "kafka.consumer.fetch.max.wait.ms": 10}}
NA = "-"  # a column that does not apply to the fault (the module's docstring says why)


@dataclass(frozen=True)
class Injection:
    """One fault injected: the windows held through it, the wrong decisions it led to, and how long until a window was
    judged again (None: not within `MAX_WINDOWS`)."""

    held: int
    wrong: int
    recover_s: float | None
    judged_off: float | None  # the first window judged again: its mean latency against the truth's, as a share
    reasons: tuple[str, ...]
    off_version: int = 0  # nodes whose agent reported a version their files did not hold, once recovered


@dataclass(frozen=True)
class FaultRow:
    """One fault's line of the table; `NA` where a column does not apply to it."""

    fault: str
    injections: int
    windows_held: int | str  # frozen or marked disturbed
    wrong_decisions: int | str
    events_lost: int | str
    nodes_off_version: int | str
    off_loopback: int | str  # sockets pipetune's processes opened off loopback
    recover_s_max: float | str | None  # None: some injection was not recovered from

    def row(self) -> dict:
        return asdict(self)


def row_of(fault: str, done: list[Injection], events_lost: int | str, nodes_off_version: int) -> FaultRow:
    """A fault's row from its injections: windows held and wrong decisions summed, the worst time to recover (None
    if any injection was not recovered from), nodes off version as checked after each injection and at the end."""
    recovered = [i.recover_s for i in done]
    return FaultRow(fault, len(done), sum(i.held for i in done), sum(i.wrong for i in done), events_lost,
                    nodes_off_version + sum(i.off_version for i in done), NA,
                    None if None in recovered else round(max(recovered), 1))


class Alternating:
    """A learner that proposes one config, then the other, each time it is asked; notes what it is told."""

    def __init__(self, first: Config, second: Config) -> None:
        self.configs = (first, second)
        self.asked = 0
        self.told: list[tuple[Config, Observation]] = []

    def suggest(self, context: object) -> Suggestion:
        self.asked += 1
        return Suggestion(self.configs[(self.asked - 1) % 2], "bench.faults: the other config")

    def tell(self, config: Config, context: object, observation: Observation, verdict: object) -> None:
        self.told.append((config, observation))

    def update_policy(self, policy: Policy) -> None:
        pass


class Windows:
    """Each window the pipeline observed: its start and end on this host's clock, and what it read."""

    def __init__(self, pipeline: LivePipeline) -> None:
        self.seen: list[tuple[float, float, Observation]] = []
        observe: Callable[[float], Observation] = pipeline.observe

        def recorded(seconds: float) -> Observation:
            start = time.time()
            observation = observe(seconds)
            self.seen.append((start, time.time(), observation))
            return observation

        pipeline.observe = recorded  # type: ignore[method-assign]


def nodes_off_version(spec: PipelineSpec, pipeline: LivePipeline) -> int:
    """Nodes whose agent reports Filebeat values other than its files hold (read from disk, not from the agent)."""
    off = 0
    for node in spec.node_layouts():
        layout = filebeat_layout(spec, node)
        selector = input_selector(layout)
        on_disk = FilebeatAdapter(layout.home_dir / "filebeat.yml",
                                  [InputSelector(id=selector.get("id"), path_glob=selector.get("path"))],
                                  Path("filebeat")).read()
        agent = next(a for a in pipeline.agents if a.node == node.name)
        reported = next(c["params"] for c in agent.components() if c["name"] == "filebeat")
        off += any(on_disk.get(name) != value for name, value in reported.items() if name in on_disk)
    return off


class Untouched:
    """What a held window must leave as it was: what the learner was told, the incumbent, the rollbacks, the config in
    force. Anything judged on a window a fault disturbed blames or credits a config for the fault."""

    def __init__(self, daemon: Daemon, learner: Alternating, pipeline: LivePipeline) -> None:
        self.daemon, self.learner, self.pipeline = daemon, learner, pipeline
        self.state = self._now()

    def _now(self) -> tuple:
        return len(self.learner.told), self.daemon.incumbent, self.daemon.rollbacks, self.pipeline.current()

    def touched(self) -> bool:
        return self._now() != self.state


def _held(decision: Decision) -> bool:
    """A window frozen or marked disturbed."""
    return decision.action == "frozen" or decision.reason.startswith("disturbed")


Seen = tuple[float, float, Observation]  # a window's start and end (this host's clock) and what it read
Judge = Callable[[int, Decision, Seen], tuple[bool, bool, float | None]]


def _through(daemon: Daemon, windows: Windows, before: Untouched | None, injected_at: float, limit: int, judged: Judge,
             between: Callable[[int], None] = lambda window: None) -> Injection:
    """Step the daemon after a fault injected at `injected_at`, at most `limit` windows (`between` called before
    each, with its index), counting the windows held and anything they touched, until `judged` says a window judged
    (window index, decision, window) ends it: (whether it does, whether its decision was wrong, its figure's share
    off the truth if known)."""
    held, wrong, reasons = 0, 0, []
    for window in range(limit):
        between(window)
        first = len(windows.seen)
        decision = daemon.step()
        reasons.append(decision.reason)
        if _held(decision):
            held += 1
            wrong += before is not None and before.touched()
            continue
        done, bad, off = judged(window, decision, windows.seen[first])
        wrong += bad
        if done:
            return Injection(held, wrong, windows.seen[first][1] - injected_at, off, tuple(reasons))
    return Injection(held, wrong, None, None, tuple(reasons))


def _until_explore(daemon: Daemon) -> None:
    """Step the daemon until it makes a change (the learner proposes one every time it is asked)."""
    before = []
    for _ in range(MAX_WINDOWS):
        before.append(daemon.step())
        if before[-1].action == "explore":
            return
    raise RuntimeError(f"no change made within {MAX_WINDOWS} windows: "
                       + "; ".join(f"{d.action}: {d.reason}" for d in before))


def _clock_injection(daemon: Daemon, learner: Alternating, pipeline: LivePipeline, clock: FakeClock,
                     windows: Windows, truth: TruthReader, step_s: float) -> Injection:
    """Wait for a change under judgement, step the clock by `step_s` 3 s into the window judging it, and step the
    daemon until a window is judged again."""
    _until_explore(daemon)
    before = Untouched(daemon, learner, pipeline)

    def judged(window: int, decision: Decision, seen: Seen) -> tuple[bool, bool, float | None]:
        start, end, observation = seen
        arrivals = truth.between(start, end)
        truth_s = statistics.fmean(a.latency_s for a in arrivals) if arrivals else math.nan
        off = abs(observation.mean_s - truth_s) / truth_s
        return True, not off <= WITHIN, off  # judged on a figure the step put off: a wrong decision

    stepper = threading.Timer(STEP_AFTER_S, clock.set, args=(clock.offset_s + step_s,))
    injected_at = time.time() + STEP_AFTER_S
    stepper.start()
    try:
        return _through(daemon, windows, before, injected_at, MAX_WINDOWS, judged)
    finally:
        stepper.join()


def clock_spec(directory: Path, config: dict | None = None) -> PipelineSpec:
    """Two nodes into one broker, on ports of their own and a run dir in `directory`: a fresh Prometheus (one whose
    data a run minutes before left would still hold that run's broker series, and read a leader change)."""
    raw = yaml.safe_load(DEFAULT_PIPELINE.read_text()) | {"config": config or CLOCK_CONFIG,
                                                          "run_dir": str(directory / "run")}
    path = directory / "pipeline.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_pipeline(path).beside("faults-clock", PORT_SHIFT).sized(2, 1)


@dataclass
class NodeRun:
    """The two-node testbed the clock step, bad input, full disk and killed agent are injected into: node-2's nginx
    (its log source, on `clock`) loaded by `load`, `truth` timing each of its lines, the daemon judging the changes
    `learner` proposes."""

    spec: PipelineSpec
    node: NodeLayout  # node-2, where every fault lands
    clock: FakeClock
    pipeline: LivePipeline
    windows: Windows
    learner: Alternating
    daemon: Daemon
    truth: TruthReader
    load: SentLoad

    def agent_service(self) -> Service:
        """Node-2's agent as `up` started it, on its clock."""
        service = lifecycle.recorded_services(self.spec)[self.spec.node_process(self.node, "agent")]
        return replace(service, env=self.clock.python_env(checkout_env()))


@contextmanager
def node_run(directory: Path, window_s: float, rate_eps: float, param: str = "filebeat.backoff",
             values: tuple[float, float] = BACKOFFS_S, small_home: str | None = None) -> Iterator[NodeRun]:
    """The testbed up, the load primed and the daemon warmed up; the learner alternates `param` between `values`.
    `small_home`: node-2's Filebeat home (its config files and, under it, its registry) on a tmpfs of that size."""
    spec = clock_spec(directory)
    node = spec.node_layouts()[1]
    home = filebeat_layout(spec, node).home_dir
    if small_home is not None:
        mount_small_disk(home, small_home)
    clock = FakeClock()
    try:
        with clocked_node_testbed(spec, node, clock, NGINX_PORT):
            pipeline = live_pipeline(spec)
            try:
                windows = Windows(pipeline)
                start = pipeline.current()
                learner = Alternating(*(PIPELINE_SPACE.config({param: v}, base=start) for v in values))
                daemon = Daemon(pipeline, learner, Policy(), window_s=window_s, store=StateStore(directory / "state"))
                with TruthReader(spec.bootstrap, spec.probe.topic, node.name) as truth:
                    with SentLoad(NGINX_PORT, rate_eps) as load:
                        truth.wait_for(rate_eps * PRIME_S / 2, PRIME_S * 3)
                        time.sleep(PRIME_S)
                        daemon.warm_up()
                        yield NodeRun(spec, node, clock, pipeline, windows, learner, daemon, truth, load)
            finally:
                pipeline.close()
    finally:
        clock.close()
        if small_home is not None:
            unmount(home)


def _truth_judge(run: NodeRun) -> Judge:
    """A window judged again ends the injection; it is wrong if judged on a mean latency more than `WITHIN` off the
    truth's, or if it rolled back or breached a guardrail (the fault's tail blamed on the config)."""
    def judged(window: int, decision: Decision, seen: Seen) -> tuple[bool, bool, float | None]:
        start, end, observation = seen
        arrivals = run.truth.between(start, end)
        truth_s = statistics.fmean(a.latency_s for a in arrivals) if arrivals else math.nan
        off = abs(observation.mean_s - truth_s) / truth_s
        return True, not off <= WITHIN or bool(decision.guardrail) or decision.action == "rollback", off
    return judged


def _finish(run: NodeRun) -> tuple[int, int, int]:
    """Requests nginx answered, the distinct lines of them that arrived, and the duplicates."""
    sent = run.load.sent
    arrived = _drain(run.truth, sent)
    return sent, arrived, len(run.truth.arrivals) - arrived


def run_clock(injections: int, window_s: float, rate_eps: float, directory: Path) -> tuple[FaultRow, dict]:
    """Fault 5, `injections` clock steps; its row and the run's record."""
    with node_run(directory, window_s, rate_eps) as run:
        done = [_clock_injection(run.daemon, run.learner, run.pipeline, run.clock, run.windows, run.truth,
                                 -STEP_S if i % 2 == 0 else STEP_S) for i in range(injections)]
        run.load.__exit__(None)  # the load stopped: every line it sent can be drained
        sent, arrived, duplicates = _finish(run)
        off_version = nodes_off_version(run.spec, run.pipeline)
    row = row_of("clock step ±2 s (5)", done, sent - arrived, off_version)
    return row, {"injections": [asdict(i) for i in done], "requests_sent": sent, "lines_arrived": arrived,
                 "duplicates": duplicates}


def _bad_input_injection(run: NodeRun) -> tuple[Injection, list[dict]]:
    """Wait for a change under judgement; `STEP_AFTER_S` into the window judging it, append `BAD_LINES` to node-2's
    log (beside nginx's own lines) and send `BAD_CONFIG_BODIES` to its agent; step until a window is judged. The
    agent's answers, each with whether it was a 422 naming the field."""
    _until_explore(run.daemon)
    before = Untouched(run.daemon, run.learner, run.pipeline)
    answers: list[dict] = []
    url = f"{agent_url(run.spec, run.node)}/components/filebeat/config"
    headers = {"Authorization": f"Bearer {token_file(run.spec, run.node).read_text().strip()}",
               "Content-Type": "application/json"}

    def inject() -> None:
        with open(run.node.log_path, "ab", buffering=0) as log:
            for line in BAD_LINES:
                log.write(line)  # one write a line, appended: nginx's lines stay whole around it
        for body, field in BAD_CONFIG_BODIES:
            answer = httpx.put(url, content=body, headers=headers, timeout=30)
            named = answer.status_code == 422 and all(e["loc"][:len(field)] == field
                                                      for e in answer.json()["detail"])
            answers.append({"status": answer.status_code, "names_the_field": named})

    injector = threading.Timer(STEP_AFTER_S, inject)
    injected_at = time.time() + STEP_AFTER_S
    injector.start()
    try:
        return _through(run.daemon, run.windows, before, injected_at, MAX_WINDOWS, _truth_judge(run)), answers
    finally:
        injector.join()


def run_bad_input(injections: int, window_s: float, rate_eps: float, directory: Path) -> tuple[FaultRow, dict]:
    """Fault 7, `injections` times the bad lines and requests; its row and the run's record."""
    with node_run(directory, window_s, rate_eps) as run:
        done, answers = zip(*[_bad_input_injection(run) for _ in range(injections)])
        run.load.__exit__(None)
        sent, arrived, duplicates = _finish(run)
        off_version = nodes_off_version(run.spec, run.pipeline)
    row = row_of("bad input (7)", list(done), sent - arrived, off_version)
    row = replace(row, windows_held=NA if row.windows_held == 0 else row.windows_held)
    return row, {"injections": [asdict(i) for i in done], "requests_sent": sent, "lines_arrived": arrived,
                 "duplicates": duplicates, "agent_answers": [a for batch in answers for a in batch]}


DISK_SIZE = "16m"  # node-2's Filebeat home: its config files, its registry and its logs, with room to spare
FULL_WINDOWS = 2  # the daemon steps through with the disk full, before the room is given back


def _disk_full_injection(run: NodeRun) -> Injection:
    """Wait for a change under judgement; `STEP_AFTER_S` into the window judging it, fill node-2's Filebeat home
    (its config files and registry); `FULL_WINDOWS` windows later give the room back, then step until a window is
    judged. Recovered in: from the room given back to the end of that window."""
    _until_explore(run.daemon)
    home = filebeat_layout(run.spec, run.node).home_dir
    ballast: list[Path] = []
    freed_at: list[float] = []
    filler = threading.Timer(STEP_AFTER_S, lambda: ballast.append(fill(home)))
    injected_at = time.time() + STEP_AFTER_S
    truth_judge = _truth_judge(run)

    def judged(window: int, decision: Decision, seen: Seen) -> tuple[bool, bool, float | None]:
        done, bad, off = truth_judge(window, decision, seen)
        return window >= FULL_WINDOWS and done, bad, off  # judged while full: a valid window, held to the truth

    def between(window: int) -> None:
        if window == FULL_WINDOWS:
            ballast.pop().unlink()
            freed_at.append(time.time())

    filler.start()
    try:
        # a window held here is a change refused, not a disturbed window: the window it judged was a fair one (Filebeat
        # ships on), so what it told the learner is no wrong decision; a rollback is (judged below)
        injection = _through(run.daemon, run.windows, None, injected_at, FULL_WINDOWS + MAX_WINDOWS, judged, between)
    finally:
        filler.join()
        for path in ballast:
            path.unlink()
    recover_s = None if injection.recover_s is None else injection.recover_s - (freed_at[0] - injected_at)
    return replace(injection, recover_s=recover_s, off_version=nodes_off_version(run.spec, run.pipeline))


def run_disk_full(injections: int, window_s: float, rate_eps: float, directory: Path) -> tuple[FaultRow, dict]:
    """Fault 3, node-2's Filebeat home filled `injections` times; its row and the run's record."""
    with node_run(directory, window_s, rate_eps, small_home=DISK_SIZE) as run:
        done = [_disk_full_injection(run) for _ in range(injections)]
        run.load.__exit__(None)
        sent, arrived, duplicates = _finish(run)
        off_version = nodes_off_version(run.spec, run.pipeline)
        refused = [e for e in agent_client(run.spec, run.node).audit("filebeat") if e["event"] == "no_space"]
    row = row_of("disk full (3)", done, sent - arrived, off_version)
    return row, {"injections": [asdict(i) for i in done], "requests_sent": sent, "lines_arrived": arrived,
                 "duplicates": duplicates, "changes_refused_no_space": len(refused)}


TIMEOUTS_S = (0.3, 0.5)  # the flush timeouts the learner proposes when the agent is killed: Filebeat restarts on each


def _agent_answers(run: NodeRun) -> bool:
    try:
        agent_client(run.spec, run.node).components()
        return True
    except Exception:  # not listening yet
        return False


def _sigkill_injection(run: NodeRun, window_s: float) -> tuple[Injection, list[dict]]:
    """Wait for a change under judgement, then SIGKILL node-2's agent as the daemon's next change has written
    node-2's files but not yet seen its Filebeat healthy; start it again (on its clock, over the same state) and step
    until a window is judged. What its audit log said it found and did."""
    _until_explore(run.daemon)
    service = run.agent_service()
    pid = processes.running_pid(service)
    config = filebeat_layout(run.spec, run.node).home_dir / "filebeat.yml"
    pending = pending_file(agent_dir(run.spec, run.node) / "state")
    killed: list[float | None] = []
    killer = threading.Thread(target=lambda: killed.append(
        kill_when_pending(pid, config, config.read_text(), pending, 3 * window_s + 60)))
    killer.start()
    killed_in = run.daemon.step()  # judges the change, and makes the next: killed while making it
    killer.join()
    if killed[0] is None:
        raise RuntimeError(f"node-2's agent made no change to kill within {3 * window_s + 60:g} s")
    try:
        os.waitpid(pid, 0)  # the agent is this process's child: reaped, or its pid would read as running
    except ChildProcessError:
        pass
    by_hand: list[dict] = []
    processes.start(service)
    try:
        processes.wait_ready(service, lambda: _agent_answers(run), 90.0)
    except TestbedError as err:
        # The agent would not start again: what it said, and the Filebeats the killed agent left running (orphans
        # its successor did not find), killed by hand as an operator would, before it is started once more.
        orphans = processes_with(str(config))
        for orphan in orphans:
            os.kill(orphan, signal.SIGKILL)
        by_hand.append({"agent_did_not_start": str(err)[-1500:], "orphaned_filebeats_killed": orphans})
        processes.start(service)
        processes.wait_ready(service, lambda: _agent_answers(run), 90.0)
    before = Untouched(run.daemon, run.learner, run.pipeline)  # as the daemon left it, the agent back on one version
    injection = _through(run.daemon, run.windows, before, killed[0], MAX_WINDOWS, _truth_judge(run))
    audit = [e for e in agent_client(run.spec, run.node).audit("filebeat") if e["event"] in ("interrupted",
                                                                                              "recovered")]
    return replace(injection, held=injection.held + _held(killed_in), reasons=(killed_in.reason, *injection.reasons),
                   recover_s=None if by_hand else injection.recover_s,  # not by itself: not recovered
                   off_version=nodes_off_version(run.spec, run.pipeline)), audit[-2:] + by_hand


def run_sigkill(injections: int, window_s: float, rate_eps: float, directory: Path) -> tuple[FaultRow, dict]:
    """Fault 4, node-2's agent killed mid-apply `injections` times; its row and the run's record."""
    with node_run(directory, window_s, rate_eps, "filebeat.queue.mem.flush.timeout", TIMEOUTS_S) as run:
        done, audits = zip(*[_sigkill_injection(run, window_s) for _ in range(injections)])
        run.load.__exit__(None)
        sent, arrived, duplicates = _finish(run)
        off_version = nodes_off_version(run.spec, run.pipeline)
    row = row_of("SIGKILL of the agent mid-apply (4)", list(done), sent - arrived, off_version)
    return row, {"injections": [asdict(i) for i in done], "requests_sent": sent, "lines_arrived": arrived,
                 "duplicates": duplicates, "agent_audit": list(audits)}


def _drain(truth: TruthReader, sent: int, timeout_s: float = 30.0) -> int:
    """The distinct lines that arrived, once all `sent` have or `timeout_s` passed."""
    deadline = time.monotonic() + timeout_s
    while len({a.sent_s for a in truth.arrivals}) < sent and time.monotonic() < deadline:
        time.sleep(0.5)
    return len({a.sent_s for a in truth.arrivals})


DAEMON_SHIFT = PORT_SHIFT + 80  # its broker's and its nodes' ports, above the other faults'
DAEMON_NODE_PORTS = [(18765 + DAEMON_SHIFT + i, 15066 + DAEMON_SHIFT + i) for i in range(len(NET_NAMES))]
DAEMON_TOKEN = "bench-faults-daemon"
# What node-2's agent did with the step the daemon was killed in, once the daemon was gone: its change ended (the
# held Filebeat healthy), or failed (that Filebeat killed: the agent put the version before back).
DAEMON_STEPS = {"changed": "already in place", "rolled back": "filebeat restarted"}
KILLED_STANDING = {"node-1": (1, "promoted"), "node-2": (0, "pending")}  # the rollout as the kill left it


def daemon_spec(directory: Path) -> PipelineSpec:
    """The default pipeline's broker on ports of its own and a fresh run dir in `directory` (only it is started)."""
    raw = yaml.safe_load(DEFAULT_PIPELINE.read_text()) | {"run_dir": str(directory / "run")}
    path = directory / "pipeline.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_pipeline(path).beside("faults-daemon", DAEMON_SHIFT).sized(1, 1)


def daemon_kill_counts(recovery: Recovery, said: str, reported: dict[str, float], on_disk: dict[str, float],
                       recover_s: float | None) -> tuple[Injection, bool]:
    """One daemon kill counted from what the restarted daemon left (`recovery`), each node's flush timeout as its
    agent reports it and as its files hold it, and the seconds until the pool was on one version: wrong if the
    promotion did not end on every node (or anything was rolled back); off version each node whose agent reports
    another value than its files hold, or whose files hold another than the version the rollout places it on; held
    the windows frozen. And whether the decision log said what happened: one `recover` decision, saying `said`."""
    versions = {0: NET_DEFAULTS[TIMEOUT], 1: FASTER[TIMEOUT]}
    off = sum(reported[n] != on_disk[n] or on_disk[n] != versions.get(recovery.nodes.get(n, (-1, ""))[0])
              for n in on_disk)
    finished = recovery.finished(1, TIMEOUT, FASTER[TIMEOUT])
    injection = Injection(held=recovery.actions.count("frozen"), wrong=int(not finished),
                          recover_s=recover_s if finished else None, judged_off=None,
                          reasons=recovery.recover_reasons, off_version=off)
    return injection, recovery.recover_reasons == (said,)


def _daemon_kill_injection(bootstrap: str, topic: str, directory: Path, step: str) -> tuple[Injection, dict]:
    """`pipetune autotune` over a canary pool of two real agents (`testbed.net_pool.loopback_nodes`) promoting a
    person's override (a shorter flush timeout, which the stand-in Prometheus judges better), SIGKILLed while node-2's
    step waits for its Filebeat's health; node-2's step then ends as `step` says, and the daemon is started again on
    its state directory for one window."""
    directory.mkdir(parents=True)
    with loopback_nodes(directory, DAEMON_TOKEN, DAEMON_NODE_PORTS) as nodes:
        prometheus = StandInPrometheus({n: SimpleNamespace(components={"filebeat": SimpleNamespace(
            adapter=node.adapter)}) for n, node in nodes.items()})
        try:
            group = f"bench-faults-{directory.name}"
            commit_group(bootstrap, topic, group)
            deployment = write_deployment(directory, {n: node.client.url for n, node in nodes.items()},
                                          DAEMON_TOKEN, bootstrap, group, prometheus.url)
            state = directory / "state"
            StateStore(state).add_override({TIMEOUT: FASTER[TIMEOUT]}, 3600, "bench.faults: the change promoted")
            node_2 = nodes["node-2"]
            node_2.hold.touch()  # the Filebeat node-2's step starts answers its health 503 until let go
            asked = node_2.hold.with_name(node_2.hold.name + ".asked")

            def held() -> bool:
                starts = node_2.starts()
                return len(starts) == 2 and asked.exists() and str(starts[-1]["pid"]) in asked.read_text().split()

            command = autotune(deployment, state)
            killed_at = kill_between_steps(command, state, directory / "autotune.log", held)
            if step == "rolled back":
                os.kill(node_2.starts()[-1]["pid"], signal.SIGKILL)
            node_2.hold.unlink()
            until(lambda: not node_2.client.component("filebeat")["change_in_progress"], "node-2's step ended", 180)
            node_2_after = node_2.timeout_s()
            done, recover_s = restart(command, state)
            if done.returncode != 0:
                raise RuntimeError(f"the restarted daemon exited {done.returncode}:\n{done.stderr[-3000:]}")
            reported = {n: float(node.client.component("filebeat")["params"][TIMEOUT]) for n, node in nodes.items()}
            on_disk = {n: node.timeout_s() for n, node in nodes.items()}
        finally:
            prometheus.close()
    said = recover_reason(TIMEOUT, NET_DEFAULTS[TIMEOUT], FASTER[TIMEOUT], KILLED_STANDING,
                          {"node-2": DAEMON_STEPS[step]})
    injection, logged = daemon_kill_counts(Recovery.of(state), said, reported, on_disk, recover_s)
    return injection, {"node_2_step": step, "node_2_timeout_after_the_kill": node_2_after, "logged": logged,
                       "killed_at": killed_at, "reported": reported, "on_disk": on_disk}


def run_daemon_kill(reps: int, window_s: float, rate_eps: float, directory: Path) -> tuple[FaultRow, dict]:
    """Fault 4, the daemon killed between promotion steps: per rep once for each way node-2's step can end after it
    (`DAEMON_STEPS`), each on a fresh pool, all on one broker. Its own windows (`testbed.daemon_kill.WINDOW_S`): the
    figures are a stand-in Prometheus's."""
    spec = daemon_spec(directory)
    for port in [p for ports in DAEMON_NODE_PORTS for p in ports]:
        processes.check_port_free(port, "bench.faults' daemon-kill nodes")
    done: list[Injection] = []
    records: list[dict] = []
    with brokers_only(spec) as bootstrap:
        for rep in range(reps):
            for number, step in enumerate(DAEMON_STEPS):
                injection, record = _daemon_kill_injection(bootstrap, spec.kafka.topics[0].name,
                                                           directory / f"{rep}-{number}", step)
                done.append(injection)
                records.append(asdict(injection) | record)
    row = row_of(LABELS["daemon"], done, NA, 0)
    return row, {"injections": records, "logged": sum(r["logged"] for r in records)}


BROKER_RATE_EPS = 200.0
HELD_WHILE_DOWN = 2  # windows the daemon steps through with the broker down, before it is started again


def broker_spec(directory: Path) -> PipelineSpec:
    """One node into three brokers, on ports of their own and a fresh run dir in `directory`; the probe's grace
    outlasts a failover, so an event it holds up is late, not lost."""
    raw = yaml.safe_load(DEFAULT_PIPELINE.read_text()) | {"run_dir": str(directory / "run"), "config": {
        "preset": "defaults", "set": dict(LOW_LATENCY)}}
    raw["probe"]["late_after_s"] = 60
    path = directory / "pipeline.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_pipeline(path).beside("faults-broker", PORT_SHIFT + 50).sized(1, 3)


def _broker_injection(spec: PipelineSpec, daemon: Daemon, learner: Alternating, pipeline: LivePipeline,
                      windows: Windows) -> Injection:
    """Wait for a change under judgement, kill its partition's leader 2 s into the window judging it, hold through
    `HELD_WHILE_DOWN` windows, start the broker again and step the daemon until a window is judged again."""
    _until_explore(daemon)
    before = Untouched(daemon, learner, pipeline)
    leader = leader_of(spec)

    def judged(window: int, decision: Decision, seen: Seen) -> tuple[bool, bool, float | None]:
        if window < HELD_WHILE_DOWN:  # judged while the broker was down: the failover read as the config's
            return False, True, None
        return True, bool(decision.guardrail) or decision.action == "rollback", None  # the failover's tail, blamed

    def between(window: int) -> None:
        if window == HELD_WHILE_DOWN:
            restart_broker(spec, leader, pipeline)

    killer = threading.Timer(KILL_AFTER_S, kill_broker, args=(spec, leader))
    injected_at = time.time() + KILL_AFTER_S
    killer.start()
    try:
        return _through(daemon, windows, before, injected_at, HELD_WHILE_DOWN + MAX_WINDOWS, judged, between)
    finally:
        killer.join()


def run_broker(injections: int, window_s: float, directory: Path) -> tuple[FaultRow, dict]:
    """Fault 2, `injections` partition leaders killed; its row and the run's record."""
    spec = broker_spec(directory)
    lifecycle.up(spec)
    try:
        pipeline = live_pipeline(spec)
        try:
            windows = Windows(pipeline)
            start = pipeline.current()
            learner = Alternating(*(PIPELINE_SPACE.config({"filebeat.backoff": b}, base=start) for b in BACKOFFS_S))
            daemon = Daemon(pipeline, learner, Policy(), window_s=window_s, store=StateStore(directory / "state"))
            with BackgroundLoad(spec, WorkloadSpec(Profile.steady, BROKER_RATE_EPS, 600.0, seed=41)) as load:
                daemon.warm_up()
                done = [_broker_injection(spec, daemon, learner, pipeline, windows) for _ in range(injections)]
            ledger = load.ledger()
            off_version = nodes_off_version(spec, pipeline)
        finally:
            pipeline.close()
    finally:
        close_open_watches()  # before the brokers the lag watch samples stop
        lifecycle.down(spec)
    row = row_of("Kafka broker loss (2)", done, ledger["lost"], off_version)
    return row, {"injections": [asdict(i) for i in done], "ledger": ledger}


NET_SHAPES = {"partition": None, "300 ms delay": {"delay_s": 0.3}, "5 % loss": {"loss": 0.05}}
PARTITION_WINDOWS = 2  # the daemon steps through with node-2 cut off, before the link is healed
NET_TOKEN = "bench-faults-network"


def _net_steps(run: Pool, nodes: dict[str, NetNode], until_: Callable[[], bool], limit: int = 12
               ) -> tuple[list[Decision], list[str]]:
    """The daemon's windows until `until_` holds (at most `limit`), and each time after a window a node was placed
    on a version its files do not hold."""
    decisions, untrue = [], []
    while not until_() and len(decisions) < limit:
        decisions.append(run.daemon.step())
        untrue += untruthful(run.pool, nodes, {0: NET_DEFAULTS, 1: FASTER})
    return decisions, untrue


def _network_injection(nodes: dict[str, NetNode], shape: str, state: Path) -> Injection:
    """A pool of two nodes tuned to a better flush timeout (`FASTER`, the stand-in Prometheus's figures follow it):
    with `shape` "partition", node-2 is cut off once the canary runs the candidate, for `PARTITION_WINDOWS` windows,
    then healed; otherwise every link is slowed or thinned from the start. Either way the candidate should end
    promoted on both nodes: a rollback, a take-back or a pool not on it is a wrong decision. Recovered in: from the
    heal (the shaping) to the pool on one version."""
    run = build_pool(nodes, state, Alternating(FASTER, FASTER))
    node_2 = nodes["node-2"]
    try:
        run.daemon.warm_up()
        decisions: list[Decision] = []
        untrue: list[str] = []
        if NET_SHAPES[shape] is None:
            seen, wrong = _net_steps(run, nodes, lambda: run.pool.state.phase == "canary")
            decisions += seen
            untrue += wrong
            node_2.network.partition()
            for _ in range(PARTITION_WINDOWS):
                decisions.append(run.daemon.step())
                untrue += untruthful(run.pool, nodes, {0: NET_DEFAULTS, 1: FASTER})
            node_2.network.heal()
        else:
            for node in nodes.values():
                node.network.shape(**NET_SHAPES[shape])
        since = time.time()
        seen, wrong = _net_steps(run, nodes, lambda: run.pool.state.version == 1 and run.pool.state.phase == "steady")
        decisions += seen
        untrue += wrong
        promoted = run.pool.state.version == 1 and run.pool.state.phase == "steady"
        on_it = promoted and all(node.timeout_s() == FASTER[TIMEOUT] for node in nodes.values())
        return Injection(held=sum(_held(d) for d in decisions), wrong=int(run.daemon.rollbacks > 0 or not on_it),
                         recover_s=time.time() - since if on_it else None, judged_off=None,
                         reasons=tuple(d.reason for d in decisions), off_version=len(untrue))
    finally:
        node_2.network.heal()
        run.close()


def run_network(reps: int, window_s: float, rate_eps: float, directory: Path) -> tuple[FaultRow, dict]:
    """Fault 1, each shape of the link `reps` times, each on a fresh pool (agents in network namespaces); its row and
    the run's record. Its windows are `testbed.net_pool`'s (1 s: the figures are the stand-in Prometheus's)."""
    if os.geteuid() != 0:
        return not_run("network (1)", "network namespaces need root"), {"not_run": "network namespaces need root"}
    done: dict[str, list[Injection]] = {shape: [] for shape in NET_SHAPES}
    for rep in range(reps):
        for number, shape in enumerate(NET_SHAPES):
            with net_nodes(directory / f"{rep}-{number}", NET_TOKEN) as nodes:
                done[shape].append(_network_injection(nodes, shape, directory / f"{rep}-{number}" / "state"))
    row = row_of("network partition, 300 ms, 5 % loss (1)", [i for shape in done.values() for i in shape], NA, 0)
    return row, {shape: [asdict(i) for i in injections] for shape, injections in done.items()}


class ListeningWatch:
    """Every `every_s`, the sockets this process and every process it started (the testbed's brokers, Prometheus,
    agents, Filebeats, nginx, the probe) leave open to others, from a thread, while the `with` block lasts."""

    def __init__(self, every_s: float = 2.0) -> None:
        self.every_s = every_s
        self.samples = 0
        self.seen: dict[tuple[str, int], str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="listening-watch", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.seen |= listeners(process_tree(os.getpid()))
            self.samples += 1

    def row(self) -> FaultRow:
        """Listening is a property of every run, not an injection: each listing counts as one look."""
        return FaultRow("listening off loopback (6)", self.samples, NA, NA, NA, NA, len(off_loopback(self.seen)), NA)

    def record(self) -> dict:
        return {"listings": self.samples, "off_loopback": off_loopback(self.seen),
                "processes_seen": sorted(set(self.seen.values())), "sockets_seen": len(self.seen)}

    def __enter__(self) -> "ListeningWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# Each fault the bench injects, in the order, and what runs it (listening is watched through all the others).
RUNS: dict[str, Callable[[int, float, float, Path], tuple[FaultRow, dict]]] = {
    "network": run_network, "broker": lambda reps, window_s, rate_eps, directory: run_broker(reps, window_s, directory),
    "disk": run_disk_full, "sigkill": run_sigkill, "daemon": run_daemon_kill, "clock": run_clock,
    "bad": run_bad_input}
FAULTS = (*RUNS, "listening")
ORDER = ("network", "broker", "disk", "sigkill", "daemon", "clock", "listening", "bad")  # the issue's, 1 to 7

COLUMNS = (("fault", "fault"), ("injections", "injections"), ("frozen/disturbed", "windows_held"),
           ("wrong decisions", "wrong_decisions"), ("events lost", "events_lost"),
           ("nodes off version", "nodes_off_version"), ("off loopback", "off_loopback"),
           ("recovered in (s, worst)", "recover_s_max"))


def _cell(value: object) -> str:
    return "not recovered" if value is None else str(value)


def table(rows: list[FaultRow]) -> str:
    """The rows as a plain table, one fault a line; `NA` cells print as they are."""
    cells = [[head for head, _ in COLUMNS]] + [[_cell(getattr(r, key)) for _, key in COLUMNS] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells)


# Run beside the others, in a process of its own: it uses no testbed port (its agents are in network namespaces) and
# its figures are a stand-in Prometheus's, which a busy machine slows but does not change.
ASIDE = ("network",)
LABELS = {"network": "network (1)", "broker": "Kafka broker loss (2)", "disk": "disk full (3)",
          "sigkill": "SIGKILL of the agent mid-apply (4)",
          "daemon": "SIGKILL of the daemon between promotion steps (4)", "clock": "clock step ±2 s (5)",
          "bad": "bad input (7)"}


def _run_one(fault: str, reps: int, window_s: float, rate_eps: float) -> tuple[FaultRow, dict]:
    """`fault`'s run in a directory of its own; a run that failed is a row saying so, its traceback in the record
    (the other faults still run)."""
    with tempfile.TemporaryDirectory(prefix=f"bench-faults-{fault}-") as directory:
        try:
            return RUNS[fault](reps, window_s, rate_eps, Path(directory))
        except Exception as err:  # any failure of the run: reported in its row, not lost with the others' figures
            return not_run(LABELS[fault], f"failed: {type(err).__name__}"), {"error": traceback.format_exc()}


def not_run(fault: str, why: str) -> FaultRow:
    """The row of a fault this run did not inject: no injection, every figure `NA` (the record says why)."""
    return FaultRow(f"{fault}: not run ({why})", 0, NA, NA, NA, NA, NA, NA)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", "--injections", dest="reps", type=int, default=2, help="of each fault (1-20)")
    parser.add_argument("--window", type=float, default=10.0, help="the daemon's window, seconds (5-60)")
    parser.add_argument("--rate", type=float, default=100.0, help="requests/s into nginx (10-500)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/evidence/faults")
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"which, comma-separated: {', '.join(FAULTS)}")
    args = parser.parse_args(argv)
    args.faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    if not args.faults or not set(args.faults) <= set(FAULTS):
        parser.error(f"--faults: {','.join(args.faults) or 'none'}, allowed any of {', '.join(FAULTS)}")
    if args.faults == ["listening"]:
        parser.error("--faults: listening is watched while the other faults run; name at least one of them too")
    for name, value, low, high in (("--reps", args.reps, 1, 20), ("--window", args.window, 5, 60),
                                   ("--rate", args.rate, 10, 500)):
        if not low <= value <= high:
            parser.error(f"{name}: {value:g}, allowed {low}-{high}")
    started = BenchResult.start("bench.faults", argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stop still brings its testbed down
    install_all()
    rows, records = {}, {}
    wanted = [f for f in ORDER if f in args.faults and f in RUNS]
    with ListeningWatch() as watch, ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as aside:
        futures = {f: aside.submit(_run_one, f, args.reps, args.window, args.rate) for f in wanted if f in ASIDE}
        for fault in [f for f in wanted if f not in ASIDE]:
            rows[fault], records[fault] = _run_one(fault, args.reps, args.window, args.rate)
        for fault, future in futures.items():
            rows[fault], records[fault] = future.result()
    if "listening" in args.faults:
        rows["listening"], records["listening"] = watch.row(), watch.record()
    printed = [rows[f] for f in ORDER if f in rows]
    started.finish([r.row() for r in printed], records).write(args.out / RESULT_FILE)
    print(table(printed))
    if "daemon" in records and "injections" in records["daemon"]:
        print(daemon_note(records["daemon"]))


def daemon_note(record: dict) -> str:
    """The daemon kill's line under the table: in how many of its injections the decision log said what happened."""
    return (f"SIGKILL of the daemon (4): the decision log said what it found and did after {record['logged']} of "
            f"{len(record['injections'])} kills")

if __name__ == "__main__":
    main()
