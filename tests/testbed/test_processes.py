"""Background processes: started in their own group, stopped with everything they spawned, never a stranger."""

import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

from testbed import processes
from testbed.processes import Service


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_stop_ends_the_process_and_its_children(tmp_path):
    child_pid_file = tmp_path / "child.pid"
    service = Service("sleeper", ("sh", "-c", f"sleep 300 & echo $! > {child_pid_file}; wait"), tmp_path)
    pid = processes.start(service)
    while not child_pid_file.exists() or not child_pid_file.read_text().strip():
        time.sleep(0.05)
    child = int(child_pid_file.read_text())
    assert processes.running_pid(service) == pid
    assert processes.stop(service)
    assert not _alive(pid) and not _alive(child)
    assert processes.running_pid(service) is None
    assert not service.pid_file.exists()


def test_a_reused_pid_is_never_signalled(tmp_path):
    stranger = subprocess.Popen(["sleep", "300"])
    try:
        service = Service("gone", ("true",), tmp_path)
        service.pid_file.parent.mkdir(parents=True)
        service.pid_file.write_text(json.dumps({"pid": stranger.pid, "start_ticks": 1, "argv": ["true"]}))
        assert processes.running_pid(service) is None
        assert not processes.stop(service)
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_busy_port_names_the_field():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(processes.TestbedError, match=f"port {port} \\(kafka.port\\) is already in use"):
            processes.check_port_free(port, "kafka.port")


def test_a_process_that_dies_at_start_up_reports_its_log(tmp_path):
    service = Service("broken", ("sh", "-c", "echo cannot bind >&2; exit 3"), tmp_path)
    processes.start(service)
    with pytest.raises(processes.TestbedError, match="(?s)broken exited during start-up.*cannot bind"):
        processes.wait_ready(service, lambda: False, timeout_s=10)


def test_stop_waits_for_the_process_it_signalled_not_for_one_a_supervisor_started_since(tmp_path):
    service = Service("supervised", ("sleep", "300"), tmp_path)
    first = processes.start(service)
    replacements: list[int] = []

    def supervise() -> None:  # as the node agent does: the process is gone, start another in its place
        while _alive(first):
            time.sleep(0.01)
        service.pid_file.unlink(missing_ok=True)
        replacements.append(processes.start(service))

    supervisor = threading.Thread(target=supervise)
    supervisor.start()
    try:
        assert processes.stop(service)  # returns although the pid file may name a live process again
        supervisor.join(timeout=30)
        assert not _alive(first) and _alive(replacements[0])
    finally:
        for pid in replacements:
            os.killpg(pid, signal.SIGKILL)
