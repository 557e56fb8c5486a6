"""The daemon killed between a canary's promotion steps (issue 41, fault 4), on real processes: `pipetune autotune
--pipeline` over a canary pool of two agents (node-1 the canary, node-2 the next step), SIGKILLed while node-2's step
is held open, then started again on its state directory for one window. What it left is read from the rollout state
and the decision log it keeps there. Shared by tests/faults/test_sigkill.py and `bench.faults`: a person's override
makes the change (the daemon's own learner would take windows to propose one), the figures that judge it are a
stand-in Prometheus's (`testbed.net_pool`), and Kafka is real (the daemon reads its consumer group's lag)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from controller.state import StateStore
from testbed import processes
from testbed.install import install_all
from testbed.kafka import brokers_ready, create_topics, kafka_services
from testbed.pipeline import PipelineSpec

PIPETUNE = str(Path(sys.executable).with_name("pipetune"))
WINDOW_S = 2  # the daemon's: its figures are the stand-in Prometheus's, whatever the window
RECOVERED = "the daemon restarted in the middle of a rollout: "
# What a broker just started, or a topic just created, answers a commit until its metadata has settled.
NOT_READY_YET = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                 KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.UNKNOWN_TOPIC_OR_PART}


@contextmanager
def brokers_only(spec: PipelineSpec) -> Iterator[str]:
    """`spec`'s brokers and topics, nothing else of its testbed (the daemon needs Kafka for its consumer group's lag,
    not a pipeline); their bootstrap, the brokers stopped when the block ends."""
    spec.resolved_run_dir().mkdir(parents=True, exist_ok=True)
    brokers = kafka_services(spec, install_all().kafka_libs, spec.start_config())
    try:
        for broker in brokers:
            processes.start(broker)
        for broker in brokers:
            processes.wait_ready(broker, lambda: brokers_ready(spec), 90.0)
        create_topics(spec)
        yield spec.bootstrap
    finally:
        for broker in brokers:
            processes.stop(broker)


def commit_group(bootstrap: str, topic: str, group: str, timeout_s: float = 60.0) -> None:
    """`group` with a committed offset on `topic`: a group the daemon can read a lag of every window. A broker just
    started has no group coordinator until it made its offsets topic, and a topic just created is not known at once:
    those refusals (`NOT_READY_YET`) are waited out."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
                return
            except KafkaException as err:
                if err.args[0].code() not in NOT_READY_YET or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def write_deployment(directory: Path, agents: dict[str, str], token: str, bootstrap: str, group: str,
                     prometheus_url: str) -> Path:
    """The operator's deployment file of one pool of `agents` (name -> URL, in rollout order), their token beside it."""
    (directory / "agent.token").write_text(token)
    deployment = directory / "deployment.yaml"
    deployment.write_text(yaml.safe_dump({
        "name": "daemon-kill", "nodes": [{"name": name, "agent_url": url, "token_file": "agent.token"}
                                         for name, url in agents.items()],
        "kafka": {"bootstrap": bootstrap, "consumer_group": group}, "prometheus": {"url": prometheus_url}}))
    return deployment


def autotune(deployment: Path, state: Path) -> list[str]:
    """`pipetune autotune` over the deployment, its state (rollout, decision log) in `state`."""
    return [PIPETUNE, "autotune", "--pipeline", str(deployment), "--window", str(WINDOW_S), "--state-dir", str(state)]


def rollout(state: Path) -> dict:
    """The pool's rollout state as the daemon last wrote it ({} before it wrote one)."""
    path = state / "rollout.json"
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):  # not yet, or being replaced this instant
        return {}


def between_steps(state: Path) -> bool:
    """Whether the rollout is promoting, the canary promoted and a node's step not done."""
    doc = rollout(state)
    return doc.get("phase") == "promoting" and {(n["version"], n["state"]) for n in doc["nodes"]} == {
        (doc["version"] + 1, "promoted"), (doc["version"], "pending")}


def one_version(state: Path) -> bool:
    """Whether the rollout is steady with every node promoted on its version."""
    doc = rollout(state)
    return doc.get("phase") == "steady" and all((n["version"], n["state"]) == (doc["version"], "promoted")
                                                for n in doc["nodes"])


def kill_between_steps(command: list[str], state: Path, log: Path, held: Callable[[], bool],
                       timeout_s: float = 600.0) -> float:
    """Start `command` (the daemon), wait until the rollout is `between_steps` and `held()` says the pending node's
    step is held open, and SIGKILL the daemon's whole process group (its Ray with it); when it was killed.
    `TimeoutError` with the daemon's log if that moment does not come within `timeout_s`."""
    with open(log, "ab") as out:
        daemon = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while not (between_steps(state) and held()):
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise TimeoutError(f"the daemon was not between promotion steps within {timeout_s:g} s (exit "
                                   f"{daemon.poll()}); rollout {rollout(state)}:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
        return time.time()
    finally:
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait(60)


def restart(command: list[str], state: Path, timeout_s: float = 900.0) -> tuple[subprocess.CompletedProcess, float
                                                                                 | None]:
    """`command` run again on the same state for one window; its end, and the seconds from its start until the
    rollout was `one_version` (None: not before it ended)."""
    started = time.monotonic()
    recovered_s: float | None = None
    with subprocess.Popen([*command, "--windows", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as again:
        while again.poll() is None:
            if recovered_s is None and one_version(state):
                recovered_s = time.monotonic() - started
            if time.monotonic() - started > timeout_s:
                os.killpg(again.pid, signal.SIGKILL)
            time.sleep(0.1)
        out, err = again.communicate()
    if recovered_s is None and one_version(state):  # between the last look and its end
        recovered_s = time.monotonic() - started
    return subprocess.CompletedProcess(again.args, again.returncode, out, err), recovered_s


@dataclass(frozen=True)
class Recovery:
    """What the restarted daemon left: its rollout (phase, promoted version and config, each node's version and
    state) and its decision log (the actions in order, the reasons of its `recover` decisions)."""

    phase: str
    version: int
    promoted: dict[str, float]
    nodes: dict[str, tuple[int, str]]
    actions: tuple[str, ...]
    recover_reasons: tuple[str, ...]

    @classmethod
    def of(cls, state: Path) -> "Recovery":
        doc, decisions = rollout(state), StateStore(state).decisions()
        return cls(doc.get("phase", ""), doc.get("version", -1), doc.get("promoted", {}),
                   {n["node"]: (n["version"], n["state"]) for n in doc.get("nodes", [])},
                   tuple(d["action"] for d in decisions),
                   tuple(d["reason"] for d in decisions if d["action"] == "recover"))

    def finished(self, version: int, param: str, value: float) -> bool:
        """Whether the promotion of `version` (`param` at `value`) ended on every node, nothing taken back."""
        return (self.phase, self.version, self.promoted.get(param)) == ("steady", version, value) and bool(
            self.nodes) and set(self.nodes.values()) == {(version, "promoted")} and "rollback" not in self.actions


def recover_reason(param: str, before: float, after: float, standing: dict[str, tuple[int, str]],
                   did: dict[str, str]) -> str:
    """The decision log's `recover` reason for version 1 (`param` `before` → `after`) found being promoted, the nodes
    `standing` (name -> version, state) as the rollout recorded them and each pending node's agent saying `did`."""
    nodes = ", ".join(f"{name} {state} on version {version}" for name, (version, state) in standing.items())
    steps = "; ".join(f"{name}: {said}" for name, said in did.items())
    return (f"{RECOVERED}found version 1 ({param} {before} → {after}) being promoted, {nodes}; finished the "
            f"promotion, its remaining steps not judged ({steps}); every node on version 1")
