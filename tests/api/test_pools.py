"""Steering one pool of several: `/pools/{name}/...` reaches that pool's state alone, `GET /pools` lists every
pool with its nodes, an unknown pool is a 404 naming the known ones, and the unprefixed routes stay the only
(or `default`) pool's."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from controller.state import Decision, StateStore, Status, plan_pool_dirs, save_pool_dirs
from models.policy import Policy
from tests.api.conftest import AUTH, TOKEN


def _pools(root: Path, names: dict[str, list[str]]) -> dict[str, StateStore]:
    dirs = plan_pool_dirs(root, names)
    save_pool_dirs(root, dirs)
    return {d.name: StateStore(d.directory) for d in dirs}


@pytest.fixture
def fleet(tmp_path: Path) -> tuple[TestClient, dict[str, StateStore]]:
    stores = _pools(tmp_path, {"edge": ["node-1", "node-2"], "core": ["node-3"]})
    return TestClient(create_app(StateStore(tmp_path), TOKEN)), stores


def test_a_pools_policy_is_its_own(fleet):
    client, stores = fleet
    answer = client.patch("/pools/edge/policy", json={"mode": "frozen", "pins": {"filebeat.output.bulk_max_size": 512}},
                          headers=AUTH)
    assert answer.status_code == 200 and answer.json()["mode"] == "frozen"
    assert stores["edge"].load_policy().pins == {"filebeat.output.bulk_max_size": 512}
    assert stores["core"].load_policy() is None and client.get("/pools/core/policy").json()["mode"] == "auto"
    assert [e["action"] for e in stores["edge"].audit()] == ["policy_patched"] and stores["core"].audit() == []
    refused = client.put("/pools/core/policy", json={"mode": "sometimes"}, headers=AUTH)
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "mode"]


def test_pause_overrides_and_decisions_address_one_pool(fleet):
    client, stores = fleet
    assert client.post("/pools/core/pause", headers=AUTH).json() == {"paused": True}
    assert stores["core"].paused() and not stores["edge"].paused()
    made = client.post("/pools/edge/overrides", headers=AUTH, json={
        "params": {"filebeat.output.bulk_max_size": 256}, "ttl_s": 600, "reason": "incident 4711"})
    assert made.status_code == 201
    assert [o["id"] for o in client.get("/pools/edge/overrides").json()] == [made.json()["id"]]
    assert client.get("/pools/core/overrides").json() == []
    assert client.delete(f"/pools/core/overrides/{made.json()['id']}", headers=AUTH).status_code == 404
    stores["core"].append_decision(Decision(window=0, t_s=30.0, config={}, observed={"p95_s": 0.4}, action="hold",
                                            reason="core's own"))
    assert [d["reason"] for d in client.get("/pools/core/decisions").json()["items"]] == ["core's own"]
    assert client.get("/pools/edge/decisions").json()["items"] == []
    assert client.get("/pools/core/status").json()["paused"] is True
    assert client.post("/pools/core/resume", headers=AUTH).json() == {"paused": False}


def test_steering_a_pool_needs_the_token(fleet):
    client, stores = fleet
    assert client.post("/pools/edge/pause").status_code == 401
    assert client.post("/pools/edge/pause", headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert not stores["edge"].paused()


def test_an_unknown_pool_is_a_404_naming_the_known_ones(fleet):
    client, _ = fleet
    for method, path in (("GET", "/pools/cache/status"), ("PUT", "/pools/cache/policy"),
                         ("POST", "/pools/cache/pause"), ("GET", "/pools/cache/decisions")):
        answer = client.request(method, path, headers=AUTH, json={})
        assert answer.status_code == 404, (method, path)
        assert answer.json()["detail"] == "no pool 'cache'; pools: edge, core"


def test_without_a_default_pool_the_unprefixed_routes_say_which_pools_there_are(fleet):
    client, _ = fleet
    answer = client.get("/status")
    assert answer.status_code == 404 and "edge, core" in answer.json()["detail"]
    assert "/pools/{name}/" in answer.json()["detail"]


def test_the_unprefixed_routes_are_the_pool_named_default(tmp_path):
    stores = _pools(tmp_path, {"default": ["node-1"], "canary": ["node-2"]})
    client = TestClient(create_app(StateStore(tmp_path), TOKEN))
    client.post("/pause", headers=AUTH)
    assert stores["default"].paused() and not stores["canary"].paused()


def test_a_state_directory_from_before_pools_is_the_pool_default(store: StateStore, client: TestClient):
    store.save_policy(Policy(mode="advise"))
    assert client.get("/pools/default/policy").json()["mode"] == "advise" == client.get("/policy").json()["mode"]
    assert client.get("/pools").json()[0] | {"status": None} == {"name": "default", "nodes": [], "status": None}


def test_pools_lists_every_pool_with_its_nodes_and_their_config_versions(fleet):
    client, stores = fleet
    stores["edge"].save_status(Status(pipeline="edge", mode="auto", paused=False, window=3,
                                      current_config={"filebeat.output.bulk_max_size": 512},
                                      nodes={"node-1": {"filebeat": 4}, "node-2": None}))
    listed = {p["name"]: p for p in client.get("/pools").json()}
    assert list(listed) == ["edge", "core"]
    assert listed["edge"]["nodes"] == ["node-1", "node-2"] and listed["core"]["nodes"] == ["node-3"]
    assert listed["edge"]["status"]["nodes"] == {"node-1": {"filebeat": 4}, "node-2": None}
    assert listed["edge"]["status"]["window"] == 3 and listed["core"]["status"]["window"] is None


def test_each_pools_metrics_come_from_its_own_state(fleet):
    client, stores = fleet
    stores["core"].set_paused(True)
    assert "pipetune_paused 1.0" in client.get("/pools/core/metrics").text
    assert "pipetune_paused 0.0" in client.get("/pools/edge/metrics").text
