"""Fixtures for the fault tests: small filesystems the test mounts itself (tmpfs with `size=`, unmounted when the
test ends), and filling one up."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.agents.conftest import kafka_topic  # noqa: F401  (a fixture: a Kafka topic of the test's own)


@pytest.fixture
def small_disk() -> Iterator[Callable[[Path, str], Path]]:
    """`small_disk(path, "2m")` mounts a tmpfs of that size at `path` (made if missing); every mount is undone after
    the test, the last one first. Skipped, saying why, where this user may not mount."""
    mounted: list[Path] = []

    def mount(path: Path, size: str) -> Path:
        if os.geteuid() != 0:
            pytest.skip("a full disk is a tmpfs the test mounts itself, which needs root")
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=True)  # a process still inside: detach it


def fill(directory: Path) -> Path:
    """Fill the filesystem of `directory` to its last byte with a ballast file; delete it to give the room back."""
    ballast = directory / ".ballast"
    with open(ballast, "wb", buffering=0) as out:
        for chunk in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    out.write(b"\0" * chunk)
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
    assert os.statvfs(directory).f_bavail == 0
    return ballast
