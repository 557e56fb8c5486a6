"""Headless Chromium for the status-page test: Debian's `chromium`, installed once through apt."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from testbed.install import PrerequisiteError, require_tool

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars")


def install_chromium() -> Path:
    """The chromium binary, installing Debian's package first when it is missing (idempotent)."""
    found = shutil.which("chromium")
    if found:
        return Path(found)
    apt = require_tool("apt-get", "to install Debian's chromium for the status-page test")
    if os.geteuid() != 0:
        raise PrerequisiteError("installing chromium needs root: run `apt-get install -y chromium` as root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [apt, "install", "-y", "-q", "--no-install-recommends", "chromium"]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        for cmd in ([apt, "update", "-q"], install):  # the package lists may be stale or absent
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise PrerequisiteError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-800:]}")
    return Path(require_tool("chromium", "after installing Debian's chromium package"))


def run_chromium(binary: Path, url: str, profile: Path, *extra: str, budget_ms: int = 8000) -> str:
    """Load `url` headless, let its scripts run for `budget_ms` of virtual time; returns stdout."""
    cmd = [str(binary), *FLAGS, f"--user-data-dir={profile}", "--window-size=1280,900",
           f"--virtual-time-budget={budget_ms}", *extra, url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"chromium exited {proc.returncode}: {proc.stderr[-1500:]}")
    return proc.stdout
