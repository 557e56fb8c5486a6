"""One managed component: validate → rebase the version's tuned keys onto the component's files → the
component's check → atomic write → reload or restart → health → success, or rollback to the version in force.
One change at a time.

Versions are numbered by the caller; a new change must be above every version stored. A version
already decided (applied, rejected, rolled back) answers the same again: a retried request is safe.

Every write of a component's files is a rebase of a version's values onto the files as they are on disk then
(agents/rebase.py), never a stored text: what the operator edits while the agent runs stays through changes,
rollbacks and restarts, and a restart on an unchanged version rewrites nothing. A rebase that finds a tuned key
changed by hand, or a file that no longer reads, is refused and the component held: nothing is written, the audit
log's `held` entry names the key, file and line, and `state()` says so until a rebase succeeds again. A stopped
component held so is started on its files as they are (they are the operator's).

A full disk (`DiskFull`, where the component's files or the agent's state are) refuses the change with 507 naming
the path: the files are staged in full before the component is stopped, so a disk without room is found while
nothing is touched; one that fills later in the change puts the version in force back. Either way the version is
forgotten (it can be sent again once there is room) and the audit log says so, or the answer says it could not.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from agents.adapter import Adapter, ConfigStore, DiskFull, Runtime, StagedFiles, ValidationFailed, Version
from agents.rebase import RebaseConflict
from models.space import (UNCHECKED_NOT_ABOVE, ChangeCost, Config, Param, ParamError, RuleError, SearchSpace, Value,
                          check_rules)

log = logging.getLogger("pipetune.agent")


class ChangeRefused(Exception):
    """A request the agent will not carry out; `status` is the HTTP status that says why."""

    def __init__(self, status: int, message: str, **detail: object) -> None:
        super().__init__(message)
        self.status = status
        self.detail = {"message": message, **detail}


class Unhealthy(RuntimeError):
    """The component is not running or not healthy after a change."""


@dataclass
class ChangeResult:
    """What a change request did: `status` is applied, unchanged, rejected or rolled_back."""

    component: str
    version: int  # the version in force afterwards
    requested: int
    status: str
    action: str = ""
    message: str = ""
    elapsed_s: float = 0.0
    params: dict[str, Value] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """The requested values are in force (put there now, or already there)."""
        return self.status in ("applied", "unchanged")


class ManagedComponent:
    """An adapter, its runtime (None for an admin-API component) and its versioned store."""

    def __init__(self, adapter: Adapter, runtime: Runtime | None, store: ConfigStore, initial: Mapping[str, Value],
                 *, health_timeout_s: float = 30.0, settle_s: float = 1.0) -> None:
        self.adapter = adapter
        self.runtime = runtime
        self.store = store
        self.space = SearchSpace(adapter.params)
        self.given = dict(initial)  # agent.yaml's starting values: the first version writes them
        self.held: str | None = None  # why the last rebase was refused; None since one succeeded
        self.health_timeout_s = health_timeout_s
        self.settle_s = settle_s
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.adapter.name

    def start(self) -> None:
        """Bring the component to the stored current version. The first version is what the component's files
        hold (its own default where they set none) with agent.yaml's starting values: it writes nothing else.

        A change or rollback that was under way when the agent stopped (`pending` names its version) ends on the
        version `current` names: a change is complete only once `current` names it. One that got that far is kept;
        any other is undone: the keys it wrote go back to the version in force and the component is restarted on
        them, so the agent and the component agree. The audit log says what was found (`interrupted`) and what
        was done (`recovered`); a change undone was never decided and can be sent again.
        """
        with self._lock:
            current = self.store.current()
            if current is None:
                self._start_first()
                return
            record = self._current_record()
            interrupted = self.store.pending()
            if interrupted is None:
                self._restart_if_stopped(record, "not running at agent start")
            elif interrupted == record.version:
                self.store.audit("interrupted", version=interrupted, in_force=record.version,
                                 found=f"version {interrupted} was in force; only the end of its change was not "
                                       "recorded")
                self._restart_if_stopped(record, "not running at agent start")
                self.store.set_pending(None)
                self.store.audit("recovered", interrupted=interrupted, restored=record.version)
            else:
                self._undo(interrupted, record)

    def _undo(self, interrupted: int, record: Version) -> None:
        """Put `record` (the version in force) back over the keys the `interrupted` change or rollback wrote."""
        undone = self.store.get(interrupted)
        self.store.audit("interrupted", version=interrupted, in_force=record.version,
                         found=self._found(interrupted, undone, record))
        self._put_in_force(record, ChangeCost.RESTART, undone.params if undone else record.params,
                           during="recovery", held_ok=True)
        if interrupted > record.version and (undone is None or undone.status != "rolled_back"):
            self.store.forget(interrupted)  # a change never decided; a rollback's target is an older version, kept
        self.store.set_pending(None)
        self.store.audit("recovered", interrupted=interrupted, restored=record.version)

    def _found(self, interrupted: int, undone: Version | None, record: Version) -> str:
        """What an interrupted change or rollback had done, in words: how far it got and what the files hold."""
        if interrupted < record.version:
            stage = f"a rollback from version {record.version} to version {interrupted} was under way"
        elif undone is None:
            stage = f"version {interrupted} was about to be recorded, nothing of it written yet"
        elif undone.status == "rolled_back":
            stage = f"version {interrupted} had failed and version {record.version} was being put back"
        elif undone.status == "applied":
            stage = f"version {interrupted} was healthy but not yet recorded in force"
        else:
            stage = f"version {interrupted} was being put in force, its health not yet confirmed"
        moved = {k: v for k, v in (undone.params if undone else {}).items() if record.params.get(k) != v}
        try:
            on_disk = self.adapter.read()
        except ValidationFailed as err:
            return f"{stage}; its files do not read: {err}"
        holds = [v for v, params in ((record.version, record.params), (interrupted, moved))
                 if all(on_disk.get(k) == params.get(k) for k in moved)]
        return f"{stage}; {self.name}'s files hold " + (f"version {holds[0]}'s values" if holds else
                                                          "values of neither version")

    def _start_first(self) -> None:
        found = {k: v for k, v in self.adapter.read().items() if k in self.space}
        # Audited: file values out of range (the first version writes the default over them), and agent.yaml
        # values of parameters the adapter does not manage on this node (not used).
        notes = {"out_of_range": sorted(k for k, v in found.items() if not _accepts(self.space[k], v)),
                 "not_managed": sorted(k for k in self.given if k not in self.space)}
        params = dict(self.space.config({k: v for k, v in self.given.items() if k in self.space},
                                        base=self.space.config({k: v for k, v in found.items()
                                                                if k not in notes["out_of_range"]})))
        record = Version(0, params, None)
        checked = self.adapter.patch(Config(params), None)
        self._check(checked)
        _, written = self._put_in_force(record, ChangeCost.RESTART, None, during="first start", checked=checked)
        record.status, record.action = "applied", "started"
        self.store.put(record)
        self.store.set_current(0)
        self.store.audit("started", version=0, params=record.params, wrote=written,
                         **{name: keys for name, keys in notes.items() if keys})

    def keep_running(self) -> bool:
        """Restart the version in force if its process stopped outside a change; True when it was restarted.

        A failed restart is audited and tried again at the next call: the component stays the operator's
        to look at, and the agent keeps serving.
        """
        with self._lock:
            try:
                return self._restart_if_stopped(self._current_record(), "found not running")
            except Exception as err:  # reported in the audit log; the next pass tries again
                self.store.audit("restart_failed", version=self.store.current(), reason=f"{type(err).__name__}: {err}")
                return False

    def _restart_if_stopped(self, record: Version, reason: str) -> bool:
        """Restart a stopped component on its files, rewriting nothing: they hold the version in force (or what
        the operator changed by hand since, which is held and kept)."""
        if self.runtime is None or self.runtime.running():
            return False
        self._put_in_force(record, ChangeCost.RESTART, record.params, during=reason, held_ok=True)
        self.store.audit("restarted", version=record.version, reason=reason,
                         files="as they are, held" if self.held else "as they are")
        return True

    def _current_record(self) -> Version:
        current = self.store.current()
        record = self.store.get(current) if current is not None else None
        if record is None:
            raise RuntimeError(f"{self.name}: no stored current version in {self.store.root}")
        return record

    def state(self) -> dict[str, object]:
        """Version in force, its parameters, health and runtime: what GET /components/{name} shows."""
        record = self._current_record()
        health = self.adapter.health()
        describe = getattr(self.runtime, "describe", None)
        return {"name": self.name, "version": record.version, "highest_version": self.store.highest(),
                "params": record.params, "change_in_progress": self._lock.locked(), "held": self.held,
                "health": {"ok": health.ok, "detail": health.detail},
                "runtime": describe() if describe else None,
                "params_allowed": {p.name: {"allowed": p.allowed(), "cost": p.cost.value} for p in self.adapter.params}}

    def change(self, version: int, params: Mapping[str, object]) -> ChangeResult:
        """Apply `params` (changes on top of the version in force) as `version`; see the module docstring."""
        with self._lock:
            current = self._current_record()
            wanted = self._validated(current.params, params)
            done = self.store.get(version)
            if done is not None:
                if done.params != wanted:
                    raise ChangeRefused(409, f"version {version} of {self.name} was already used for other values",
                                        field="version", version=version, params=done.params)
                return self._result(done, version, replay=True)
            if version <= self.store.highest():
                raise ChangeRefused(409, f"version {version} is not above {self.name}'s highest version "
                                         f"{self.store.highest()}", field="version",
                                    highest_version=self.store.highest())
            try:
                return self._change(Version(version, wanted, current.version), current)
            except DiskFull as full:  # found before anything was stopped or written in place
                self.store.forget(version)
                raise self._no_space(full, f"version {version} not applied",
                                     f"version {current.version} stays in force, untouched") from None

    def _change(self, record: Version, current: Version) -> ChangeResult:
        try:
            # The operator's files are read now: one that is gone or no longer parses refuses the change.
            checked = self._rebased(record.params, current.params, f"change to version {record.version}")
            if record.params == current.params:
                record.status, record.action = "applied", "unchanged"
                return self._commit(record, 0.0)
            self._check(checked)
            staged = StagedFiles(_changed(checked))  # before anything is touched: a disk without room is found here
        except RebaseConflict as err:
            raise ChangeRefused(409, f"{self.name} is held, version {record.version} not applied: {err}",
                                version=current.version, held=str(err)) from None
        except DiskFull:
            raise
        except (ValidationFailed, OSError) as err:  # refused by the component's check, or files it cannot write
            record.status, record.message = "rejected", str(err)
            self.store.put(record)
            self.store.audit("rejected", version=record.version, reason=str(err))
            return self._result(record, record.version)
        return self._switch(record, current, self._cost(current.params, record.params), checked, staged)

    def rollback(self) -> ChangeResult:
        """Go back to the version that was in force before the current one."""
        with self._lock:
            current = self._current_record()
            previous = self.store.get(current.previous) if current.previous is not None else None
            if previous is None:
                raise ChangeRefused(409, f"{self.name} has no earlier version to roll back to", version=current.version)
            try:  # before anything stops: a rollback over an operator's edit is refused, the component untouched
                files = self._rebased(previous.params, current.params, f"rollback to version {previous.version}")
            except ValidationFailed as err:
                raise ChangeRefused(409, f"{self.name} is held, not rolled back to version {previous.version}: "
                                         f"{err}", version=current.version, held=str(err)) from None
            started = time.monotonic()
            staged = StagedFiles({})
            try:  # `pending` names the rollback's target: an agent that stops during it undoes it at start
                staged = StagedFiles(_changed(files))
                self.store.set_pending(previous.version)
            except DiskFull as full:
                staged.discard()
                raise self._no_space(full, f"not rolled back to version {previous.version}",
                                     f"version {current.version} stays in force, untouched") from None
            try:
                self._put_in_force(previous, self._cost(current.params, previous.params), current.params,
                                   during=f"rollback to version {previous.version}", checked=files, staged=staged)
                self.store.set_current(previous.version)
            except Exception as err:  # the earlier version fails too: put the current one back
                restored = self._restore(current, previous.params, "restoring after a rollback")
                self.store.set_pending(None)
                if isinstance(err, DiskFull):
                    raise self._no_space(err, f"not rolled back to version {previous.version}", restored) from None
                raise ChangeRefused(502, f"rolling {self.name} back to version {previous.version} failed, "
                                         f"{restored}: {err}") from None
            self.store.set_pending(None)
            self.store.audit("rolled_back_on_request", version=previous.version, from_version=current.version)
            return ChangeResult(self.name, previous.version, previous.version, "applied", "rolled back",
                                f"back to version {previous.version} from {current.version}",
                                time.monotonic() - started, previous.params)

    def audit(self) -> list[dict]:
        return self.store.audit_entries()

    def _validated(self, base: Mapping[str, Value], changes: Mapping[str, object]) -> dict[str, Value]:
        """`changes` over `base`, each value in range and none out of order with another where the component's
        reference requires an order its own check does not (Filebeat's backoff <= max_backoff <= scan_frequency:
        `filebeat test config` takes any); a rule the files already broke is the operator's, and refused only once a
        change touches one of its keys."""
        try:
            wanted = dict(self.space.config(changes, base=base))
            check_rules(wanted, {k for k, v in wanted.items() if base.get(k) != v}, UNCHECKED_NOT_ABOVE)
            return wanted
        except RuleError as err:
            raise ChangeRefused(422, str(err), field=err.name, value=err.value, other=err.other,
                                other_value=err.other_value, allowed=err.allowed) from None
        except ParamError as err:
            raise ChangeRefused(422, str(err), field=err.name, allowed=err.allowed, value=err.value) from None
        except KeyError as err:
            unknown = next(k for k in changes if k not in self.space)
            raise ChangeRefused(422, err.args[0], field=unknown, allowed=f"a parameter of {self.name}") from None

    def _cost(self, old: Mapping[str, Value], new: Mapping[str, Value]) -> ChangeCost:
        return ChangeCost.dearest(self.space[k].cost for k in new if old.get(k) != new[k])

    def _check(self, files: Mapping[Path, str]) -> None:
        """The component's own check judges the files before any is written in place."""
        self.adapter.validate(files)

    def _config(self, params: Mapping[str, Value]) -> Config:
        """`params` over the parameters the adapter manages now: one a stored version lacks (managed since the
        agent last started) at what the files hold."""
        known = {k: v for k, v in params.items() if k in self.space}
        base = None if len(known) == len(self.space.params) else self.space.config(
            {k: v for k, v in self.adapter.read().items() if k in self.space and _accepts(self.space[k], v)})
        return self.space.config(known, base=base)

    def _rebased(self, target: Mapping[str, Value], base: Mapping[str, Value] | None, during: str) -> dict[Path, str]:
        """Every managed file with `target`'s values rebased onto it as it is now (`base`: the values in force; None:
        any value may be replaced). A refusal holds the component: audited once, and raised."""
        try:
            files = self.adapter.patch(self._config(target), None if base is None else self._config(base))
        except ValidationFailed as err:
            if self.held != str(err):
                self.store.audit("held", version=self.store.current(), during=during, reason=str(err))
            self.held = str(err)
            raise
        self.held = None
        return files

    def _switch(self, record: Version, current: Version, cost: ChangeCost, checked: Mapping[Path, str],
                staged: StagedFiles) -> ChangeResult:
        """Record, write, apply, check health; on any failure put `current` back and report why. A full disk met
        before the component is touched is raised as it is (the caller answers it)."""
        try:  # `pending` first: an agent that stops once anything of the version is stored undoes it at start
            self.store.set_pending(record.version)
            self.store.put(record)
        except DiskFull:
            staged.discard()
            raise
        self.store.audit("change_started", version=record.version, from_version=current.version, cost=cost.value,
                         changes={k: v for k, v in record.params.items() if current.params.get(k) != v})
        started = time.monotonic()
        try:
            record.action, _ = self._put_in_force(record, cost, current.params, during=f"version {record.version}",
                                                  checked=checked, staged=staged)
            record.status = "applied"
            return self._commit(record, time.monotonic() - started)
        except Exception as err:  # whatever went wrong, the component must not stay on a half-applied change
            restored = self._restore(current, record.params, f"restoring version {current.version}")
            if isinstance(err, DiskFull):
                self.store.forget(record.version)
                raise self._no_space(err, f"version {record.version} not applied", restored) from None
            reason = f"{type(err).__name__}: {err}" if not isinstance(err, Unhealthy) else str(err)
            record.status, record.message = "rolled_back", f"{reason}; {restored}"
            try:
                self.store.put(record)
            except DiskFull as full:
                self.store.forget(record.version)
                raise self._no_space(full, f"version {record.version} rolled back ({reason}), not recorded",
                                     restored) from None
            self.store.set_pending(None)
            self.store.audit("rolled_back", version=record.version, to_version=current.version, reason=record.message)
            return self._result(record, record.version, elapsed_s=time.monotonic() - started)

    def _restore(self, version: Version, undone: Mapping[str, Value], during: str) -> str:
        """Put `version` back in force over the keys `undone` wrote; what came of it, in words (never raised: the
        operator reads it and has to step in)."""
        try:
            self._put_in_force(version, ChangeCost.RESTART, undone, during=during, held_ok=True)
        except Exception as again:
            return f"restoring version {version.version} failed too: {again}"
        return f"version {version.version} is back in force"

    def _no_space(self, full: DiskFull, what: str, in_force: str) -> ChangeRefused:
        """507 for a change or rollback the disk had no room for, saying what is in force; audited, or said not to
        be (the line is kept until there is room), and logged."""
        message = f"{self.name} {what}: {full}; {in_force}"
        detail: dict[str, object] = {"path": str(full.path), "version": self.store.current()}
        unaudited = self.store.audit("no_space", path=str(full.path), reason=message)
        if unaudited is not None:
            message += f"; the audit log cannot be written either ({unaudited}), its entry waits in memory for room"
            detail["audit"] = f"not written: {unaudited}"
        log.error("%s", message)
        return ChangeRefused(507, message, **detail)

    def _commit(self, record: Version, elapsed_s: float) -> ChangeResult:
        record.elapsed_s = elapsed_s
        self.store.put(record)
        self.store.set_current(record.version)
        self.store.set_pending(None)
        self.store.audit("applied", version=record.version, action=record.action, elapsed_s=round(elapsed_s, 3))
        return self._result(record, record.version)

    def _put_in_force(self, record: Version, cost: ChangeCost, base: Mapping[str, Value] | None, *, during: str,
                      checked: Mapping[Path, str] | None = None, staged: StagedFiles | None = None,
                      held_ok: bool = False) -> tuple[str, list[str]]:
        """Rebase the version's values onto the files as they are now, write the files that change, apply, wait
        until the component is healthy; returns the action and the files written.

        A change that restarts the component stops it before its files are rebased and written: one that watches
        its own files (Filebeat's input reload) must not put them in force itself first, half-way, and an edit the
        operator makes meanwhile is rebased onto. Files that differ from the `checked` ones are checked again and
        written afresh; else the `staged` ones (the checked files, staged before the component was touched) are put
        in place. `held_ok`: a refused rebase writes nothing and the component starts on its files as they are."""
        staged = staged or StagedFiles({})
        try:
            if cost is ChangeCost.RESTART and self.runtime is not None:
                self.runtime.stop()
            try:
                files = self._rebased(record.params, base, during)
            except ValidationFailed:
                if not held_ok:
                    raise
                files = {}
            if files != checked:
                staged.discard()
                if checked is not None:
                    self._check(files)
            written = sorted(staged.commit() + StagedFiles(_changed(files)).commit())
        finally:
            staged.discard()
        applied = self.adapter.apply(Config(record.params), self.runtime, cost)
        self._wait_healthy()
        return applied.action, written

    def _wait_healthy(self) -> None:
        """Healthy, and still running and healthy `settle_s` later; a component that exits fails at once."""
        deadline = time.monotonic() + self.health_timeout_s
        healthy_since: float | None = None
        while True:
            if self.runtime is not None and not self.runtime.running():
                raise Unhealthy(f"{self.name} is not running after the change")
            health = self.adapter.health()
            now = time.monotonic()
            healthy_since = (healthy_since or now) if health.ok else None
            if healthy_since is not None and now - healthy_since >= self.settle_s:
                return
            if now > deadline:
                raise Unhealthy(f"{self.name} not healthy within {self.health_timeout_s:g} s: {health.detail}")
            time.sleep(0.2)

    def _result(self, record: Version, requested: int, *, replay: bool = False, elapsed_s: float | None = None
                ) -> ChangeResult:
        in_force = self.store.current()
        message = record.message + (" (an earlier answer to the same version)" if replay else "")
        return ChangeResult(self.name, in_force if in_force is not None else record.version, requested, record.status,
                            record.action, message.strip(), record.elapsed_s if elapsed_s is None else elapsed_s,
                            record.params)


def _changed(files: Mapping[Path, str]) -> dict[Path, str]:
    """The files whose text differs from what is on disk."""
    return {path: text for path, text in files.items() if not path.exists() or path.read_text() != text}


def _accepts(param: Param, value: Value) -> bool:
    try:
        param.validate(value)
    except ParamError:
        return False
    return True
