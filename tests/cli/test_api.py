"""The CLI client (`pipetune status|policy|override|overrides|pause|resume|decisions`) against a served API,
and `pipetune api` itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import httpx
import pytest
from typer.testing import CliRunner

from api.app import create_app
from api.server import serve_in_thread
from cli.main import app
from controller.state import (Action, ClockOffsetReport, Cost, Decision, IncumbentReport, StateStore, Status,
                              TunedSpaceReport, plan_pool_dirs, save_pool_dirs)
from tests.conftest import free_ports

TOKEN = "cli-test-token"
runner = CliRunner()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, StateStore]]:
    store = StateStore(tmp_path / "state")
    port = free_ports(1)[0]
    server = serve_in_thread(create_app(store, TOKEN), "127.0.0.1", port)
    yield f"http://127.0.0.1:{port}", store
    server.should_exit = True


def cli(url: str, *args: str, token: str | None = TOKEN):
    env = {"PIPETUNE_API_URL": url, "PIPETUNE_API_TOKEN": token or ""}
    return runner.invoke(app, list(args), env=env)


def flat(output: str) -> str:
    """The output without the line breaks rich adds at the terminal's width."""
    return " ".join(output.split())


def test_policy_show_set_pin_unpin(served) -> None:
    url, store = served
    result = cli(url, "policy", "set", "mode=advise", "p95_ceiling_s=2", "min_dwell_windows=3", "change_horizon_s=86400",
                 "bounds.filebeat.queue.mem.flush.timeout=0:0.5")
    assert result.exit_code == 0, result.output
    policy = store.load_policy()
    assert (policy.mode, policy.p95_ceiling_s, policy.min_dwell_windows) == ("advise", 2.0, 3)
    assert policy.change_horizon_s == 86400.0  # a restart's price spread over a day (docs/learner.md)
    assert policy.bounds == {"filebeat.queue.mem.flush.timeout": (0.0, 0.5)}
    assert cli(url, "policy", "pin", "filebeat.output.bulk_max_size=512", "logstash.output.kafka.acks=all").exit_code == 0
    assert store.load_policy().pins == {"filebeat.output.bulk_max_size": 512, "logstash.output.kafka.acks": "all"}
    assert cli(url, "policy", "unpin", "logstash.output.kafka.acks").exit_code == 0
    assert cli(url, "policy", "set", "bounds.filebeat.queue.mem.flush.timeout=none", "p95_ceiling_s=none").exit_code == 0
    shown = json.loads(cli(url, "policy", "show").output)
    assert shown["pins"] == {"filebeat.output.bulk_max_size": 512} and shown["bounds"] == {}
    assert shown["p95_ceiling_s"] is None and shown["mode"] == "advise"


def test_policy_set_from_a_file_replaces_it(served, tmp_path: Path) -> None:
    url, store = served
    cli(url, "policy", "pin", "filebeat.backoff=0.5")
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"mode": "frozen"}))
    assert cli(url, "policy", "set", "--file", str(path)).exit_code == 0
    assert store.load_policy().mode == "frozen" and store.load_policy().pins == {}


@pytest.mark.parametrize("args,message", [
    (["policy", "set", "min_throughput_ratio=2"], "min_throughput_ratio: Input should be less than or equal to 1"),
    (["policy", "pin", "filebeat.output.bulk_max_size=0"], "an integer in [1, 65536] events"),
    (["policy", "set", "bounds.filebeat.backoff=0:100"], "bounds.filebeat.backoff"),
    (["override", "--param", "filebeat.output.bulk_max_size=0", "--reason", "r"], "an integer in [1, 65536] events"),
])
def test_refusals_name_the_field_and_the_allowed_range(served, args: list[str], message: str) -> None:
    url, store = served
    result = cli(url, *args)
    assert result.exit_code == 1 and message in flat(result.output)
    assert store.load_policy() is None and store.overrides() == []


def test_override_list_and_cancel(served) -> None:
    url, store = served
    result = cli(url, "override", "--param", "filebeat.backoff=0.25", "--param", "logstash.output.kafka.acks=all",
                 "--ttl", "10m", "--reason", "incident 9")
    assert result.exit_code == 0, result.output
    [made] = store.overrides()
    assert made.params == {"filebeat.backoff": 0.25, "logstash.output.kafka.acks": "all"} and made.reason == "incident 9"
    assert 590 < made.remaining_s() <= 600 and made.id in result.output
    assert made.id in cli(url, "overrides").output
    assert cli(url, "override", "--cancel", made.id).exit_code == 0 and store.overrides() == []
    assert cli(url, "override", "--cancel", made.id).exit_code == 1


def test_override_outside_bounds_needs_the_flag(served) -> None:
    url, store = served
    cli(url, "policy", "set", "bounds.filebeat.backoff=0.1:1")
    args = ["override", "--param", "filebeat.backoff=5", "--reason", "forced", "--ttl", "30s"]
    refused = cli(url, *args)
    assert refused.exit_code == 1 and "outside the policy's bounds" in flat(refused.output)
    assert cli(url, *args, "--override-bounds").exit_code == 0
    assert store.overrides()[0].override_bounds


def test_pause_resume_status_and_decisions(served) -> None:
    url, store = served
    assert cli(url, "pause").exit_code == 0 and store.paused()
    assert "(paused)" in cli(url, "status").output
    assert cli(url, "resume").exit_code == 0 and not store.paused()
    for window in range(3):
        store.append_decision(Decision(window=window, t_s=10.0 * window, config={}, action=Action.EXPLORE,
                                       reason=f"reason-{window}", change={"filebeat.backoff": [1.0, 0.5]},
                                       predicted={"p95_s": 0.4}, observed={"p95_s": 0.5, "throughput_ratio": 1.0}))
    shown = cli(url, "decisions", "--limit", "2").output
    assert "reason-2" in shown and "reason-1" in shown and "reason-0" not in shown and "--before 1" in shown
    page = json.loads(cli(url, "decisions", "--before", "1", "--json").output)
    assert [d["seq"] for d in page["items"]] == [0]


def test_token_errors_and_unreachable_api(served) -> None:
    url, store = served
    wrong = cli(url, "pause", token="nope")
    assert wrong.exit_code == 1 and "wrong token" in flat(wrong.output)
    missing = cli(url, "pause", token=None)
    assert missing.exit_code == 1 and "missing bearer token" in flat(missing.output)
    assert "PIPETUNE_API_TOKEN" in flat(missing.output)
    assert not store.paused()
    down = cli(f"http://127.0.0.1:{free_ports(1)[0]}", "status")
    assert down.exit_code == 1 and "cannot reach the pipetune API" in flat(down.output)


def test_override_names_the_ttl_flag_for_a_ttl_it_cannot_read(served) -> None:
    url, store = served
    result = cli(url, "override", "--param", "filebeat.backoff=0.5", "--ttl", "ten minutes", "--reason", "x")
    assert result.exit_code == 2 and "--ttl" in flat(result.output) and "10m" in flat(result.output)
    assert store.overrides() == []


def test_api_command_needs_a_token(tmp_path: Path) -> None:
    result = runner.invoke(app, ["api", "--state-dir", str(tmp_path)], env={"PIPETUNE_API_TOKEN": ""})
    assert result.exit_code == 2 and "PIPETUNE_API_TOKEN" in flat(result.output)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url).status_code == 200
    except httpx.TransportError:
        return False


def test_pipetune_api_serves_a_state_dir_on_loopback(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    port = free_ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-c", "from cli.main import app; app()", "api",
                             "--state-dir", str(tmp_path), "--port", str(port), "--token-file", str(token_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        # Until it answers, however long its imports take on a busy machine (seconds already on an idle one).
        _wait(lambda: _answers(url + "/healthz"), proc)
        result = runner.invoke(app, ["pause", "--url", url, "--token-file", str(token_file)])
        assert result.exit_code == 0, result.output
        assert StateStore(tmp_path).paused()
    finally:
        proc.terminate()
        log = proc.communicate(timeout=20)[0]
    assert "POST /pause" in log and TOKEN not in log  # requests are logged, the token never is


@pytest.mark.slow
def test_autotune_serves_the_api_from_the_daemons_process(tmp_path: Path) -> None:
    port = free_ports(1)[0]
    url = f"http://127.0.0.1:{port}"
    state = StateStore(tmp_path / "state")
    # far more windows than the test needs: it ends the run itself, so no window count can race the pause
    proc = subprocess.Popen([sys.executable, "-c", "from cli.main import app; app()", "autotune",
                             "--windows", "1000", "--window", "10", "--speed", "2", "--profile", "steady",
                             "--state-dir", str(state.dir), "--api-port", str(port)],
                            env={**os.environ, "PIPETUNE_API_TOKEN": TOKEN},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait(lambda: _answers(url + "/healthz"), proc)  # Ray starts first
        assert "pipetune_component_restarts_total" in httpx.get(url + "/metrics").text  # the daemon's own registry
        assert cli(url, "pause").exit_code == 0
        _wait(lambda: any(d["action"] == "paused" for d in state.decisions()), proc)
        proc.send_signal(signal.SIGTERM)
        log = proc.communicate(timeout=300)[0]
    finally:
        proc.kill()
    assert proc.returncode == 0, log[-3000:]
    assert TOKEN not in log


def _wait(condition: Callable[[], bool], proc: subprocess.Popen, timeout_s: float = 180.0) -> None:
    """Poll `condition` until it holds; fail at once if `proc` exits, or after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert proc.poll() is None, f"autotune exited early ({proc.returncode}): {proc.communicate()[0][-3000:]}"
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s"
        time.sleep(0.2)


def test_api_off_loopback_needs_tls_or_insecure_http(tmp_path: Path) -> None:
    env = {"PIPETUNE_API_TOKEN": "t0ken"}
    result = runner.invoke(app, ["api", "--state-dir", str(tmp_path), "--host", "127.0.1.1"], env=env)
    assert result.exit_code == 2
    assert "needs TLS: give --tls-cert and --tls-key, or accept plain HTTP with --insecure-http" in result.output
    result = runner.invoke(app, ["api", "--state-dir", str(tmp_path), "--host", "127.0.1.1", "--tls-cert",
                                 str(tmp_path / "none.pem"), "--tls-key", str(tmp_path / "none.key")], env=env)
    assert result.exit_code == 2 and "--tls-cert" in result.output and "no such file" in result.output


def test_autotune_api_off_loopback_names_its_own_flags(tmp_path: Path) -> None:
    result = runner.invoke(app, ["autotune", "--api-port", "8470", "--api-host", "10.0.0.1"],
                           env={"PIPETUNE_API_TOKEN": "t0ken"})
    assert result.exit_code == 2 and "--api-tls-cert and --api-tls-key" in result.output
    assert "--api-insecure-http" in result.output


def test_status_shows_every_nodes_clock_offset_and_warns_above_50_ms(served) -> None:
    url, store = served
    offsets = {"n1": ClockOffsetReport(offset_s=0.2, error_s=0.001, measured_at=0.0, warning="node n1: clock off"),
               "n2": ClockOffsetReport(offset_s=-0.003, error_s=0.001, measured_at=0.0)}
    store.save_status(Status(mode="auto", paused=False, clock_offsets=offsets))
    shown = flat(cli(url, "status").output)
    assert "n1 +200 ms ± 1 (WARNING: above 50 ms)" in shown and "n2 -3 ms ± 1" in shown


def test_status_lists_what_is_tuned_by_which_agent_and_what_is_held_and_why(served) -> None:
    url, store = served
    space = TunedSpaceReport(tuned={"filebeat.backoff": ["edge-1/filebeat"],
                                    "filebeat.scan_frequency": ["edge-1/filebeat"]},
                             held={"kafka.consumer.fetch.max.wait.ms": "no agent of pool default manages it"},
                             managed=["filebeat.backoff", "filebeat.scan_frequency", "filebeat.max_backoff"],
                             ceilings={"filebeat.max_backoff": 4.5})
    store.save_status(Status(mode="auto", paused=False, tuned_space=space,
                             current_config={"kafka.consumer.fetch.max.wait.ms": 250}))
    shown = " ".join(cli(url, "status").output.replace("│", " ").split())  # a cell's wrapped lines joined
    assert "tuned filebeat.backoff, filebeat.scan_frequency by edge-1/filebeat" in shown
    assert "held kafka.consumer.fetch.max.wait.ms 250 (no agent of pool default manages it)" in shown
    assert "at most filebeat.max_backoff 4.5 (as the run started: a lull's events wait them out)" in shown


def test_status_shows_what_the_last_window_and_the_incumbent_cost(served) -> None:
    url, store = served
    window = Cost(cpu_cores={"filebeat": 0.412, "broker-1": 0.05}, busiest_cpu_share=0.31,
                  produce_requests_per_s=2841.0, kafka_bytes_in_per_s=3.2 * 2**20)
    before = Cost(cpu_cores={"filebeat": 0.06})  # brokers that export nothing
    observed = {"p95_s": 0.009, "throughput_ratio": 1.0, **window.model_dump()}
    last = Decision(window=3, t_s=120.0, config={}, observed=observed, action=Action.HOLD, reason="converged")
    store.save_status(Status(mode="auto", paused=False, last_decision=last,
                             incumbent=IncumbentReport(config={}, p95_s=0.072, offered_eps=800.0, cost=before)))
    assert httpx.get(f"{url}/status").json()["incumbent"]["cost"]["cpu_cores"] == {"filebeat": 0.06}
    shown = " ".join(cli(url, "status").output.replace("│", " ").split())
    assert ("last window cost broker-1 5.0%, filebeat 41.2% of a core; busiest node 31% of its cores; into Kafka "
            "2841 Produce req/s, 3.2 MiB/s") in shown
    assert "incumbent cost filebeat 6.0% of a core; into Kafka: not measured" in shown


@pytest.fixture
def served_pools(tmp_path: Path) -> Iterator[tuple[str, dict[str, StateStore]]]:
    """An API over a daemon's directory with two pools, edge (two nodes) and core (one)."""
    dirs = plan_pool_dirs(tmp_path / "state", {"edge": ["node-1", "node-2"], "core": ["node-3"]})
    save_pool_dirs(tmp_path / "state", dirs)
    port = free_ports(1)[0]
    server = serve_in_thread(create_app(StateStore(tmp_path / "state"), TOKEN), "127.0.0.1", port)
    yield f"http://127.0.0.1:{port}", {d.name: StateStore(d.directory) for d in dirs}
    server.should_exit = True


def test_pool_steers_one_pool_only(served_pools) -> None:
    url, stores = served_pools
    assert cli(url, "pause", "--pool", "core").exit_code == 0
    assert stores["core"].paused() and not stores["edge"].paused()
    assert cli(url, "policy", "pin", "filebeat.backoff=0.5", "--pool", "edge").exit_code == 0
    assert stores["edge"].load_policy().pins == {"filebeat.backoff": 0.5} and stores["core"].load_policy() is None
    made = cli(url, "override", "--pool", "edge", "--param", "filebeat.output.bulk_max_size=256", "--reason", "x", "--ttl", "5m")
    assert made.exit_code == 0 and len(stores["edge"].overrides()) == 1 and stores["core"].overrides() == []
    assert "bulk_max_size" in cli(url, "overrides", "--pool", "edge").output
    assert json.loads(cli(url, "decisions", "--json", "--pool", "core").output)["items"] == []


def test_an_unknown_pool_names_the_known_ones(served_pools) -> None:
    url, stores = served_pools
    result = cli(url, "pause", "--pool", "cache")
    assert result.exit_code == 1 and "no pool 'cache'; pools: edge, core" in flat(result.output)
    unnamed = cli(url, "pause")  # two pools, neither called default: the daemon says which there are
    assert unnamed.exit_code == 1 and "edge, core" in flat(unnamed.output)
    assert not any(s.paused() for s in stores.values())


def test_status_shows_every_pool_its_nodes_and_the_version_each_runs(served_pools) -> None:
    url, stores = served_pools
    stores["edge"].save_status(Status(pipeline="edge", mode="auto", paused=False, window=7,
                                      nodes={"node-1": {"filebeat": 4}, "node-2": None}))
    stores["core"].set_paused(True)
    shown = flat(cli(url, "status").output)
    assert "pipetune pool edge" in shown and "pipetune pool core" in shown
    assert "node-1: filebeat v4; node-2: agent not answering" in shown
    assert "node-3: not read yet" in shown and "(paused)" in shown
    one = flat(cli(url, "status", "--pool", "core").output)
    assert "pipetune pool core" in one and "pipetune pool edge" not in one
    listed = json.loads(cli(url, "status", "--json").output)
    assert [p["name"] for p in listed] == ["edge", "core"] and listed[0]["status"]["window"] == 7
