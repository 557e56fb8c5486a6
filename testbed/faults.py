"""Fault injections of issue 41 shared by the fault tests and `bench.faults`: a small filesystem mounted and filled
(fault 3), the bad lines and agent requests of fault 7, the node's agent killed between writing a version and its
health check (fault 4), and the sockets a process tree listens on (the listening rule, fault 6)."""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import signal
import subprocess
import time
from pathlib import Path


class CannotMount(RuntimeError):
    """This user or machine cannot mount a tmpfs (not root, or no mount namespace to do it in)."""


def mount_small_disk(path: Path, size: str) -> Path:
    """A tmpfs of `size` (`mount`'s form: "1m") mounted at `path`, made if missing; `CannotMount` saying why."""
    if os.geteuid() != 0:
        raise CannotMount("a full disk is a tmpfs mounted for it, which needs root")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise CannotMount(f"cannot mount a tmpfs at {path}: {done.stderr.strip()}")
    return path


def unmount(path: Path) -> None:
    """`path` unmounted; detached if a process is still inside (it goes once that process ends)."""
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], check=True)


BALLAST = ".ballast"


def fill(directory: Path) -> Path:
    """Fill the filesystem of `directory` to its last byte with a ballast file; delete it to give the room back."""
    ballast = directory / BALLAST
    with open(ballast, "wb", buffering=0) as out:
        for chunk in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    out.write(b"\0" * chunk)
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
    if os.statvfs(directory).f_bavail != 0:
        raise RuntimeError(f"{directory}: room left after filling it")
    return ballast


# Fault 7: lines a harvested file should never hold, each counted and skipped by the probe or Filebeat.
BAD_LINES = [b'{"request_id": "untimed", "status": 200}\n',  # JSON without the event time
             b"\xff\xfe\xfd not UTF-8 \xc3\x28\n",
             bytes(range(1, 10)) + bytes(range(11, 256)) + b"\n",  # binary garbage: every byte but \0 and \n
             b"x" * (1 << 20) + b"\n"]  # 1 MiB

# Fault 7: bodies of `PUT /components/filebeat/config` that no version or parameter can hold, each once a 500 (found
# by fuzzing the agent's API), and the field its 422 must name.
BAD_CONFIG_BODIES = [
    ('{"version": 1%s, "params": {}}' % ("0" * 300), ["body", "version"]),  # no file name that long
    ('{"version": 9, "params": {"filebeat.backoff": 1%s}}' % ("0" * 400), ["body", "params", "filebeat.backoff"]),
    ('{"version": 9, "params": {"filebeat.backoff": 1e400}}', ["body", "params", "filebeat.backoff"]),
    ('{"version": 9, "params": {"filebeat.backoff": NaN}}', ["body", "params", "filebeat.backoff"]),
]


# Fault 4: the agent killed between writing a version and the component's health check.


def pending_file(state_dir: Path, component: str = "filebeat") -> Path:
    """Where the agent records the change it is making before it writes any file (gone once the change ended)."""
    return state_dir / component / "pending"


def kill_when_pending(pid: int, config: Path, before: str, pending: Path, timeout_s: float, poll_s: float = 0.005
                      ) -> float | None:
    """SIGKILL `pid` as soon as its change is under way and its files written (`pending` exists and `config` no
    longer holds `before`), before the change ends; the time it was killed, or None if the change did not come (or
    ended unseen) within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pending.exists():
            try:
                written = config.read_text() != before
            except OSError:  # the file being replaced this instant
                written = False
            if written:
                os.kill(pid, signal.SIGKILL)
                return time.time()
        time.sleep(poll_s)
    return None


def processes_with(argument: str) -> list[int]:
    """The pids of every process with `argument` among its command line's (an orphan a killed agent left, found by
    the config file it runs on)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if argument in cmdline.read_bytes().decode(errors="replace").split("\0"):
                found.append(int(cmdline.parent.name))
        except OSError:  # it ended meanwhile
            continue
    return found


# Fault 6: the sockets a process tree leaves open to others.

_SS_USER = re.compile(r'\("([^"]*)",pid=(\d+),')


def process_tree(root: int) -> list[int]:
    """`root` and every process it started, and they started (from each thread's `children` in /proc)."""
    tree = [root]
    for pid in tree:
        for children in Path(f"/proc/{pid}/task").glob("*/children"):
            try:
                tree += [int(child) for child in children.read_text().split()]
            except OSError:  # it ended meanwhile
                continue
    return tree


def listeners(pids: list[int]) -> dict[tuple[str, int], str]:
    """Where the processes `pids` are open to others (TCP listening, UDP unconnected), as `ss` lists this network
    namespace: (host, port) -> the name of the process."""
    listed = subprocess.run(["ss", "-H", "-l", "-t", "-u", "-n", "-p"], capture_output=True, text=True, check=True)
    wanted, found = set(pids), {}
    for line in listed.stdout.splitlines():
        fields = line.split()
        if len(fields) < 7:
            continue  # no process named: not one this user can see
        host, _, port = fields[4].rpartition(":")
        host = host.strip("[]").removeprefix("::ffff:").split("%")[0]
        host = "0.0.0.0" if host == "*" else host
        found |= {(host, int(port)): name for name, pid in _SS_USER.findall(fields[6]) if int(pid) in wanted}
    return found


def off_loopback(seen: dict[tuple[str, int], str]) -> list[str]:
    """`seen`'s sockets another machine could reach, as "name on host:port": any address but 127.0.0.0/8 and ::1.
    (The testbed stands its hosts on other 127/8 addresses, which the listening rule treats as another host's: on
    this machine they are its loopback still.)"""
    return sorted(f"{name} on {host}:{port}" for (host, port), name in seen.items()
                  if not ipaddress.ip_address(host).is_loopback)
