"""The adapter seam (one per component) and the versioned config store every adapter shares.

An adapter reads what a component's own config files hold (`read`) and patches them with parameter values
(`patch`: only the tuned keys change, every other byte stays as the operator wrote it), checks them with the
component's own validator where it has one (`validate`), puts them in force
(`apply`, through a `Runtime` or the component's admin API) and says whether the component is well
(`health`). The store keeps every version's values on disk, so a restarted agent knows what is in force; never
a file's whole text, which would undo what the operator changed since.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, Protocol

from models.space import ChangeCost, Config, Param, Value


class ValidationFailed(ValueError):
    """The component's own check rejected a patched config; the message is the component's."""


@dataclass(frozen=True)
class Health:
    """Whether the component answers as it should, and what it said."""

    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class Applied:
    """What putting a config in force did, and how long it took (seconds)."""

    action: str
    elapsed_s: float = 0.0


class Runtime(Protocol):
    """Starts, signals and restarts one component's process or container."""

    def reload(self) -> None: ...

    def restart(self) -> None: ...

    def stop(self) -> None: ...

    def running(self) -> bool: ...


class Adapter(Protocol):
    """One component: its parameters, its config files, its check, how a change is put in force."""

    name: str
    params: tuple[Param, ...]  # each with the cost of changing it on this node (live, reload, restart)

    def read(self) -> dict[str, Value]:
        """What the component's files hold now for its parameters (what it reads where they set none)."""
        ...

    def patch(self, config: Config, base: Config | None = None) -> dict[Path, str]:
        """Every file the adapter manages (absolute path) -> its text with `config`'s values rebased onto the file
        as it is on disk now (agents/rebase.py: `base` the values in force; `RebaseConflict` for a key changed by
        hand since)."""
        ...

    def validate(self, files: Mapping[Path, str]) -> None:
        """Raise `ValidationFailed` if the component rejects `files` (not yet written where they belong)."""
        ...

    def apply(self, config: Config, runtime: Runtime | None, cost: ChangeCost) -> Applied: ...

    def health(self) -> Health: ...


def atomic_write(path: Path, content: str, mode: int | None = None) -> None:
    """Write `content` to `path` so readers see the old file or the new one, never a torn one.

    Temp file in the same directory, fsync, rename, fsync of the directory (so the rename survives a
    crash). The file keeps its mode; a new one is 0600 unless `mode` says otherwise (Filebeat refuses a
    config file others can write).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o600
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@dataclass
class Version:
    """One config version of a component as stored: its values, its files, and how it ended."""

    version: int
    params: dict[str, Value]
    previous: int | None  # the version in force before this one (what a rollback returns to)
    status: str = "pending"  # pending | applied | rolled_back | rejected
    message: str = ""
    action: str = ""
    elapsed_s: float = 0.0
    at: float = field(default_factory=time.time)


_VERSION_FIELDS = frozenset(Version.__dataclass_fields__)


class ConfigStore:
    """`<state>/<component>/`: `v<N>.json` per version, `current` (the version in force, replaced
    atomically), `pending` (a change under way: present only while one runs), `audit.jsonl`."""

    def __init__(self, state_dir: Path, component: str) -> None:
        self.root = state_dir / component
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, version: int) -> Path:
        return self.root / f"v{version}.json"

    def get(self, version: int) -> Version | None:
        try:
            stored = json.loads(self.path(version).read_text())
        except FileNotFoundError:
            return None
        return Version(**{k: v for k, v in stored.items() if k in _VERSION_FIELDS})  # an older agent's kept `files`

    def put(self, record: Version) -> None:
        atomic_write(self.path(record.version), json.dumps(asdict(record), indent=1))

    def current(self) -> int | None:
        try:
            return int((self.root / "current").read_text())
        except FileNotFoundError:
            return None

    def set_current(self, version: int) -> None:
        atomic_write(self.root / "current", str(version))

    def highest(self) -> int:
        """The highest version number ever stored (a new change must be above it)."""
        numbers = [int(p.stem[1:]) for p in self.root.glob("v*.json") if p.stem[1:].isdigit()]
        return max(numbers, default=-1)

    def pending(self) -> int | None:
        try:
            return int((self.root / "pending").read_text())
        except FileNotFoundError:
            return None

    def set_pending(self, version: int | None) -> None:
        if version is None:
            (self.root / "pending").unlink(missing_ok=True)
        else:
            atomic_write(self.root / "pending", str(version))

    def audit(self, event: str, **fields: object) -> None:
        """Append one line to audit.jsonl (opened in append mode, fsynced: the log only grows)."""
        line = json.dumps({"at": time.time(), "event": event, **fields}, default=str) + "\n"
        with open(self.root / "audit.jsonl", "a") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    def audit_entries(self) -> list[dict]:
        try:
            return [json.loads(line) for line in (self.root / "audit.jsonl").read_text().splitlines() if line]
        except FileNotFoundError:
            return []


def write_files(files: Mapping[Path, str]) -> None:
    """Write every file atomically where it belongs."""
    for path, content in files.items():
        atomic_write(path, content)


def read_text(path: Path) -> str:
    """A managed file's text; a missing one is an error naming it (the agent never invents a config)."""
    try:
        return path.read_text()
    except OSError as err:
        raise ValidationFailed(f"{path}: cannot read it ({err.strerror})") from None


def run_check(argv: list[str], what: str, timeout_s: float) -> None:
    """Run a component's own config check; its complaint becomes `ValidationFailed`."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise ValidationFailed(f"{what}: {(proc.stdout + proc.stderr).strip()[-2000:]}")


def restart_if_needed(runtime: Runtime | None, cost: ChangeCost, component: str) -> Applied | None:
    """Restart when the change needs it or the component is down; None when a lighter step will do."""
    if runtime is None:
        raise ValueError(f"{component} needs a runtime")
    if cost is ChangeCost.RESTART or not runtime.running():
        started = time.monotonic()
        runtime.restart()
        return Applied("restarted", time.monotonic() - started)
    return None
