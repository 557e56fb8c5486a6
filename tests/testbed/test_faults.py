"""testbed.faults: the agent killed only once its change has written the files, and the listing of what a process
tree listens on, off loopback or not."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

from testbed.faults import kill_when_pending, listeners, off_loopback, process_tree


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "600"])


def test_a_change_begun_but_not_yet_written_is_not_killed(tmp_path: Path):
    config, pending = tmp_path / "filebeat.yml", tmp_path / "pending"
    config.write_text("version 1\n")
    pending.write_text("{}")  # the change recorded, its files not written yet
    agent = _sleeper()
    try:
        assert kill_when_pending(agent.pid, config, config.read_text(), pending, timeout_s=0.3) is None
        assert agent.poll() is None
    finally:
        agent.kill()
        agent.wait()


def test_the_agent_is_killed_once_its_change_has_written_the_files(tmp_path: Path):
    config, pending = tmp_path / "filebeat.yml", tmp_path / "pending"
    config.write_text("version 1\n")
    agent = _sleeper()
    killed: list[float | None] = []
    watch = threading.Thread(target=lambda: killed.append(
        kill_when_pending(agent.pid, config, config.read_text(), pending, timeout_s=30)))
    watch.start()
    config.write_text("version 2\n")  # written without a change under way (the operator's hand): not the moment
    config.write_text("version 1\n")
    pending.write_text("{}")
    config.write_text("version 2\n")
    watch.join()
    assert killed[0] is not None and agent.wait(10) == -9


def test_a_child_listening_off_loopback_is_found_and_one_on_loopback_is_not_counted(tmp_path: Path):
    script = tmp_path / "listen.py"
    script.write_text("import socket, sys, time\n"
                      "for host in ('127.0.0.1', '127.0.2.9', '0.0.0.0'):\n"
                      "    s = socket.socket(); s.bind((host, 0)); s.listen(); globals()[host] = s\n"
                      "print('ready', flush=True); time.sleep(600)\n")
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        assert child.pid in process_tree(os.getpid())
        seen = listeners(process_tree(os.getpid()))
        mine = {(host, port): name for (host, port), name in seen.items() if host in ("127.0.2.9", "0.0.0.0")}
        assert len(mine) == 2 and len(set(mine.values())) == 1  # both the child's
        [(_, port)] = [key for key in mine if key[0] == "0.0.0.0"]
        # another 127/8 address is this machine's loopback still; every interface is not
        assert off_loopback(mine) == [f"{mine[('0.0.0.0', port)]} on 0.0.0.0:{port}"]
    finally:
        child.kill()
        child.wait()
    with socket.socket() as mine:  # this process's own, not listening: never listed
        mine.bind(("0.0.0.0", 0))
        assert ("0.0.0.0", mine.getsockname()[1]) not in listeners([os.getpid()])
