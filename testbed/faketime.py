"""A node clock the testbed sets: Debian's libfaketime preloaded into a node's processes, which read their wall
clock's offset from a file on every read, so the clock steps or drifts while they run (the fault suite's clock jump
and skew, docs/faults.md).

Only the wall clock moves (`CLOCK_MONOTONIC` stays, as when NTP or an operator sets a clock). libfaketime reaches
what reads the clock through libc (nginx); Go reads it through the vDSO, so a Filebeat started with it keeps the
real clock. A Python process (the node's agent) takes the same file through `fake_clock_site/sitecustomize.py`
instead (`python_env`): under libfaketime 0.9.10 Python 3.11's `time.sleep` fails with EINVAL.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from testbed.install import install_debian_packages

SITE = Path(__file__).resolve().parent / "fake_clock_site"
# nginx hands its workers only the variables its `env` directives name: these keep them on the fake clock
NGINX_ENV = ("LD_PRELOAD", "FAKETIME_TIMESTAMP_FILE", "FAKETIME_NO_CACHE", "FAKETIME_DONT_FAKE_MONOTONIC")


def install_faketime() -> Path:
    """libfaketime's thread-safe library, Debian's package installed when missing."""
    install_debian_packages(("faketime",), "faketime", "to run a node's processes on a clock of their own")
    library = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
    if not library.exists():  # another architecture's multiarch directory
        library = next(Path("/usr/lib").glob("*/faketime/libfaketimeMT.so.1"))
    return library


class FakeClock:
    """A wall clock `offset_s` off the real one, for every process started with `env()` or `python_env()`; `set`
    moves it at once (libfaketime's cache of the file, FAKETIME_CACHE_DURATION, misses some changes: it reads it on
    every clock read instead, which costs nginx little)."""

    def __init__(self) -> None:
        # libfaketime 0.9.10 silently ignores a longer path (pytest's tmp_path is one): a short one of its own
        self.path = Path(tempfile.mkdtemp(prefix="faketime-")) / "offset"
        # mkdtemp makes it 0700: nginx's workers, which root's nginx runs as `nobody`, could not read the file and
        # libfaketime silently kept them on the real clock (why nginx never stepped in the first attempt)
        self.path.parent.chmod(0o755)
        self.library = install_faketime()
        self.offset_s = 0.0
        self.set(0.0)

    def env(self) -> dict[str, str]:
        """The variables that put a process started with them on this clock (added to its environment)."""
        return {"LD_PRELOAD": str(self.library), "FAKETIME_TIMESTAMP_FILE": str(self.path), "FAKETIME_NO_CACHE": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1"}

    def python_env(self, env: dict[str, str]) -> dict[str, str]:
        """`env` with a Python process started with it on this clock."""
        path = env.get("PYTHONPATH")
        return {**env, "PIPETUNE_FAKE_CLOCK": str(self.path),
                "PYTHONPATH": f"{SITE}:{path}" if path else str(SITE)}

    def set(self, offset_s: float) -> None:
        """Put the clock `offset_s` off the real one; a reader sees the old offset or the new, never a torn file."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(f"{offset_s:+.6f}\n")
        os.replace(tmp, self.path)
        self.offset_s = offset_s

    def close(self) -> None:
        shutil.rmtree(self.path.parent, ignore_errors=True)
