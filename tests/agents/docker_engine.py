"""A private Docker engine for this machine: Debian's `docker.io` installed once, `dockerd` run as a
plain process on its own socket (no iptables, no bridge, vfs storage), as docs/testbed.md measured.

No image registry is reachable here, so images come from `docker import` of a root filesystem tarball.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import docker

from testbed.install import install_debian_packages

class DockerEngineError(RuntimeError):
    """dockerd cannot be started; the message says why and where its log is."""


def ensure_docker_packages() -> str:
    """The path of `dockerd`, installing Debian's docker.io (and busybox-static for images) when missing."""
    install_debian_packages(("busybox-static",), "busybox", "to build container images")
    return str(install_debian_packages(("docker.io",), "dockerd", "for the Docker runtime"))


@dataclass
class DockerEngine:
    """A running dockerd of ours; `stop()` ends exactly that process."""

    socket: Path
    process: subprocess.Popen
    exec_root: Path

    @property
    def base_url(self) -> str:
        return f"unix://{self.socket}"

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.base_url, timeout=60)

    def stop(self, timeout_s: float = 20.0) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        # dockerd leaves its network namespace mounted under the exec root after it exits.
        for netns in self.exec_root.glob("netns/*"):
            subprocess.run(["umount", str(netns)], capture_output=True)
        shutil.rmtree(self.exec_root, ignore_errors=True)


def start_engine(root: Path, timeout_s: float = 30.0) -> DockerEngine:
    """Start dockerd with its socket, data and exec roots under `root`; wait until it answers."""
    dockerd = ensure_docker_packages()
    root.mkdir(parents=True, exist_ok=True)
    # The unix socket path must stay short (108 bytes), so the exec root lives under /tmp.
    exec_root = Path(f"/tmp/pipetune-docker-{os.getpid()}-{int(time.time())}")
    sock = root / "docker.sock"
    log = open(root / "dockerd.log", "ab")
    argv = [dockerd, "--iptables=false", "--ip6tables=false", "--bridge=none", "--storage-driver=vfs",
            "-H", f"unix://{sock}", f"--data-root={root / 'data'}", f"--exec-root={exec_root}",
            f"--pidfile={root / 'dockerd.pid'}"]
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True)
    engine = DockerEngine(sock, process, exec_root)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise DockerEngineError(f"dockerd exited ({process.returncode}); see {root / 'dockerd.log'}:\n"
                                    + (root / "dockerd.log").read_text(errors="replace")[-2000:])
        try:
            engine.client().ping()
            return engine
        except Exception:  # not listening yet
            time.sleep(0.2)
    engine.stop()
    raise DockerEngineError(f"dockerd did not answer on {sock} within {timeout_s:.0f} s")


def import_image(client: docker.DockerClient, rootfs_tar: Path, tag: str) -> str:
    """`docker import` of a root filesystem tarball as `tag`; returns the image id."""
    with open(rootfs_tar, "rb") as data:
        client.api.import_image_from_data(data.read(), repository=tag.split(":")[0],
                                          tag=tag.split(":")[1] if ":" in tag else "latest")
    return client.images.get(tag).id
