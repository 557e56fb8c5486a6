"""bench.peers: the ramp's target curve and its error measure, and a real side by side on loopback —
k6 and `pipetune replay --http` into one nginx, each one's requests in nginx's JSON log."""

import numpy as np
import pytest

from bench.peers import k6_constant, nginx, ramp_error, run_k6, run_replay, target_per_second
from testbed.install import install_peers


def test_the_target_curve_integrates_the_ramp_per_second():
    target = target_per_second(((2, 100), (3, 100), (1, 0)))
    assert target == pytest.approx([25, 75, 100, 100, 100, 50], abs=1e-6)  # 0->100 over 2 s, hold, 100->0 in 1 s


def test_a_run_that_follows_the_plan_scores_zero_whatever_its_clock():
    target = np.array([10.0, 20.0, 20.0])
    # Evenly spaced within each second, on a clock 1.7e9 s and 0.37 s away from the plan's.
    stamps = np.concatenate([k + (np.arange(n) + 0.5) / n for k, n in enumerate((10, 20, 20))]) + 1.7e9 + 0.37
    mae, counts = ramp_error(stamps, target)
    assert mae == 0 and counts.tolist() == [10, 20, 20]
    assert ramp_error(stamps[stamps < 1.7e9 + 2.37], target)[0] == pytest.approx(20 / 3)  # the last second missing


@pytest.mark.slow
def test_k6_and_the_replay_side_by_side_into_one_nginx(tmp_path):
    peers = install_peers()
    with nginx(peers.nginx, tmp_path / "nginx") as target:
        k6 = run_k6(peers.k6, target.url, k6_constant(20, 3), tmp_path / "k6")
        replay = run_replay(["--rate", "20", "--duration", "3", "--http", target.url, "--run-id", "smoke"],
                            tmp_path, "pipetune")
    lines = target.lines()  # complete: nginx has stopped and written its buffered log
    by_k6 = [line for line in lines if line["request_id"].startswith("k6-")]
    by_replay = [line for line in lines if line["request_id"].startswith("smoke-")]
    assert len(by_k6) + len(by_replay) == len(lines)
    assert k6.requests > 0 and len(by_k6) == k6.requests
    assert all("k6/" in line["user_agent"] and line["uri"] == "/k6" for line in by_k6)
    assert replay.summary["delivered"] == 60 and replay.measured.returncode == 0
    assert sorted(line["request_id"] for line in by_replay) == [f"smoke-{i:08d}" for i in range(60)]
    assert all(line["status"] == 204 and line["msec"] > 1.7e9 for line in lines)
    assert k6.measured.cpu_s > 0 and replay.measured.cpu_s > 0
