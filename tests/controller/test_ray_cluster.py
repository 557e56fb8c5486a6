"""The learners on a two-node Ray cluster started as an operator would (`ray start --head`, then
`ray start --address`) on this machine, when the second node crashes (its raylet killed, not stopped:
Ray learns it is dead only from missed heartbeats): pool actors and scoring tasks land on both nodes,
the actors of the crashed node are built again on the first and told their history, and every pool's
next suggestion is still made. (tests/controller/test_ray_learner.py stops a node in an orderly way.)"""

from __future__ import annotations

import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import free_ports

pytestmark = pytest.mark.slow
RAY = str(Path(sys.executable).with_name("ray"))
ROOT = Path(__file__).resolve().parents[2]


def _pids_of(marker: str) -> list[int]:
    """Processes whose command line holds `marker` (this cluster's temp dir, or its second node's resource)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker.encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@pytest.fixture
def cluster() -> Iterator[tuple[str, dict]]:
    """The head's address and the environment that reaches it; every process of the cluster is killed after the test (never `ray stop`, which
    stops every Ray on the machine)."""
    (port,) = free_ports(1)
    temp = Path(tempfile.mkdtemp(prefix="ptray-"))  # short: Ray's unix sockets live under it (108-byte paths)
    common = ["--num-cpus", "1", "--disable-usage-stats"]
    # the cluster's own token, which every node and the driver must present (Ray's token authentication)
    env = {**os.environ, "RAY_TMPDIR": str(temp), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    try:
        subprocess.run([RAY, "start", "--head", "--port", str(port), "--include-dashboard", "false",
                        "--temp-dir", str(temp), *common], check=True, env=env, capture_output=True, timeout=120)
        subprocess.run([RAY, "start", "--address", f"127.0.0.1:{port}", "--resources", '{"second_node": 1}',
                        *common], check=True, env=env, capture_output=True, timeout=120)
        yield f"127.0.0.1:{port}", env
    finally:
        for pid in _pids_of(str(temp)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(temp, ignore_errors=True)


def _second_raylet() -> int:
    raylets = [pid for pid in _pids_of("second_node,1") if b"raylet" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(raylets) == 1, f"expected the second node's raylet, found {raylets}"
    return raylets[0]


def _line(driver: subprocess.Popen, timeout_s: float = 240.0) -> dict:
    """The driver's next `RESULT` line ({} when it ended or said none within `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while select.select([driver.stdout], [], [], max(deadline - time.monotonic(), 0))[0]:
        line = driver.stdout.readline()
        if not line:
            return {}  # the driver ended
        if line.startswith("RESULT "):
            return json.loads(line.removeprefix("RESULT "))
    return {}


def test_learners_spread_over_two_ray_nodes_and_survive_one_crashing(cluster, tmp_path):
    address, env = cluster
    driver = subprocess.Popen([sys.executable, "-m", "tests.controller.ray_cluster_driver", address], cwd=ROOT, env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(tmp_path / "driver.log", "w"),
                              text=True)
    try:
        placed = _line(driver)
        assert placed, f"the driver ended early: {(tmp_path / 'driver.log').read_text()[-2000:]}"
        assert len(set(placed["learners"])) == 2, "pool actors on both Ray nodes"
        assert len(set(placed["tasks"])) == 2, "scoring tasks on both Ray nodes"
        os.kill(_second_raylet(), signal.SIGKILL)
        driver.stdin.write("go\n")
        driver.stdin.flush()
        after = _line(driver)
        assert after, f"the driver ended early: {(tmp_path / 'driver.log').read_text()[-2000:]}"
        assert all(after["suggested"]), "every pool's suggestion made"
        survivor = set(placed["learners"]) - {node for node, restored in zip(placed["learners"], after["restored"])
                                              if restored}
        assert len(survivor) == 1 and set(after["learners"]) == survivor, "all actors now on the node still up"
        moved = [restored for restored in after["restored"] if restored]
        assert moved and all(restored == 3 for restored in moved), "each moved actor told its 3 windows again"
    finally:
        driver.kill()
        driver.wait(30)
