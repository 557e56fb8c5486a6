"""The one off-loopback rule (`models.listening`) the agent and the REST API share, and a whole `autotune` run
(its REST API and its local Ray) listening nowhere but on loopback."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller.state import StateStore
from models.listening import ListenFlags, decide_listening, is_loopback
from testbed.faults import listeners, process_tree
from tests.conftest import free_ports


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_loopback_is_served_as_plain_http(host):
    assert decide_listening(host, None, None, False).action == "serve"


@pytest.mark.parametrize("host", ["127.0.1.1", "0.0.0.0", "10.0.0.5", "node1.example"])
def test_off_loopback_needs_tls_or_the_insecure_flag(host):
    refused = decide_listening(host, None, None, False)
    assert refused.action == "refuse" and "--tls-cert" in refused.message and "--insecure-http" in refused.message
    assert decide_listening(host, None, None, True).action == "warn"
    served = decide_listening(host, Path("c.pem"), Path("k.pem"), False)
    assert (served.action, served.scheme) == ("serve", "https")


def test_half_a_tls_pair_or_tls_with_insecure_is_refused_naming_the_flags():
    flags = ListenFlags("--api-tls-cert", "--api-tls-key", "--api-insecure-http")
    half = decide_listening("x", Path("c"), None, False, flags)
    assert "--api-tls-cert and --api-tls-key go together" in half.message
    assert decide_listening("x", Path("c"), Path("k"), True, flags).action == "refuse"


@pytest.mark.slow
def test_autotune_with_its_api_and_local_ray_listens_on_loopback_only(tmp_path):
    port = free_ports(1)[0]
    state = StateStore(tmp_path / "state")
    proc = subprocess.Popen([sys.executable, "-c", "from cli.main import app; app()", "autotune",
                             "--windows", "1000", "--window", "10", "--speed", "2", "--state-dir", str(state.dir),
                             "--api-port", str(port)], env={**os.environ, "PIPETUNE_API_TOKEN": "listening-token"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict[tuple[str, int], str] = {}
    try:
        deadline = time.monotonic() + 240
        while len(state.decisions()) < 2:  # Ray up, the learner's actor and tasks run, the API served
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "no two decisions within 240 s"
            time.sleep(0.5)
        for _ in range(5):
            seen |= listeners(process_tree(proc.pid))  # the one listing, bench.faults' too
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=120)
        finally:
            proc.kill()
    assert ("127.0.0.1", port) in seen  # the listing reaches the API ...
    assert {"gcs_server", "raylet"} <= set(seen.values())  # ... and Ray's processes
    off_loopback = sorted(f"{name} on {host}:{at}" for (host, at), name in seen.items() if not is_loopback(host))
    assert not off_loopback, "listening off loopback: " + ", ".join(off_loopback)
