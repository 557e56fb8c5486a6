"""The status page in headless Chromium, over the API of a twin daemon that is running meanwhile, and over a
daemon's pools: each listed with its nodes and their config versions, the one in the address shown and steered."""

from __future__ import annotations

import itertools
import re
import threading
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from api.app import create_app
from api.server import serve_in_thread
from controller.state import (Action, BudgetReport, Decision, NodeRolloutReport, RolloutReport, StateStore, Status,
                              TunedSpaceReport, plan_pool_dirs, save_pool_dirs)
from testbed.install import PrerequisiteError
from tests.api.browser import install_chromium, run_chromium
from tests.api.conftest import AUTH, TOKEN
from tests.api.test_daemon_steering import SAFE_OVERRIDE, make_daemon
from tests.conftest import free_ports


@pytest.fixture(scope="session")
def chromium() -> Path:
    try:
        return install_chromium()
    except PrerequisiteError as exc:
        pytest.fail(f"the status-page test needs Debian's chromium and could not install it: {exc}")


@pytest.fixture
def live_api(tmp_path: Path) -> Iterator[tuple[str, StateStore, FastAPI]]:
    """A twin daemon stepping in a thread, and the API over its state dir on a loopback port."""
    store = StateStore(tmp_path / "state")
    daemon = make_daemon(store, windows=400)
    daemon.name = "twin-under-test"
    for _ in range(5):  # window numbers start at 0: the status shows window 4 before the thread steps at all
        daemon.step()
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            daemon.step()
            stop.wait(0.3)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    port = free_ports(1)[0]
    app = create_app(store, TOKEN)
    server = serve_in_thread(app, "127.0.0.1", port)
    try:
        yield f"http://127.0.0.1:{port}/", store, app
    finally:
        stop.set()
        server.should_exit = True
        thread.join(timeout=30)


def _text(dom: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', dom)
    assert match, f"#{element_id} not in the page"
    return match.group(1)


def test_status_page_shows_live_daemon_data(chromium: Path, live_api, tmp_path: Path) -> None:
    url, store, _ = live_api
    httpx.post(url + "overrides", json={"params": SAFE_OVERRIDE, "ttl_s": 600, "reason": "page test"},
               headers=AUTH).raise_for_status()
    dom = run_chromium(chromium, url, tmp_path / "profile-dom", "--dump-dom")
    assert 'data-loaded="1"' in dom, "the page's script did not render the API's data"
    assert _text(dom, "pipeline") == "twin-under-test"
    assert _text(dom, "mode") == "auto"
    assert int(_text(dom, "window")) >= 4
    shown = [int(seq) for seq in re.findall(r'<tr class="[a-z]+" data-seq="(\d+)"', dom)]
    logged = store.decisions()
    assert len(shown) >= 4 and all(seq < len(logged) for seq in shown)
    assert shown == sorted(shown, reverse=True)
    newest = logged[shown[0]]
    assert f"{newest['observed']['p95_s']:.3f}" in dom  # the number in the table is the one the daemon logged
    assert len(re.findall(r'class="point"', dom)) >= 4  # one chart point per window
    assert re.search(r'id="overrides"><div>[0-9a-f]{12}: [^<]*flush.timeout=0.1[^<]*page test', dom)
    assert TOKEN not in dom
    # the trade-off of the configs measured so far, as GET /tradeoff has it
    tradeoff = httpx.get(url + "tradeoff").json()
    assert re.fullmatch(r"at \d+ ev/s", _text(dom, "tradeoff-rate")) and tradeoff["points"]
    assert re.search(r'<table id="tradeoff">.*<tr class="front"><td>', dom, re.S)

    shot = tmp_path / "status-page.png"
    run_chromium(chromium, url, tmp_path / "profile-shot", f"--screenshot={shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    print(f"status page screenshot: {shot}")


# Loads the status page in a same-origin frame, types a token into it and clicks one of its buttons.
CLICKER = """<iframe id="page" src="%(src)s" width="1280" height="900"></iframe><pre id="result">waiting</pre>
<script>
const frame = document.getElementById("page");
frame.addEventListener("load", () => {
  const page = frame.contentDocument;
  page.getElementById("token").value = "%(token)s";
  page.getElementById("%(button)s").click();
  const poll = setInterval(() => {
    const text = page.getElementById("control-result").textContent;
    if (text) { document.getElementById("result").textContent = text; clearInterval(poll); }
  }, 50);
});
</script>"""


def test_pause_and_resume_buttons_use_the_token(chromium: Path, live_api, tmp_path: Path) -> None:
    url, store, app = live_api

    clicks = itertools.count()

    def click(button: str, token: str) -> str:
        path = f"click-{next(clicks)}"
        html = CLICKER % {"token": token, "button": button, "src": "/"}
        app.add_api_route("/" + path, lambda: html, response_class=HTMLResponse)
        dom = run_chromium(chromium, url + path, tmp_path / f"profile-{path}", "--dump-dom")
        return re.search(r'id="result">([^<]*)<', dom).group(1)

    assert click("pause", "not-the-token") == "pause: 403 wrong token"
    assert not store.paused()
    assert click("pause", TOKEN) == "pause: done"
    assert store.paused()
    assert click("resume", TOKEN) == "resume: done"
    assert not store.paused()


@pytest.fixture
def pools_api(tmp_path: Path) -> Iterator[tuple[str, dict[str, StateStore], FastAPI]]:
    """Two pools: edge, a twin daemon that has run five windows; core, paused, its nodes' versions read."""
    dirs = plan_pool_dirs(tmp_path / "state", {"edge": ["node-1", "node-2"], "core": ["node-3"]})
    save_pool_dirs(tmp_path / "state", dirs)
    stores = {d.name: StateStore(d.directory) for d in dirs}
    daemon = make_daemon(stores["edge"], windows=20)
    daemon.name = "edge"
    for _ in range(5):
        daemon.step()
    stores["core"].append_decision(Decision(window=0, t_s=10.0, config={}, action=Action.HOLD, reason="core's own",
                                            observed={"p95_s": 0.25, "throughput_ratio": 1.0, "offered_eps": 300.0}))
    stores["core"].save_status(Status(pipeline="core", mode="auto", paused=False, window=0,
                                      nodes={"node-3": {"filebeat": 2}}))
    stores["core"].set_paused(True)
    port = free_ports(1)[0]
    app = create_app(StateStore(tmp_path / "state"), TOKEN)
    server = serve_in_thread(app, "127.0.0.1", port)
    try:
        yield f"http://127.0.0.1:{port}/", stores, app
    finally:
        server.should_exit = True


def _pool_rows(dom: str) -> dict[str, str]:
    rows = re.findall(r'<tr (?:class="selected" )?data-pool="([^"]+)"[^>]*>(.*?)</tr>', dom)
    return {name: re.sub(r"<[^>]+>", " ", cells) for name, cells in rows}


def test_status_page_lists_the_pools_and_shows_the_one_addressed(chromium: Path, pools_api, tmp_path: Path) -> None:
    url, stores, _ = pools_api
    dom = run_chromium(chromium, url + "#pool=core", tmp_path / "profile-core", "--dump-dom")
    assert 'data-loaded="1"' in dom, "the page's script did not render the API's data"
    rows = _pool_rows(dom)
    assert list(rows) == ["edge", "core"]
    assert "node-3: filebeat v2" in rows["core"] and "auto (paused)" in rows["core"]
    assert "node-1: not read yet; node-2: not read yet" in rows["edge"]  # the twin has no agents to ask
    assert 'class="selected" data-pool="core"' in dom
    assert _text(dom, "pool") == "core" and _text(dom, "pipeline") == "core"
    assert "core's own" in dom and 'class="badge paused"' in dom
    edge = run_chromium(chromium, url, tmp_path / "profile-first", "--dump-dom")  # no pool named: the first
    assert _text(edge, "pool") == "edge" and _text(edge, "pipeline") == "edge" and "core's own" not in edge
    shown = [int(seq) for seq in re.findall(r'<tr class="[a-z]+" data-seq="(\d+)"', edge)]
    assert len(shown) >= 4 and len(re.findall(r'class="point"', edge)) >= 4


def test_the_pause_button_pauses_the_pool_shown(chromium: Path, pools_api, tmp_path: Path) -> None:
    url, stores, app = pools_api
    stores["core"].set_paused(False)
    app.add_api_route("/click", lambda: CLICKER % {"token": TOKEN, "button": "pause", "src": "/#pool=core"},
                      response_class=HTMLResponse)
    dom = run_chromium(chromium, url + "click", tmp_path / "profile-click", "--dump-dom")
    assert re.search(r'id="result">([^<]*)<', dom).group(1) == "pause: done"
    assert stores["core"].paused() and not stores["edge"].paused()


def test_status_page_shows_the_rollout_in_progress_of_the_pool_shown(chromium: Path, pools_api, tmp_path: Path
                                                                    ) -> None:
    url, stores, _ = pools_api
    rollout = RolloutReport(phase="canary", promoted_version=3, judgement="better: P95 -0.041 s [-0.06, -0.02]",
                            nodes={"node-1": NodeRolloutReport(version=4, state="canary"),
                                   "node-2": NodeRolloutReport(version=3, state="promoted")})
    status = Status.model_validate(stores["edge"].load_status())
    stores["edge"].save_status(status.model_copy(update={"rollout": rollout}))
    dom = run_chromium(chromium, url + "#pool=edge", tmp_path / "profile-rollout", "--dump-dom")
    assert 'data-loaded="1"' in dom, "the page's script did not render the API's data"
    assert "canary (promoted v3)" in _pool_rows(dom)["edge"] and "–" in _pool_rows(dom)["core"]
    assert 'id="rollout-detail" hidden' not in dom and re.search(r'id="rollout-none" hidden', dom)
    assert _text(dom, "rollout-phase") == "canary" and _text(dom, "rollout-version") == "v3"
    assert _text(dom, "rollout-judgement") == rollout.judgement
    nodes = re.findall(r'<tr class="([a-z_]+)" data-node="([^"]+)"><td>[^<]*</td><td>([^<]*)</td><td>([^<]*)</td>', dom)
    assert nodes == [("canary", "node-1", "v4", "canary"), ("promoted", "node-2", "v3", "promoted")]
    core = run_chromium(chromium, url + "#pool=core", tmp_path / "profile-no-rollout", "--dump-dom")
    assert re.search(r'id="rollout-detail" hidden', core) and not re.search(r'id="rollout-none" hidden', core)
    assert "data-node=" not in core


def test_status_page_shows_what_is_tuned_by_which_agent_what_is_held_and_the_cpu_budget(
        chromium: Path, pools_api, tmp_path: Path) -> None:
    url, stores, _ = pools_api
    tuned = ["filebeat.backoff", "filebeat.max_backoff"]
    space = TunedSpaceReport(tuned={name: ["node-3/filebeat"] for name in tuned},
                             held={"kafka.consumer.fetch.max.wait.ms": "no agent of pool core manages it"},
                             managed=tuned, ceilings={"filebeat.max_backoff": 10.0})
    config = {"filebeat.backoff": 0.05, "filebeat.max_backoff": 2.5, "kafka.consumer.fetch.max.wait.ms": 250}
    budget = BudgetReport(limits={"filebeat": 0.1}, used={"filebeat": 0.09}, units={"filebeat": "cores"})
    stores["core"].save_status(Status(pipeline="core", mode="auto", paused=False, tuned_space=space,
                                      current_config=config, budget=budget))
    dom = run_chromium(chromium, url + "#pool=core", tmp_path / "profile-space", "--dump-dom")
    assert 'data-loaded="1"' in dom, "the page's script did not render the API's data"
    rows = re.findall(r'<tr class="(tuned|held)" data-param="([^"]+)"><td>[^<]*</td><td>([^<]*)</td>'
                      r'<td>([^<]*)</td>', dom)
    assert rows == [("tuned", "filebeat.backoff", "0.05", "tuned by node-3/filebeat"),
                    ("tuned", "filebeat.max_backoff", "2.5",
                     "tuned by node-3/filebeat; at most 10, as the run started (a lull waits it out)"),
                    ("held", "kafka.consumer.fetch.max.wait.ms", "250", "held: no agent of pool core manages it")]
    assert '<div id="budget">filebeat 0.090 of 0.100 cores</div>' in dom
