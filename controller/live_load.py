"""Load for tuning the live testbed: the replay engine writes a profile into its log in the background."""

from __future__ import annotations

import threading

from controller.live import new_run_id
from controller.twin_runs import workload
from replay.arrivals import Schedule
from replay.engine import Workload, run
from replay.sinks import SinkSpec
from testbed.pipeline import PipelineSpec
from testbed.processes import TestbedError


class _Stopped(Exception):
    """Raised from the engine's progress callback: the only way to end a replay before its schedule does."""


class BackgroundLoad:
    """Replays `profile` at `rate_eps` into the pipeline's log from a thread, until the `with` block ends."""

    def __init__(self, spec: PipelineSpec, profile: str, rate_eps: float, duration_s: float, seed: int) -> None:
        times_s = workload(profile, rate_eps, duration_s, seed)
        self._schedule = Schedule(profile, seed, duration_s, times_s)
        self._sink = SinkSpec("file", str(spec.log_path()))
        self._fmt = spec.log.format
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._replay, name="pipetune-load", daemon=True)
        spec.log_path().parent.mkdir(parents=True, exist_ok=True)

    def _check_stop(self, *_: object) -> None:
        if self._stop.is_set():
            raise _Stopped

    def _replay(self) -> None:
        try:
            run(self._schedule, self._sink, Workload(fmt=self._fmt), run_id=new_run_id(), progress=self._check_stop)
        except _Stopped:
            pass
        except BaseException as err:  # reported when the block ends, not lost in the thread
            self._error = err

    def __enter__(self) -> "BackgroundLoad":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._error is not None:
            raise TestbedError(f"the background replay failed: {self._error}") from self._error
