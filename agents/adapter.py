"""The adapter seam (one per component) and the versioned config store every adapter shares.

An adapter reads what a component's own config files hold (`read`) and patches them with parameter values
(`patch`: only the tuned keys change, every other byte stays as the operator wrote it), checks them with the
component's own validator where it has one (`validate`), puts them in force
(`apply`, through a `Runtime` or the component's admin API) and says whether the component is well
(`health`). The store keeps every version's values on disk, so a restarted agent knows what is in force; never
a file's whole text, which would undo what the operator changed since.

A write that finds its filesystem full raises `DiskFull` naming the path, and leaves nothing behind: no torn file,
no torn audit line (agents/component.py turns it into the HTTP answer 507).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Protocol

from models.space import ChangeCost, Config, Param, Value

log = logging.getLogger("pipetune.agent")


class ValidationFailed(ValueError):
    """The component's own check rejected a patched config; the message is the component's."""


class DiskFull(OSError):
    """A write found no space left (ENOSPC, or the user's quota: EDQUOT) on the filesystem of `path`."""

    def __init__(self, path: Path, what: str = "") -> None:
        super().__init__(errno.ENOSPC, "no space left on device", str(path))
        self.path = path
        self.what = what  # whose file it is and what that means, when the path alone does not say

    def __str__(self) -> str:
        return f"no space left on device: {self.path}" + (f" ({self.what})" if self.what else "")


@contextmanager
def naming_full_disk(path: Path) -> Iterator[None]:
    """An ENOSPC or EDQUOT raised inside becomes `DiskFull(path)`: Python's own error names no file for a write."""
    try:
        yield
    except DiskFull:
        raise
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFull(path) from err
        raise


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


class StagedFiles:
    """Files written in full beside where they belong (a temp file in the same directory, fsynced), not yet in place.

    `commit` renames them in, which needs no new space, and fsyncs their directories (so the renames survive a
    crash); `discard` removes them. Staging a change's files before the component is stopped finds a full disk
    while nothing has been touched. A file keeps its mode; a new one is 0600 unless `mode` says otherwise
    (Filebeat refuses a config file others can write).
    """

    def __init__(self, files: Mapping[Path, str], mode: int | None = None) -> None:
        self._temps: dict[Path, Path] = {}
        try:
            for path, content in files.items():
                self._temps[path] = _stage(path, content, mode)
        except BaseException:
            self.discard()
            raise

    def commit(self) -> list[str]:
        """Put every staged file in place; the paths written."""
        for path, temp in self._temps.items():
            os.replace(temp, path)
        for directory in {path.parent for path in self._temps}:
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        written, self._temps = sorted(str(path) for path in self._temps), {}
        return written

    def discard(self) -> None:
        for temp in self._temps.values():
            temp.unlink(missing_ok=True)
        self._temps = {}


def _stage(path: Path, content: str, mode: int | None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o600
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with naming_full_disk(path), os.fdopen(fd, "w") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return Path(temp)


def atomic_write(path: Path, content: str, mode: int | None = None) -> None:
    """Write `content` to `path` so readers see the old file or the new one, never a torn one (`StagedFiles`)."""
    StagedFiles({path: content}, mode).commit()


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
    atomically), `pending` (the version a change or rollback under way puts in force: present only while one
    runs), `audit.jsonl`."""

    UNWRITTEN_MAX = 10_000  # audit lines kept in memory while the disk is full; beyond, the oldest are counted

    def __init__(self, state_dir: Path, component: str) -> None:
        self.root = state_dir / component
        self.root.mkdir(parents=True, exist_ok=True)
        self._unwritten: list[str] = []  # audit lines the disk had no room for, oldest first
        self._dropped = 0  # of those, the ones beyond UNWRITTEN_MAX

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

    def forget(self, version: int) -> None:
        """Remove every trace of a version never decided (a change the disk had no room for): it can be sent again.
        Removing needs no space."""
        self.path(version).unlink(missing_ok=True)
        if self.pending() == version:
            self.set_pending(None)

    @property
    def audit_path(self) -> Path:
        return self.root / "audit.jsonl"

    def audit(self, event: str, **fields: object) -> DiskFull | None:
        """Append one line to audit.jsonl (O_APPEND, fsynced: the log only grows); None once it is written.

        A full disk is returned, never raised (what the agent does must not depend on its log having room) and
        logged: the line is kept in memory, shown by `audit_entries`, and written before the next line that fits.
        A write cut short by the full disk is truncated away, so the file never holds half a line.
        """
        self._unwritten.append(json.dumps({"at": time.time(), "event": event, **fields}, default=str) + "\n")
        if len(self._unwritten) > self.UNWRITTEN_MAX:
            del self._unwritten[0]
            self._dropped += 1
        lost = [json.dumps({"at": time.time(), "event": "audit_lost", "lines": self._dropped}) + "\n"] \
            if self._dropped else []
        try:
            _append(self.audit_path, "".join(lost + self._unwritten).encode())
        except DiskFull as full:
            log.error("%s: audit line %r not written, kept in memory until there is room: %s", self.root.name, event,
                      full)
            return full
        self._unwritten, self._dropped = [], 0
        return None

    def audit_entries(self) -> list[dict]:
        """The audit log, then the lines the disk had no room for yet (marked `"written": false`)."""
        try:
            written = [json.loads(line) for line in self.audit_path.read_text().splitlines() if line]
        except FileNotFoundError:
            written = []
        return written + [json.loads(line) | {"written": False} for line in self._unwritten]


def _append(path: Path, data: bytes) -> None:
    """Append `data` whole or not at all: on an error the file is cut back to where it ended."""
    with naming_full_disk(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            end = os.fstat(fd).st_size
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            except BaseException:
                os.ftruncate(fd, end)
                raise
        finally:
            os.close(fd)


def write_files(files: Mapping[Path, str]) -> None:
    """Write every file atomically where it belongs: all of them staged first, so a full disk writes none."""
    StagedFiles(files).commit()


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
