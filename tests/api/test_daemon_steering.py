"""People steering a running daemon through the API: overrides, pins, frozen mode, pause, restarts.

The daemon runs the twin with the in-process pipetune learner (no Ray), 10 s simulated windows.
"""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

import controller.state
from api.app import create_app
from controller.daemon import Daemon
from controller.pipelines import TwinPipeline
from controller.state import StateStore
from models.learning import TunedCube, tuned_names
from models.policy import Policy
from models.presets import preset
from models.space import Config
from models.strategies import build_learner
from models.twin import load
from replay.profiles import Profile, WorkloadSpec, build_schedule
from tests.api.conftest import AUTH, TOKEN
from tests.clock import VirtualClock

WINDOW_S = 10.0
CAL = load("paper-2vcpu")
SAFE_OVERRIDE = {"filebeat.queue.mem.flush.timeout": 0.1, "filebeat.queue.mem.flush.min_events": 512}


def make_daemon(store: StateStore, windows: int = 60, strategy: str = "pipetune") -> Daemon:
    """A daemon as `pipetune autotune` builds one: the stored policy if any, the stored incumbent as start."""
    policy = store.load_policy() or Policy()
    incumbent = store.load_incumbent()
    start = incumbent.config if incumbent else preset("defaults")
    learner = build_learner(strategy, TunedCube(tuned_names(policy, "paper"), policy), start, topology="paper")
    load_s = (windows + 5) * 2 * WINDOW_S
    twin = TwinPipeline(start, build_schedule(WorkloadSpec(Profile.steady, 300.0, load_s, seed=0)).schedule.times_s, CAL)
    daemon = Daemon(twin, learner, policy, window_s=WINDOW_S, store=store)
    daemon.resume()
    daemon.warm_up()
    return daemon


def override(client: TestClient, params: dict, ttl_s: float, **extra) -> dict:
    answer = client.post("/overrides", json={"params": params, "ttl_s": ttl_s, "reason": "test", **extra}, headers=AUTH)
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_override_reaches_the_twin_within_one_window_and_expires_on_time(client: TestClient, store: StateStore,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Expiry is wall-clock time in the state dir: the test moves that clock, so how long a daemon step
    # takes on this machine cannot expire the override early.
    clock = VirtualClock(time.time()).install(monkeypatch, controller.state)
    daemon = make_daemon(store)
    daemon.step()
    made = override(client, SAFE_OVERRIDE, ttl_s=2.0)
    applied = daemon.step()
    assert applied.action == "override" and made["id"] in applied.reason
    assert {k: daemon.pipeline.current()[k] for k in SAFE_OVERRIDE} == SAFE_OVERRIDE
    clock.advance(1.9)
    assert daemon.step().action == "override"  # held while it lives
    clock.advance(made["expires_at"] - clock.time() + 0.05)
    after = daemon.step()
    assert after.action != "override"
    assert client.get("/overrides").json() == [] and client.get("/status").json()["overrides"] == []


def test_a_guardrail_still_rolls_an_override_back_and_it_stays_vetoed(client: TestClient, store: StateStore) -> None:
    daemon = make_daemon(store)
    daemon.step()
    override(client, {"spark.trigger.interval": 60.0}, ttl_s=600)  # micro-batches a minute apart: backlog grows
    actions = []
    while "override" not in actions and len(actions) < 3:  # a rollback of the learner's last try comes first
        actions.append(daemon.step().action)
    assert actions[-1] == "override" and daemon.pipeline.current()["spark.trigger.interval"] == 60.0
    # the first window may hold a micro-batch that ships what its settle window queued; the next cannot
    judged = [daemon.step() for _ in range(2)]
    breached = next(d for d in judged if d.guardrail)
    assert breached.action == "rollback"
    assert daemon.pipeline.current()["spark.trigger.interval"] != 60.0
    assert client.get("/overrides").json()[0]["vetoed"] is True
    restarted = make_daemon(StateStore(store.dir))
    assert all(restarted.step().action != "override" for _ in range(2))


@pytest.mark.slow
def test_a_pin_and_a_bound_hold_across_50_learner_steps(client: TestClient, store: StateStore) -> None:
    client.put("/policy", json={"pins": {"filebeat.output.bulk_max_size": 512},
                                "bounds": {"filebeat.queue.mem.flush.timeout": [0.0, 0.5]}}, headers=AUTH)
    policy = Policy.model_validate(client.get("/policy").json())
    # Random search proposes a new config nearly every window, so 50 windows put the policy to the test;
    # pipetune's learner may hold for most of them on 10 s windows (its own moves: tests/models/test_bayes.py).
    daemon = make_daemon(store, strategy="random")
    decisions = [daemon.step() for _ in range(50)]
    assert sum(d.action == "explore" for d in decisions) >= 10  # the learner did move things
    for d in decisions[1:]:  # the first window still ran the start config: the pin applies from its decision on
        assert policy.enforce(Config(d.config)) == Config(d.config), (d.window, d.action, d.config)
    assert policy.enforce(daemon.pipeline.current()) == daemon.pipeline.current()


def test_frozen_mode_changes_nothing(client: TestClient, store: StateStore) -> None:
    client.patch("/policy", json={"mode": "frozen"}, headers=AUTH)
    daemon = make_daemon(store)
    before = daemon.pipeline.current()
    decisions = [daemon.step() for _ in range(8)]
    assert {d.action for d in decisions} <= {"frozen", "hold"} and all(not d.change for d in decisions)
    assert daemon.pipeline.current() == before
    client.patch("/policy", json={"mode": "auto"}, headers=AUTH)
    assert any(daemon.step().change for _ in range(4))  # the learner moves again once the mode allows it


def test_pause_holds_and_resume_gives_control_back(client: TestClient, store: StateStore) -> None:
    client.post("/pause", headers=AUTH)
    daemon = make_daemon(store)
    before = daemon.pipeline.current()
    decisions = [daemon.step() for _ in range(4)]
    assert {d.action for d in decisions} <= {"paused", "hold"} and daemon.pipeline.current() == before
    client.post("/resume", headers=AUTH)
    assert any(daemon.step().change for _ in range(4))


def test_policy_overrides_pause_and_audit_survive_a_daemon_restart(client: TestClient, store: StateStore) -> None:
    client.put("/policy", json={"mode": "advise", "pins": {"filebeat.output.bulk_max_size": 512}}, headers=AUTH)
    daemon = make_daemon(store)
    daemon.step()
    made = override(client, SAFE_OVERRIDE, ttl_s=600)
    client.post("/pause", headers=AUTH)
    daemon.step()
    audit_before = store.audit()
    del daemon

    again = StateStore(store.dir)  # a new process: nothing but the directory carries over
    restarted = make_daemon(again)
    api = TestClient(create_app(again, TOKEN))
    assert restarted.policy.mode == "advise" and restarted.policy.pins == {"filebeat.output.bulk_max_size": 512}
    assert api.get("/policy").json()["pins"] == {"filebeat.output.bulk_max_size": 512}
    [kept] = api.get("/overrides").json()
    assert kept["id"] == made["id"] and 0 < kept["remaining_s"] <= made["remaining_s"]
    assert api.get("/status").json()["paused"] is True
    assert again.audit()[:len(audit_before)] == audit_before
    first = restarted.step()
    assert first.action == "override" and first.window == 2  # it carries on counting, and applies the override
    assert {k: restarted.pipeline.current()[k] for k in SAFE_OVERRIDE} == SAFE_OVERRIDE
