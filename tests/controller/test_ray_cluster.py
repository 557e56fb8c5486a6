"""The learners on a two-node Ray cluster started as an operator would (`ray start --head`, then
`ray start --address`) on this machine, when the second node crashes (its raylet killed, not stopped:
Ray learns it is dead only from missed heartbeats): pool actors and scoring tasks land on both nodes,
the actors of the crashed node are built again on the first and told their history, and every pool's
next suggestion is still made. (tests/controller/test_ray_learner.py stops a node in an orderly way.)"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _raylet_under(pid: int) -> int:
    """The raylet among `pid`'s descendants (the node `ray start --block` runs)."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit():
                parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(proc.name))
        except (OSError, ValueError):
            continue
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            try:
                if b"raylet/raylet" in Path(f"/proc/{child}/cmdline").read_bytes():
                    found.append(child)
            except OSError:
                continue
    assert len(found) == 1, f"expected the node's raylet under pid {pid}, found {found}"
    return found[0]


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


def test_learners_spread_over_two_ray_nodes_and_survive_one_crashing(two_node_cluster, tmp_path):
    address, env, worker = two_node_cluster
    driver = subprocess.Popen([sys.executable, "-m", "tests.controller.ray_cluster_driver", address], cwd=ROOT, env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(tmp_path / "driver.log", "w"),
                              text=True)
    try:
        placed = _line(driver)
        assert placed, f"the driver ended early: {(tmp_path / 'driver.log').read_text()[-2000:]}"
        assert len(set(placed["learners"])) == 2, "pool actors on both Ray nodes"
        assert len(set(placed["tasks"])) == 2, "scoring tasks on both Ray nodes"
        os.kill(_raylet_under(worker.pid), signal.SIGKILL)
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
