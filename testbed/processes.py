"""Plain background processes with pid files: start, check, stop exactly what was started.

A pid file records the pid and the kernel's start time of the process, so `stop` never signals an
unrelated process that reused the pid. Each process leads its own session; `stop` signals that whole
process group, so nothing it spawned is left behind.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from agents.process_stats import start_ticks


class TestbedError(RuntimeError):
    """Something the testbed cannot do, said plainly (busy port, a component that would not start)."""


@dataclass(frozen=True)
class Service:
    """One component process: how to start it and where its pid file and log go."""

    name: str
    argv: tuple[str, ...]
    run_dir: Path
    env: dict[str, str] | None = None
    pid_path: Path | None = None  # a pid file kept by someone else (the agent's, for the Filebeat it runs)

    @property
    def pid_file(self) -> Path:
        return self.pid_path or pid_file(self.run_dir, self.name)

    @property
    def log_file(self) -> Path:
        return self.run_dir / "logs" / f"{self.name}.out"


def pid_file(run_dir: Path, name: str) -> Path:
    """Where the pid of the named service of a run dir is recorded."""
    return run_dir / "pids" / f"{name}.json"


def check_port_free(port: int, field: str, host: str = "127.0.0.1") -> None:
    """Raise `TestbedError` naming the pipeline field when `host`:`port` is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            raise TestbedError(f"port {port} ({field}) is already in use on {host}; "
                               f"stop what holds it or choose another {field} in the pipeline file") from None


def running_pid(service: Service) -> int | None:
    """The pid of the service's process if the one we started is still alive."""
    try:
        record = json.loads(service.pid_file.read_text())
    except (OSError, ValueError):
        return None
    pid = int(record["pid"])
    ticks = start_ticks(pid)
    return pid if ticks is not None and ticks == record["start_ticks"] else None


def start(service: Service) -> int:
    """Start the service in its own session, logging to its log file; returns the pid."""
    if running_pid(service) is not None:
        raise TestbedError(f"{service.name} is already running (pid file {service.pid_file})")
    service.pid_file.parent.mkdir(parents=True, exist_ok=True)
    service.log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(service.log_file, "ab") as log:
        proc = subprocess.Popen(service.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=service.run_dir, env=service.env, start_new_session=True)
    record = {"pid": proc.pid, "start_ticks": start_ticks(proc.pid), "argv": list(service.argv)}
    service.pid_file.write_text(json.dumps(record))
    return proc.pid


def wait_ready(service: Service, ready: Callable[[], bool], timeout_s: float) -> None:
    """Poll `ready` until it holds; fail with the log's tail if the process dies or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if running_pid(service) is None:
            raise TestbedError(f"{service.name} exited during start-up; last lines of {service.log_file}:\n"
                               + log_tail(service))
        try:
            if ready():
                return
        except Exception:  # not listening yet: any client error means "try again"
            pass
        time.sleep(0.2)
    raise TestbedError(f"{service.name} was not ready after {timeout_s:.0f} s; last lines of "
                       f"{service.log_file}:\n" + log_tail(service))


def log_tail(service: Service, lines: int = 15) -> str:
    try:
        return "\n".join(service.log_file.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop(service: Service, timeout_s: float = 15.0) -> bool:
    """SIGTERM the service's process group, SIGKILL it after `timeout_s`; True if it had been running.

    It waits for the process it signalled, not for whatever the pid file names: a supervisor (the node
    agent) may already have started a new one, whose pid file it leaves in place.
    """
    pid = running_pid(service)
    if pid is None:
        service.pid_file.unlink(missing_ok=True)
        return False
    _signal_group(pid, signal.SIGTERM)
    if not _group_gone(pid, timeout_s):
        _signal_group(pid, signal.SIGKILL)
        _group_gone(pid, timeout_s)
    if _recorded_pid(service) == pid:
        service.pid_file.unlink(missing_ok=True)
    return True


def _recorded_pid(service: Service) -> int | None:
    try:
        return int(json.loads(service.pid_file.read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def _group_gone(pgid: int, timeout_s: float) -> bool:
    """Whether every process of the group `pgid` (the service and its children) ended within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while _group_members(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _group_members(pgid: int) -> list[int]:
    """The live processes of group `pgid`; a zombie has ended and only waits for its parent to reap it."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, _ppid, group = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if state != "Z" and int(group) == pgid:
            members.append(int(entry.name))
    return members


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
