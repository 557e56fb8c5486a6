"""One managed component: validate → patch the component's files → the component's check → atomic write → reload or
restart → health → success, or rollback to the version in force. One change at a time.

Versions are numbered by the caller; a new change must be above every version stored. A version
already decided (applied, rejected, rolled back) answers the same again: a retried request is safe.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from agents.adapter import Adapter, ConfigStore, Runtime, ValidationFailed, Version, write_files
from models.space import ChangeCost, Config, ParamError, SearchSpace, Value


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
        self.initial = self.space.config(initial)
        self.health_timeout_s = health_timeout_s
        self.settle_s = settle_s
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.adapter.name

    def start(self) -> None:
        """Bring the component to the stored current version (version 0 from agent.yaml on first start).

        A change that was under way when the agent stopped is undone: the files of the version in force
        go back and the component is restarted on them, so the agent and the component agree.
        """
        with self._lock:
            current = self.store.current()
            if current is None:
                record = self._record(0, dict(self.initial), None)
                self._check(record)
                self._put_in_force(record, ChangeCost.RESTART)
                record.status, record.action = "applied", "started"
                self.store.put(record)
                self.store.set_current(0)
                self.store.audit("started", version=0, params=record.params)
                return
            record = self._current_record()
            interrupted = self.store.pending()
            if interrupted is not None:
                self.store.audit("recovered", interrupted=interrupted, restored=record.version)
                self.store.path(interrupted).unlink(missing_ok=True)
                self._put_in_force(record, ChangeCost.RESTART)
                self.store.set_pending(None)
            else:
                self._restart_if_stopped(record, "not running at agent start")

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
        if self.runtime is None or self.runtime.running():
            return False
        self._put_in_force(record, ChangeCost.RESTART)
        self.store.audit("restarted", version=record.version, reason=reason)
        return True

    def _current_record(self) -> Version:
        current = self.store.current()
        record = self.store.get(current) if current is not None else None
        if record is None:
            raise RuntimeError(f"{self.name}: no stored current version in {self.store.root}")
        return record

    def _record(self, version: int, params: dict[str, Value], previous: int | None) -> Version:
        files = self.adapter.patch(Config(params))
        return Version(version, params, {str(path): text for path, text in files.items()}, previous)

    def state(self) -> dict[str, object]:
        """Version in force, its parameters, health and runtime: what GET /components/{name} shows."""
        record = self._current_record()
        health = self.adapter.health()
        describe = getattr(self.runtime, "describe", None)
        return {"name": self.name, "version": record.version, "highest_version": self.store.highest(),
                "params": record.params, "change_in_progress": self._lock.locked(),
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
                                        version=version, params=done.params)
                return self._result(done, version, replay=True)
            if version <= self.store.highest():
                raise ChangeRefused(409, f"version {version} is not above {self.name}'s highest version "
                                         f"{self.store.highest()}", highest_version=self.store.highest())
            try:
                # The operator's files are read now: one that is gone or no longer parses refuses the change.
                record = self._record(version, wanted, current.version)
                if wanted == current.params:
                    record.status, record.action = "applied", "unchanged"
                    return self._commit(record, 0.0)
                self._check(record)
            except ValidationFailed as err:
                record = Version(version, wanted, {}, current.version, status="rejected", message=str(err))
                self.store.put(record)
                self.store.audit("rejected", version=version, reason=str(err))
                return self._result(record, version)
            return self._switch(record, current, self._cost(current.params, wanted))

    def rollback(self) -> ChangeResult:
        """Go back to the version that was in force before the current one."""
        with self._lock:
            current = self._current_record()
            previous = self.store.get(current.previous) if current.previous is not None else None
            if previous is None:
                raise ChangeRefused(409, f"{self.name} has no earlier version to roll back to", version=current.version)
            started = time.monotonic()
            try:
                self._put_in_force(previous, self._cost(current.params, previous.params))
            except Exception as err:  # the earlier version fails too: put the current one back
                self._put_in_force(current, ChangeCost.RESTART)
                raise ChangeRefused(502, f"rolling {self.name} back to version {previous.version} failed, "
                                         f"version {current.version} is back in force: {err}") from None
            self.store.set_current(previous.version)
            self.store.audit("rolled_back_on_request", version=previous.version, from_version=current.version)
            return ChangeResult(self.name, previous.version, previous.version, "applied", "rolled back",
                                f"back to version {previous.version} from {current.version}",
                                time.monotonic() - started, previous.params)

    def audit(self) -> list[dict]:
        return self.store.audit_entries()

    def _validated(self, base: Mapping[str, Value], changes: Mapping[str, object]) -> dict[str, Value]:
        try:
            return dict(self.space.config(changes, base=base))
        except ParamError as err:
            raise ChangeRefused(422, str(err), field=err.name, allowed=err.allowed, value=err.value) from None
        except KeyError as err:
            unknown = next(k for k in changes if k not in self.space)
            raise ChangeRefused(422, err.args[0], field=unknown, allowed=f"a parameter of {self.name}") from None

    def _cost(self, old: Mapping[str, Value], new: Mapping[str, Value]) -> ChangeCost:
        return ChangeCost.dearest(self.space[k].cost for k in new if old.get(k) != new[k])

    def _check(self, record: Version) -> None:
        """The component's own check judges the version's files before any is written in place."""
        self.adapter.validate(_paths(record.files))

    def _switch(self, record: Version, current: Version, cost: ChangeCost) -> ChangeResult:
        """Write, apply, check health; on any failure put `current` back and report why."""
        self.store.put(record)
        self.store.set_pending(record.version)
        self.store.audit("change_started", version=record.version, from_version=current.version, cost=cost.value,
                         changes={k: v for k, v in record.params.items() if current.params.get(k) != v})
        started = time.monotonic()
        try:
            record.action = self._put_in_force(record, cost)
        except Exception as err:  # whatever went wrong, the component must not stay on a half-applied change
            reason = f"{type(err).__name__}: {err}" if not isinstance(err, Unhealthy) else str(err)
            try:
                self._put_in_force(current, ChangeCost.RESTART)
                restored = f"version {current.version} is back in force"
            except Exception as again:  # reported, never hidden: the operator has to step in
                restored = f"restoring version {current.version} failed too: {again}"
            record.status, record.message = "rolled_back", f"{reason}; {restored}"
            self.store.put(record)
            self.store.set_pending(None)
            self.store.audit("rolled_back", version=record.version, to_version=current.version, reason=record.message)
            return self._result(record, record.version, elapsed_s=time.monotonic() - started)
        record.status = "applied"
        return self._commit(record, time.monotonic() - started)

    def _commit(self, record: Version, elapsed_s: float) -> ChangeResult:
        record.elapsed_s = elapsed_s
        self.store.put(record)
        self.store.set_current(record.version)
        self.store.set_pending(None)
        self.store.audit("applied", version=record.version, action=record.action, elapsed_s=round(elapsed_s, 3))
        return self._result(record, record.version)

    def _put_in_force(self, record: Version, cost: ChangeCost) -> str:
        """Write the version's files, apply them, wait until the component is healthy; returns the action.
        A change that restarts the component stops it before its files are written: one that watches its
        own files (Filebeat's input reload) must not put them in force itself first, half-way."""
        if cost is ChangeCost.RESTART and self.runtime is not None:
            self.runtime.stop()
        write_files(_paths(record.files))
        applied = self.adapter.apply(Config(record.params), self.runtime, cost)
        self._wait_healthy()
        return applied.action

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


def _paths(files: Mapping[str, str]) -> dict[Path, str]:
    return {Path(name): text for name, text in files.items()}
