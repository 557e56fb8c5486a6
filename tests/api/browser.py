"""Headless Chromium for the status-page test: Debian's `chromium`, installed once through apt."""

from __future__ import annotations

import subprocess
from pathlib import Path

from testbed.install import install_debian_packages

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars")


def install_chromium() -> Path:
    """The chromium binary, installing Debian's package first when it is missing (idempotent)."""
    return install_debian_packages(("chromium",), "chromium", "for the status-page test")


def run_chromium(binary: Path, url: str, profile: Path, *extra: str, budget_ms: int = 8000) -> str:
    """Load `url` headless, let its scripts run for `budget_ms` of virtual time; returns stdout."""
    cmd = [str(binary), *FLAGS, f"--user-data-dir={profile}", "--window-size=1280,900",
           f"--virtual-time-budget={budget_ms}", *extra, url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"chromium exited {proc.returncode}: {proc.stderr[-1500:]}")
    return proc.stdout
