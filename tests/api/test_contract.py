"""Contract of every endpoint: what it returns, what it refuses (auth, validation, size), what it stores."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, Counter

from api.app import create_app
from controller.state import Decision, IncumbentReport, StateStore, Status, TunedSpaceReport
from models.observation import Observation
from models.policy import Policy
from models.presets import preset
from models.space import PIPELINE_SPACE
from models.verdict import judge
from tests.api.conftest import AUTH, TOKEN

MUTATIONS = [
    ("PUT", "/policy", {"mode": "frozen"}),
    ("PATCH", "/policy", {"mode": "frozen"}),
    ("POST", "/overrides", {"params": {"filebeat.backoff": 0.5}, "ttl_s": 60, "reason": "test"}),
    ("DELETE", "/overrides/abc", None),
    ("POST", "/pause", None),
    ("POST", "/resume", None),
]


def _decision(window: int, action: str = "explore", p95: float = 0.5, **extra) -> Decision:
    return Decision.model_validate({
        "window": window, "t_s": 10.0 * (window + 1), "config": {"filebeat.backoff": 1.0}, "action": action,
        "reason": f"why {window}", "change": {"filebeat.backoff": [1.0, 0.5]}, "predicted": {"p95_s": 0.4},
        "observed": {"p95_s": p95, "throughput_ratio": 1.0}, "guardrail": [], "recommendation": {},
        "incumbent_p95_s": 0.5, "pause_s": 0.0, **extra})


def test_healthz_and_empty_status(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    status = client.get("/status").json()
    assert status["mode"] == "auto" and status["paused"] is False and status["overrides"] == []
    assert status["pipeline"] is None and status["last_decision"] is None


def test_status_merges_the_daemons_report_with_current_steering(client: TestClient, store: StateStore) -> None:
    store.save_status(Status(pipeline="twin", mode="auto", window=7, t_s=80.0,
                             incumbent=IncumbentReport(config={}, p95_s=0.42, offered_eps=300.0),
                             last_decision=_decision(7, p95=float("nan")), paused=False))
    client.patch("/policy", json={"mode": "advise"}, headers=AUTH)
    client.post("/pause", headers=AUTH)
    made = client.post("/overrides", json={"params": {"filebeat.backoff": 0.2}, "ttl_s": 60, "reason": "r"},
                       headers=AUTH).json()
    status = client.get("/status").json()
    assert (status["pipeline"], status["window"], status["incumbent"]["p95_s"]) == ("twin", 7, 0.42)
    assert status["mode"] == "advise" and status["paused"] is True and status["policy"]["mode"] == "advise"
    assert [o["id"] for o in status["overrides"]] == [made["id"]]
    assert status["last_decision"]["observed"]["p95_s"] is None  # a window without output has no P95


@pytest.mark.parametrize("method,path,body", MUTATIONS)
def test_mutations_need_the_token(client: TestClient, store: StateStore, method: str, path: str, body) -> None:
    missing = client.request(method, path, json=body)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    for header in ({"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {TOKEN}x"}):
        assert client.request(method, path, json=body, headers=header).status_code == 403
    assert client.request(method, path, json=body, headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
    assert store.load_policy() is None and not store.paused() and store.overrides() == [] and store.audit() == []


def test_token_never_appears_in_answers_or_the_audit_log(client: TestClient, store: StateStore) -> None:
    client.put("/policy", json={"mode": "advise"}, headers=AUTH)
    client.post("/overrides", json={"params": {"filebeat.backoff": 0.5}, "ttl_s": 60, "reason": "r"}, headers=AUTH)
    client.post("/pause", headers=AUTH)
    answers = [client.get(path).text for path in ("/", "/status", "/policy", "/overrides", "/decisions", "/metrics",
                                                  "/openapi.json")]
    files = [p.read_text() for p in store.dir.iterdir()]
    assert not any(TOKEN in text for text in answers + files)


def test_put_policy_is_stored_and_audited(client: TestClient, store: StateStore) -> None:
    body = {"mode": "advise", "p95_ceiling_s": 2.0, "bounds": {"filebeat.queue.mem.flush.timeout": [0.0, 1.0]},
            "pins": {"filebeat.output.bulk_max_size": "512"}, "min_dwell_windows": 2, "max_restarts_per_hour": 6}
    answer = client.put("/policy", json=body, headers=AUTH)
    assert answer.status_code == 200
    assert answer.json()["pins"] == {"filebeat.output.bulk_max_size": 512}  # in the parameter's own type
    stored = store.load_policy()
    assert stored.mode == "advise" and stored.bounds == {"filebeat.queue.mem.flush.timeout": (0.0, 1.0)}
    assert client.get("/policy").json() == answer.json()
    assert [e["action"] for e in store.audit()] == ["policy_set"]


@pytest.mark.parametrize("body,loc,allowed", [
    ({"bounds": {"filebeat.output.bulk_max_size": [0, 100]}}, ["body", "bounds", "filebeat.output.bulk_max_size"],
     "[1, 65536]"),
    ({"bounds": {"filebeat.output.bulk_max_size": [500, 100]}}, ["body", "bounds", "filebeat.output.bulk_max_size"],
     "low <= high"),
    ({"pins": {"filebeat.backoff": 99}}, ["body", "pins", "filebeat.backoff"], "[0.001, 10] s"),
    ({"pins": {"logstash.output.kafka.acks": "2"}}, ["body", "pins", "logstash.output.kafka.acks"], "one of 0, 1, all"),
    ({"pins": {"filebeat.backoff": 5}, "bounds": {"filebeat.backoff": [0.1, 1]}}, ["body", "pins", "filebeat.backoff"],
     "within its bounds"),
    ({"bounds": {"no.such.param": [1, 2]}}, ["body", "bounds", "no.such.param"], "a known parameter"),
    ({"tuned": ["no.such.param"]}, ["body", "tuned", "no.such.param"], "a known parameter"),
    ({"min_throughput_ratio": 1.5}, ["body", "min_throughput_ratio"], "less than or equal to 1"),
    ({"mode": "yolo"}, ["body", "mode"], "'auto', 'advise' or 'frozen'"),
    ({"surprise": 1}, ["body", "surprise"], "Extra inputs are not permitted"),
])
@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_invalid_policy_is_refused_naming_field_and_range(client: TestClient, store: StateStore, method: str,
                                                          body: dict, loc: list, allowed: str) -> None:
    answer = client.request(method, "/policy", json=body, headers=AUTH)
    assert answer.status_code == 422
    [error] = answer.json()["detail"]
    assert error["loc"] == loc and allowed in error["msg"]
    assert store.load_policy() is None


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_a_pin_that_leaves_filebeats_backoff_order_no_values_is_refused_naming_both_fields(
        client: TestClient, store: StateStore, method: str) -> None:
    """Issue 39: backoff <= max_backoff <= scan_frequency is Filebeat's reference's requirement, which its own check
    does not make; a pin above a bound the other way can only break it."""
    body = {"pins": {"filebeat.max_backoff": 30}, "bounds": {"filebeat.scan_frequency": [0.1, 20]}}
    answer = client.request(method, "/policy", json=body, headers=AUTH)
    assert answer.status_code == 422
    errors = answer.json()["detail"]
    assert [e["loc"] for e in errors] == [["body", "pins", "filebeat.max_backoff"],
                                          ["body", "bounds", "filebeat.scan_frequency"]]
    assert all("filebeat.max_backoff <= filebeat.scan_frequency" in e["msg"] for e in errors)
    assert store.load_policy() is None
    assert client.request(method, "/policy", json={"pins": {"filebeat.max_backoff": 30}}, headers=AUTH).status_code \
        == 200  # the learner moves scan_frequency up to it


def test_an_override_out_of_filebeats_backoff_order_with_the_running_config_is_refused(client: TestClient,
                                                                                      store: StateStore) -> None:
    running = dict(preset("defaults"))  # scan_frequency 10 s
    store.save_status(Status(mode="auto", paused=False, current_config=running))
    request = {"params": {"filebeat.max_backoff": 55.8}, "ttl_s": 60, "reason": "r", "override_bounds": True}
    refused = client.post("/overrides", json=request, headers=AUTH)
    assert refused.status_code == 422
    [error] = refused.json()["detail"]
    assert error["loc"] == ["body", "params", "filebeat.max_backoff"] and "filebeat.scan_frequency=10.0" in error["msg"]
    assert store.overrides() == []
    both = request | {"params": {"filebeat.max_backoff": 55.8, "filebeat.scan_frequency": 60}}
    assert client.post("/overrides", json=both, headers=AUTH).status_code == 201


def test_patch_changes_only_the_fields_it_names(client: TestClient) -> None:
    client.put("/policy", json={"p95_ceiling_s": 3.0, "pins": {"filebeat.backoff": 0.5}}, headers=AUTH)
    patched = client.patch("/policy", json={"mode": "frozen"}, headers=AUTH).json()
    assert patched["mode"] == "frozen" and patched["p95_ceiling_s"] == 3.0 and patched["pins"] == {"filebeat.backoff": 0.5}
    cleared = client.patch("/policy", json={"p95_ceiling_s": None}, headers=AUTH).json()
    assert cleared["p95_ceiling_s"] is None and cleared["mode"] == "frozen"
    assert client.patch("/policy", json={"mode": None}, headers=AUTH).status_code == 422


def test_override_lifecycle(client: TestClient, store: StateStore) -> None:
    answer = client.post("/overrides", json={"params": {"filebeat.output.bulk_max_size": "256",
                                                        "logstash.output.kafka.acks": "all"},
                                             "ttl_s": 600, "reason": "incident 1"}, headers=AUTH)
    assert answer.status_code == 201
    made = answer.json()
    assert made["params"] == {"filebeat.output.bulk_max_size": 256, "logstash.output.kafka.acks": "all"}
    assert 590 < made["remaining_s"] <= 600 and made["vetoed"] is False
    assert [o["id"] for o in client.get("/overrides").json()] == [made["id"]]
    assert store.overrides()[0].params == made["params"]
    assert client.delete(f"/overrides/{made['id']}", headers=AUTH).json() == {"deleted": made["id"]}
    assert client.get("/overrides").json() == []
    assert client.delete(f"/overrides/{made['id']}", headers=AUTH).status_code == 404
    assert [e["action"] for e in store.audit()] == ["override_added", "override_deleted"]


@pytest.mark.parametrize("body,loc,allowed", [
    ({"params": {"filebeat.output.bulk_max_size": 0}}, ["body", "params", "filebeat.output.bulk_max_size"],
     "an integer in [1, 65536] events"),
    ({"params": {"filebeat.output.bulk_max_size": 1.5}}, ["body", "params", "filebeat.output.bulk_max_size"],
     "an integer"),
    ({"params": {"filebeat.output.worker": True}}, ["body", "params", "filebeat.output.worker"], "[1, 16]"),
    ({"params": {"nope": 1}}, ["body", "params", "nope"], "known: filebeat.scan_frequency"),
    ({"params": {}}, ["body", "params"], "at least 1 item"),
    ({"ttl_s": 0.5}, ["body", "ttl_s"], "greater than or equal to 1"),
    ({"ttl_s": 8 * 86400}, ["body", "ttl_s"], "less than or equal to 604800"),
    ({"reason": ""}, ["body", "reason"], "at least 1 character"),
])
def test_invalid_override_is_refused(client: TestClient, store: StateStore, body: dict, loc: list, allowed: str) -> None:
    request = {"params": {"filebeat.backoff": 0.5}, "ttl_s": 60, "reason": "r"} | body
    answer = client.post("/overrides", json=request, headers=AUTH)
    assert answer.status_code == 422
    [error] = answer.json()["detail"]
    assert error["loc"] == loc and allowed in error["msg"]
    assert store.overrides() == []


@pytest.mark.parametrize("params", [{"filebeat.queue.mem.flush.timeout": 5.0}, {"filebeat.output.bulk_max_size": 1024}])
def test_override_outside_the_policy_needs_override_bounds_and_is_audited(client: TestClient, store: StateStore,
                                                                          params: dict) -> None:
    client.put("/policy", json={"bounds": {"filebeat.queue.mem.flush.timeout": [0.0, 1.0]},
                                "pins": {"filebeat.output.bulk_max_size": 512}}, headers=AUTH)
    request = {"params": params, "ttl_s": 60, "reason": "forced"}
    refused = client.post("/overrides", json=request, headers=AUTH)
    assert refused.status_code == 422
    [error] = refused.json()["detail"]
    assert error["loc"] == ["body", "params", *params] and "override_bounds" in error["msg"]
    assert store.overrides() == []
    made = client.post("/overrides", json=request | {"override_bounds": True}, headers=AUTH)
    assert made.status_code == 201 and made.json()["override_bounds"] is True
    [entry] = [e for e in store.audit() if e["action"] == "override_added"]
    assert entry["override_bounds"] is True and entry["outside_policy"] == list(params) and entry["reason"] == "forced"


def test_an_override_of_a_parameter_no_agent_applies_is_refused_naming_the_pool(client: TestClient,
                                                                              store: StateStore) -> None:
    """Nothing would put it in force: the daemon holds what no agent of the pool manages, whatever the flag."""
    space = TunedSpaceReport(tuned={"filebeat.backoff": ["edge-1/filebeat"]}, held={}, managed=["filebeat.backoff"])
    store.save_status(Status(mode="auto", paused=False, tuned_space=space))
    request = {"params": {"filebeat.backoff": 0.5, "kafka.consumer.fetch.max.wait.ms": 100}, "ttl_s": 60,
               "reason": "r", "override_bounds": True}
    refused = client.post("/overrides", json=request, headers=AUTH)
    assert refused.status_code == 422
    [error] = refused.json()["detail"]
    assert error["loc"] == ["body", "params", "kafka.consumer.fetch.max.wait.ms"]
    assert error["msg"].startswith("no agent of pool default manages kafka.consumer.fetch.max.wait.ms")
    assert store.overrides() == []


def test_a_pin_or_bound_on_a_parameter_no_agent_applies_is_refused_and_the_policy_kept(client: TestClient,
                                                                                       store: StateStore) -> None:
    """A pin the daemon cannot honour would tell the operator a value is forced while the held one runs."""
    space = TunedSpaceReport(tuned={"filebeat.backoff": ["edge-1/filebeat"]}, held={}, managed=["filebeat.backoff"])
    store.save_status(Status(mode="auto", paused=False, tuned_space=space))
    before = client.get("/policy").json()
    put = client.put("/policy", json={"pins": {"filebeat.backoff": 0.5, "kafka.consumer.fetch.max.wait.ms": 100}},
                     headers=AUTH)
    patch = client.patch("/policy", json={"bounds": {"kafka.consumer.fetch.max.wait.ms": [10, 100]}}, headers=AUTH)
    assert put.status_code == patch.status_code == 422
    assert [e["loc"] for e in put.json()["detail"]] == [["body", "pins", "kafka.consumer.fetch.max.wait.ms"]]
    assert patch.json()["detail"][0]["loc"] == ["body", "bounds", "kafka.consumer.fetch.max.wait.ms"]
    assert "no agent of pool default manages" in patch.json()["detail"][0]["msg"]
    assert client.get("/policy").json() == before
    assert client.patch("/policy", json={"pins": {"filebeat.backoff": 0.5}}, headers=AUTH).status_code == 200


def test_override_within_the_policy_needs_no_flag(client: TestClient) -> None:
    client.put("/policy", json={"bounds": {"filebeat.queue.mem.flush.timeout": [0.0, 1.0]},
                                "pins": {"filebeat.output.bulk_max_size": 512}}, headers=AUTH)
    request = {"params": {"filebeat.queue.mem.flush.timeout": 0.5, "filebeat.output.bulk_max_size": 512},
               "ttl_s": 60, "reason": "r"}
    assert client.post("/overrides", json=request, headers=AUTH).status_code == 201


def test_bodies_over_the_limit_are_refused(client: TestClient, store: StateStore) -> None:
    huge = {"params": {"filebeat.backoff": 0.5}, "ttl_s": 60, "reason": "x" * 70_000}
    assert client.post("/overrides", json=huge, headers=AUTH).status_code == 413

    def chunks():  # no Content-Length: the limit must hold for a streamed body too
        for _ in range(80):
            yield b"x" * 1024

    assert client.put("/policy", content=chunks(), headers=AUTH | {"Content-Type": "application/json"}).status_code == 413
    assert store.overrides() == [] and store.load_policy() is None


def test_pause_and_resume(client: TestClient, store: StateStore) -> None:
    assert client.post("/pause", headers=AUTH).json() == {"paused": True}
    assert store.paused() and client.get("/status").json()["paused"] is True
    assert client.post("/resume", headers=AUTH).json() == {"paused": False}
    assert not store.paused()
    assert [e["action"] for e in store.audit()] == ["paused", "resumed"]


def test_decisions_are_paged_newest_first(client: TestClient, store: StateStore) -> None:
    for window in range(5):
        store.append_decision(_decision(window, p95=float("nan") if window == 2 else 0.5))
    first = client.get("/decisions", params={"limit": 2}).json()
    assert [d["seq"] for d in first["items"]] == [4, 3] and first["next_before"] == 3
    second = client.get("/decisions", params={"limit": 2, "before": first["next_before"]}).json()
    assert [d["seq"] for d in second["items"]] == [2, 1] and second["next_before"] == 1
    assert second["items"][0]["observed"]["p95_s"] is None
    last = client.get("/decisions", params={"limit": 2, "before": 1}).json()
    assert [d["seq"] for d in last["items"]] == [0] and last["next_before"] is None
    item = first["items"][0]
    assert item["change"] == {"filebeat.backoff": [1.0, 0.5]} and item["predicted"] == {"p95_s": 0.4}
    assert item["reason"] == "why 4"
    assert client.get("/decisions", params={"limit": 0}).status_code == 422
    assert client.get("/decisions", params={"before": -1}).status_code == 422


def test_paging_reaches_every_decision_across_the_rotated_files(tmp_path) -> None:
    store = StateStore(tmp_path / "rotating", decision_log_bytes=1500, decision_log_files=50)
    client = TestClient(create_app(store, TOKEN))
    for window in range(60):
        store.append_decision(_decision(window))
    assert len(list(store.dir.glob("decisions.*.jsonl"))) > 5  # rotated many times, nothing dropped yet
    seen, before = [], None
    while True:
        page = client.get("/decisions", params={"limit": 7} | ({"before": before} if before is not None else {})).json()
        seen += [(d["seq"], d["window"]) for d in page["items"]]
        before = page["next_before"]
        if before is None:
            break
    assert seen == [(w, w) for w in reversed(range(60))]


def test_recommendations_only_in_advise_mode(client: TestClient, store: StateStore) -> None:
    store.append_decision(_decision(0, action="explore"))
    store.append_decision(_decision(1, action="advise", change={}, recommendation={"filebeat.backoff": [1.0, 0.2]}))
    assert client.get("/recommendations").json() == {"mode": "auto", "items": []}
    client.patch("/policy", json={"mode": "advise"}, headers=AUTH)
    advice = client.get("/recommendations").json()
    assert advice["mode"] == "advise"
    assert [(d["seq"], d["recommendation"]) for d in advice["items"]] == [(1, {"filebeat.backoff": [1.0, 0.2]})]


def test_metrics_standalone_come_from_the_state_dir(client: TestClient, store: StateStore) -> None:
    for window, action in enumerate(["explore", "rollback", "explore", "hold"]):
        store.append_decision(_decision(window, action=action, p95=0.25))
    client.post("/pause", headers=AUTH)
    text = client.get("/metrics").text
    assert 'pipetune_decisions_total{action="explore"} 2.0' in text
    assert "pipetune_rollbacks_total 1.0" in text
    assert "pipetune_window_p95_seconds 0.25" in text and "pipetune_paused 1.0" in text


def test_metrics_in_the_daemon_serve_its_registry(store: StateStore) -> None:
    registry = CollectorRegistry()
    Counter("pipetune_decisions_total", "d", ["action"], registry=registry).labels("explore").inc(3)
    text = TestClient(create_app(store, TOKEN, {"default": registry})).get("/metrics").text
    assert 'pipetune_decisions_total{action="explore"} 3.0' in text and "pipetune_paused" not in text


def test_status_page_is_served_without_the_token(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="chart"' in page.text and 'id="pause"' in page.text and TOKEN not in page.text


def test_openapi_documents_every_endpoint_with_examples(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    operations = {(m.upper(), p) for p, item in schema["paths"].items() for m in item}
    assert {("GET", "/healthz"), ("GET", "/status"), ("GET", "/policy"), ("PUT", "/policy"), ("PATCH", "/policy"),
            ("POST", "/overrides"), ("GET", "/overrides"), ("DELETE", "/overrides/{override_id}"), ("POST", "/pause"),
            ("POST", "/resume"), ("GET", "/decisions"), ("GET", "/recommendations"), ("GET", "/metrics")} <= operations
    for path, item in schema["paths"].items():
        for method, op in item.items():
            if method in ("put", "patch", "post", "delete"):
                assert {"401", "403", "422"} <= set(op["responses"]), (method, path)
                assert op["security"] == [{"HTTPBearer": []}]
    components = schema["components"]["schemas"]
    assert components["OverrideRequest"]["examples"] and components["PolicyPatch"]["examples"]
    assert schema["paths"]["/policy"]["put"]["requestBody"]["content"]["application/json"]["examples"]
    assert components["OverrideRequest"]["properties"]["ttl_s"]["maximum"] == 7 * 86400


def test_the_tradeoff_shows_each_config_the_run_measured_with_its_cpu_and_the_front(client: TestClient,
                                                                                   store: StateStore) -> None:
    assert client.get("/tradeoff").json() == {"rate_eps": None, "points": []}  # nothing measured yet
    defaults = preset("defaults")
    fast = PIPELINE_SPACE.config({"filebeat.queue.mem.flush.timeout": 0.001}, base=defaults)
    for config, p95_s, cores in ((defaults, 2.0, 0.02), (fast, 0.01, 0.08), (fast, 0.02, 0.07)):
        observation = Observation(30.0, 300.0, 300.0, p95_s, p95_s, p95_s, p95_s, events_in=9000, events_out=9000,
                                  cpu_cores={"filebeat": cores, "probe": 0.5})
        store.append_observation(config, 300.0, observation, judge(observation, Policy(), config, None, 0))
    shown = client.get("/tradeoff").json()
    assert shown["rate_eps"] == 300.0
    assert [(p["label"], p["windows"], p["on_front"]) for p in shown["points"]] == [("defaults", 1, True),
                                                                                   ("config 1", 2, True)]
    assert shown["points"][1]["cpu_cores"] == pytest.approx(0.075) and shown["points"][1]["p95_s"] == 0.015
