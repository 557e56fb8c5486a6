"""A pool of nodes the controller reaches over a network it can slow, thin or cut (issue 41, fault 1; and the
daemon's side of fault 4): each node `pipetune agent` in a network namespace of its own (`testbed.netns`) over a
stand-in Filebeat, a stand-in Prometheus whose per-node latency follows the flush timeout each node's files hold, and
the daemon over a canary pool of them as `controller.deployment.pool_pipeline` builds one. `loopback_nodes` starts the
same nodes on this namespace's loopback, each on ports of its own, where no network fault is wanted (and no root).
Shared by tests/faults/test_network.py, tests/faults/test_sigkill.py, `testbed.daemon_kill` and `bench.faults`.

What each node runs is read from its files on disk, never over the link: the pool must never report a node on a
version it is not on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator
from urllib.parse import parse_qs, urlparse

import numpy as np
import yaml

from agents.client import AgentClient
from agents.filebeat.adapter import FilebeatAdapter
from agents.filebeat.patch import InputSelector
from agents.probe.metrics import LATENCY_BUCKETS_S
from agents.runtimes import ProcessRuntime
from controller.daemon import Daemon
from controller.live import LivePipeline
from controller.rollout import CanaryPool, LivePoolWindows
from controller.state import StateStore
from controller.telemetry import PrometheusTelemetry
from models.canary import LatencyHistogram
from models.learning import Learner
from models.policy import Policy
from models.rollout import plan_rollout
from models.space import PIPELINE_SPACE, Config
from testbed.netns import NodeNetwork, node_network

TIMEOUT = "filebeat.queue.mem.flush.timeout"  # a queue setting: Filebeat restarts to take it
DEFAULTS = PIPELINE_SPACE.defaults()
FASTER = PIPELINE_SPACE.config({TIMEOUT: 0.1}, base=DEFAULTS)
NAMES = ("node-1", "node-2")  # node-1 the canary, node-2 the control that takes the candidate in the next step
WINDOW_S = 1.0
CLIENT_TIMEOUT_S = 10.0  # a request to a cut-off agent fails after this (the daemon's default is 120 s)
AGENT_PORT, FILEBEAT_PORT = 8765, 5066  # each namespace has ports of its own

# Filebeat's part as the agent sees it: it records the config it started on, and serves `/stats` (its health) with
# 200, or with 503 while the test holds its health back (a file beside it), noting that it was asked.
STAND_IN_FILEBEAT = """\
import http.server, json, os, sys
port, config, hold, started = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
with open(started, "a") as out:
    out.write(json.dumps({"pid": os.getpid(), "config": open(config).read()}) + "\\n")


class Stats(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        held = os.path.exists(hold)
        if held:
            with open(hold + ".asked", "a") as out:
                out.write(f"{os.getpid()}\\n")
        self.send_response(503 if held else 200)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", port), Stats).serve_forever()
"""

# The same, but only a process started after the hold was made is held: the running one stays healthy, as the
# daemon checks before a change.
HELD_IF_NEWER = STAND_IN_FILEBEAT.replace("held = os.path.exists(hold)",
                                          "held = os.path.exists(hold) and os.path.getmtime(hold) <= BORN").replace(
    "import http.server, json, os, sys\n", "import http.server, json, os, sys, time\nBORN = time.time()\n")


def until(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    """Until `condition` holds; `TimeoutError` naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:g} s")
        time.sleep(0.1)


class StandInPrometheus:
    """What the daemon asks Prometheus for a pool's window, answered for the nodes: the sources appended and the
    probe consumed `EVENTS` events a node, whose end-to-end latencies follow the flush timeout the node's files hold
    (an event waits up to it), so a canary on a shorter timeout is judged better than its controls. Anything else it
    asks is answered with no series, as a Prometheus that has none. `nodes`: name -> an object whose
    `components["filebeat"].adapter` reads the node's files."""

    EVENTS = 2000  # a node's, in every window

    def __init__(self, nodes: dict) -> None:
        self.nodes = nodes
        answer = self.answer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.reply(parse_qs(urlparse(self.path).query))

            def do_POST(self) -> None:
                self.reply(parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode()))

            def reply(self, form: dict) -> None:
                kind = "matrix" if urlparse(self.path).path.endswith("query_range") else "vector"
                result = answer(form["query"][0], float(form.get("time", ["0"])[0])) if kind == "vector" else []
                body = json.dumps({"status": "success", "data": {"resultType": kind, "result": result}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def histograms(self):
        spread = 0.5 + np.arange(self.EVENTS) / self.EVENTS
        return {name: LatencyHistogram.of(agent.components["filebeat"].adapter.read()[TIMEOUT] * spread,
                                          LATENCY_BUCKETS_S) for name, agent in self.nodes.items()}

    def answer(self, query: str, at: float) -> list[dict]:
        def value(number: float, **labels: str) -> dict:
            return {"metric": labels, "value": [at, str(number)]}
        if query.startswith("(up and on") or "by (stage)" in query or "by (le, stage)" in query:
            return []  # no target restarted or missed; no per-stage figures
        histograms = self.histograms()
        if "sum by (node, le)" in query:
            return [value(sum(h.counts[:i + 1]), node=node, le=str(bound))
                    for node, h in histograms.items() for i, bound in enumerate(h.upper_bounds_s)]
        merged = LatencyHistogram.merge(histograms.values())
        if query.startswith("histogram_quantile("):
            return [value(merged.quantile_s(float(query.split("(")[1].split(",")[0])))]
        if "pipetune_e2e_latency_seconds_count" in query or "increase(pipetune_source_events_total" in query \
                or query.startswith("sum(increase(pipetune_records_total"):
            return [value(merged.total)]
        if "pipetune_e2e_latency_seconds_sum" in query:
            return [value(sum(c * b for c, b in zip(merged.counts, merged.upper_bounds_s[:-1])))]
        return []

    def close(self) -> None:
        self.server.shutdown()


@dataclass
class NetNode:
    """One node: its namespace and link, its agent process, the files its Filebeat reads, and its health hold (a
    file: while it exists the stand-in Filebeat answers its health check 503 and notes that it was asked)."""

    name: str
    network: NodeNetwork | OnLoopback  # OnLoopback: no link to shape or cut
    agent: subprocess.Popen
    client: AgentClient
    runtime: ProcessRuntime
    adapter: FilebeatAdapter
    hold: Path
    started: Path
    log: Path

    def timeout_s(self) -> float:
        """The flush timeout the node's filebeat.yml holds, read from disk."""
        return float(self.adapter.read()[TIMEOUT])

    def starts(self) -> list[dict]:
        return [json.loads(line) for line in self.started.read_text().splitlines()] if self.started.exists() else []

    def wait_answering(self, timeout_s: float = 60.0) -> None:
        """Until the agent answers; `RuntimeError` with its log if it exits or does not answer in `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.agent.poll() is not None:
                raise RuntimeError(f"{self.name}'s agent exited:\n{self.log.read_text()[-3000:]}")
            try:
                self.client.components()
                return
            except Exception:  # not listening yet
                time.sleep(0.2)
        raise RuntimeError(f"{self.name}'s agent did not answer within {timeout_s:g} s:\n{self.log.read_text()}")

    def stop(self) -> None:
        """The client closed, the agent terminated, its component stopped."""
        self.client.close()
        if self.agent.poll() is None:
            self.agent.terminate()
            self.agent.wait(20)
        self.runtime.stop()


OPERATOR_FILEBEAT = ("filebeat.inputs:\n  - type: filestream\n    id: access\n    paths: [{logs}/access.log*]\n"
                     "output.kafka:\n  hosts: ['127.0.0.1:9']\n  topic: web\n")
PASSING_CHECK = "#!/bin/sh\nexit 0\n"  # `filebeat test config`: Filebeat's own check is not the subject


def _operator_files(directory: Path) -> tuple[Path, Path]:
    """An operator's filebeat.yml with one input, and a filebeat binary whose config check passes, in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    config, binary = directory / "filebeat.yml", directory / "filebeat"
    config.write_text(OPERATOR_FILEBEAT.format(logs=directory))
    binary.write_text(PASSING_CHECK)
    binary.chmod(0o755)
    return config, binary


class OnLoopback:
    """A node's place on this namespace's loopback: what `start_node` needs of a `NodeNetwork` (its address, and how
    to run a command there), with no link to shape or cut."""

    def __init__(self, node_ip: str = "127.0.0.1") -> None:
        self.node_ip = node_ip

    def argv(self, command: list[str]) -> list[str]:
        return list(command)


def start_node(name: str, network: NodeNetwork | OnLoopback, directory: Path, token: str,
               agent_port: int = AGENT_PORT, filebeat_port: int = FILEBEAT_PORT) -> NetNode:
    """`pipetune agent` started inside the namespace on the node's address (plain HTTP off loopback:
    --insecure-http), managing a stand-in Filebeat (`HELD_IF_NEWER`) that serves its health on the namespace's own
    loopback; an operator's filebeat.yml with one input, and a `filebeat test config` that passes. Nodes sharing a
    namespace (`OnLoopback`) each need ports of their own."""
    config, binary = _operator_files(directory)
    hold, started = directory / "hold-health", directory / "started.jsonl"
    (directory / "stand-in.py").write_text(HELD_IF_NEWER)
    argv = [sys.executable, str(directory / "stand-in.py"), str(filebeat_port), str(config), str(hold), str(started)]
    raw = {"state_dir": str(directory / "agent"), "host": network.node_ip, "port": agent_port,
           "health_timeout_s": 120, "settle_s": 0.2, "supervise_interval_s": 600,
           "components": [{"name": "filebeat", "kind": "filebeat", "binary": str(binary), "config": str(config),
                           "inputs": [{"id": "access"}], "http_port": filebeat_port,
                           "runtime": {"kind": "process", "argv": argv, "stop_timeout_s": 10}}]}
    (directory / "agent.yaml").write_text(yaml.safe_dump(raw))
    log = directory / "agent.log"
    with open(log, "ab") as out:
        agent = subprocess.Popen(network.argv([sys.executable, "-c", "from cli.main import app; app()", "agent",
                                               "--config", str(directory / "agent.yaml"), "--insecure-http"]),
                                 stdout=out, stderr=subprocess.STDOUT, cwd=Path(__file__).parents[1],
                                 env={**os.environ, "PIPETUNE_AGENT_TOKEN": token})
    client = AgentClient(f"http://{network.node_ip}:{agent_port}", token, timeout_s=CLIENT_TIMEOUT_S, node=name)
    runtime = ProcessRuntime("filebeat", argv, directory / "agent" / "filebeat" / "run")
    return NetNode(name, network, agent, client, runtime,
                   FilebeatAdapter(config, [InputSelector(id="access")], binary), hold, started, log)


@contextmanager
def net_nodes(directory: Path, token: str, first_index: int = 0) -> Iterator[dict[str, NetNode]]:
    """`NAMES`' nodes, each an agent in a namespace of its own (indices from `first_index`), answering; agents stopped
    and namespaces gone when the block ends, however it ends. Needs root."""
    with ExitStack() as stack:
        nodes: dict[str, NetNode] = {}
        for index, name in enumerate(NAMES):
            network = stack.enter_context(node_network(first_index + index))
            node = nodes[name] = start_node(name, network, directory / name, token)
            stack.callback(node.stop)
            node.wait_answering()
        yield nodes


@contextmanager
def loopback_nodes(directory: Path, token: str, ports: list[tuple[int, int]]) -> Iterator[dict[str, NetNode]]:
    """`NAMES`' nodes on this namespace's loopback, node i's agent and stand-in Filebeat on `ports[i]` (agent,
    Filebeat), answering; agents stopped when the block ends, however it ends. Needs no root."""
    with ExitStack() as stack:
        nodes: dict[str, NetNode] = {}
        for name, (agent_port, filebeat_port) in zip(NAMES, ports, strict=True):
            node = nodes[name] = start_node(name, OnLoopback(), directory / name, token, agent_port, filebeat_port)
            stack.callback(node.stop)
        for node in nodes.values():
            node.wait_answering()
        yield nodes


@dataclass
class Pool:
    """The daemon over a canary pool of the nodes, built as the deployment builds one."""

    daemon: Daemon
    pool: CanaryPool
    store: StateStore
    prometheus: StandInPrometheus

    def close(self) -> None:
        self.pool.close()
        self.prometheus.close()


def build_pool(nodes: dict[str, NetNode], state: Path, learner: Learner) -> Pool:
    """The daemon, `learner` proposing, over a canary pool of `nodes` (one canary, one node a step), its figures
    from a stand-in Prometheus that reads each node's files on disk."""
    prometheus = StandInPrometheus({n: SimpleNamespace(components={"filebeat": SimpleNamespace(adapter=node.adapter)})
                                    for n, node in nodes.items()})
    telemetry = PrometheusTelemetry(prometheus.url)
    pipeline = LivePipeline([node.client for node in nodes.values()], telemetry, DEFAULTS)
    pool = CanaryPool({n: LivePipeline([node.client], telemetry, DEFAULTS) for n, node in nodes.items()},
                      LivePoolWindows(pipeline, telemetry), plan_rollout(tuple(nodes), 1, 1), state / "rollout.json",
                      max_windows=3, node_versions=pipeline.node_versions)
    store = StateStore(state)
    daemon = Daemon(pool, learner, Policy(min_dwell_windows=1), window_s=WINDOW_S, store=store, realizer=pool)
    return Pool(daemon, pool, store, prometheus)


def untruthful(pool: CanaryPool, nodes: dict[str, NetNode], versions: dict[int, Config]) -> list[str]:
    """The nodes the pool places on a version (`versions`: its number -> its config) whose files hold another
    flush timeout; a node the pool says it cannot place (unreachable) is the only one it may not know."""
    rollout = pool.rollout()
    return [f"{name}: placed on version {record.version}, its files hold {TIMEOUT} {nodes[name].timeout_s()}"
            for name, record in rollout.nodes.items()
            if record.state != "unreachable" and nodes[name].timeout_s() != versions[record.version][TIMEOUT]]
