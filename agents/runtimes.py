"""Runtimes: how the agent restarts or signals a component, as a local process or a Docker container."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path
from typing import Sequence

import docker
import docker.errors

from agents.adapter import atomic_write
from agents.process_stats import start_ticks

STARTED_AS = "PIPETUNE_STARTED_AS"  # the environment variable naming a component process the agent started


def started_as(token: str) -> int | None:
    """The live session leader this agent started with `token` in its environment (None: there is none)."""
    marker = f"{STARTED_AS}={token}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            pid = int(entry.name)
            if marker in environ and os.getsid(pid) == pid and start_ticks(pid) is not None:
                return pid
        except (OSError, ProcessLookupError):
            continue  # gone, or not ours to read
    return None


class ProcessRuntime:
    """A component process the agent starts itself, in its own session, recorded in a pid file.

    The pid file holds the kernel's start time as well as the pid, so a restarted agent adopts the
    process it started before (and never signals an unrelated one that reused the pid). It is written before the
    process starts as well, naming a token the process gets in its environment (`STARTED_AS`): an agent killed
    between starting it and recording its pid finds it by the token, instead of starting a second one beside it
    (which then failed: the first held its HTTP port).
    """

    def __init__(self, name: str, argv: Sequence[str], run_dir: Path, *, reload_signal: str | None = None,
                 stop_timeout_s: float = 15.0, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = tuple(argv)
        self.run_dir = run_dir
        self.reload_signal = reload_signal
        self.stop_timeout_s = stop_timeout_s
        self.env = env
        self._child: subprocess.Popen | None = None
        run_dir.mkdir(parents=True, exist_ok=True)

    @property
    def pid_file(self) -> Path:
        return self.run_dir / f"{self.name}.pid.json"

    @property
    def log_file(self) -> Path:
        return self.run_dir / f"{self.name}.out"

    def pid(self) -> int | None:
        """The component's pid while the process this runtime started is alive."""
        if self._child is not None:
            self._child.poll()  # reap our own child if it died, so it does not linger as a zombie
        try:
            record = json.loads(self.pid_file.read_text())
        except (OSError, ValueError):
            return None
        if "pid" not in record:  # started, never recorded: the agent was killed in between
            return started_as(record["token"])
        pid = int(record["pid"])
        ticks = start_ticks(pid)
        return pid if ticks is not None and ticks == record["start_ticks"] else None

    def running(self) -> bool:
        return self.pid() is not None

    def reload(self) -> None:
        """Send the reload signal (Logstash: SIGHUP); components that watch their files need none."""
        pid = self.pid()
        if self.reload_signal and pid is not None:
            os.kill(pid, signal.Signals[self.reload_signal])

    def restart(self) -> None:
        """Stop the process if it runs (SIGTERM, SIGKILL after the timeout), then start it again.

        A pid file that cannot be written (a full disk: `DiskFull`) before the start leaves nothing started; after
        it, the process is killed again at once: one the agent cannot find would run on unseen, beside the next one
        it starts."""
        self.stop()
        token = secrets.token_hex(8)
        atomic_write(self.pid_file, json.dumps({"token": token, "argv": list(self.argv)}))
        env = dict(os.environ if self.env is None else self.env) | {STARTED_AS: token}
        with open(self.log_file, "ab") as log:
            self._child = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, cwd=self.run_dir, env=env,
                                           start_new_session=True)
        record = {"pid": self._child.pid, "start_ticks": start_ticks(self._child.pid), "argv": list(self.argv),
                  "token": token}
        try:
            atomic_write(self.pid_file, json.dumps(record))
        except BaseException:
            os.killpg(self._child.pid, signal.SIGKILL)
            self._child.wait()
            raise

    def stop(self) -> None:
        pid = self.pid()
        if pid is None:
            return
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        while self.pid() is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.pid() is not None:
            os.killpg(pid, signal.SIGKILL)
            while self.pid() is not None:
                time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)

    def describe(self) -> dict[str, object]:
        return {"kind": "process", "pid": self.pid(), "argv": list(self.argv), "log": str(self.log_file)}


class DockerRuntime:
    """A container (made elsewhere, its config directory bind-mounted) that the docker SDK restarts or signals."""

    def __init__(self, client: docker.DockerClient, container: str, *, reload_signal: str | None = None,
                 stop_timeout_s: int = 15) -> None:
        self.client = client
        self.container = container
        self.reload_signal = reload_signal
        self.stop_timeout_s = stop_timeout_s

    def _get(self):
        return self.client.containers.get(self.container)

    def running(self) -> bool:
        try:
            return self._get().status == "running"
        except docker.errors.NotFound:
            return False

    def reload(self) -> None:
        if self.reload_signal and self.running():
            self._get().kill(signal=self.reload_signal)

    def stop(self) -> None:
        """Stop the container if it runs (docker sends SIGTERM, SIGKILL after the timeout)."""
        container = self._get()
        if container.status == "running":
            container.stop(timeout=self.stop_timeout_s)

    def restart(self) -> None:
        """Restart the container (docker stops it with SIGTERM, SIGKILL after the timeout), or start it."""
        container = self._get()
        if container.status == "running":
            container.restart(timeout=self.stop_timeout_s)
        else:
            container.start()

    def describe(self) -> dict[str, object]:
        try:
            container = self._get()
        except docker.errors.NotFound:
            return {"kind": "docker", "container": self.container, "status": "missing"}
        return {"kind": "docker", "container": self.container, "status": container.status,
                "id": container.short_id, "image": container.attrs["Config"]["Image"]}
