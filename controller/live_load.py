"""Load for tuning the live testbed: the replay engine writes a profile into its log in the background.

The load goes in chunks, each a replay run with its own manifest, so the probe's ledger accounts for
every event of a tuning run however long it lasts and wherever it is stopped.
"""

from __future__ import annotations

import threading

from controller.live import new_run_id, replay_into, wait_for_report
from controller.twin_runs import workload
from replay.arrivals import Schedule, steady
from testbed.pipeline import PipelineSpec
from testbed.processes import TestbedError

CHUNK_S = 20.0  # the end of a `with` block waits at most this long for the chunk under way


class BackgroundLoad:
    """Replays `profile` at `rate_eps` over `duration_s` into the pipeline's log from a thread, then
    steady `rate_eps`, until the `with` block ends.

    `run_ids` names the replay runs written so far; the probe reports on each.
    """

    def __init__(self, spec: PipelineSpec, profile: str, rate_eps: float, duration_s: float, seed: int) -> None:
        self.spec = spec
        self.profile = profile
        self.seed = seed
        self.rate_eps = rate_eps
        self.times_s = workload(profile, rate_eps, duration_s, seed)
        self.duration_s = duration_s
        self.run_ids: list[str] = []
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._replay, name="pipetune-load", daemon=True)

    def _chunk(self, start_s: float) -> Schedule:
        if start_s >= self.duration_s:
            return steady(self.rate_eps, CHUNK_S, seed=self.seed + round(start_s))
        end_s = min(start_s + CHUNK_S, self.duration_s)
        times = self.times_s[(self.times_s >= start_s) & (self.times_s < end_s)] - start_s
        return Schedule(self.profile, self.seed, end_s - start_s, times)

    def _replay(self) -> None:
        start_s = 0.0
        try:
            while not self._stop.is_set():
                run_id = new_run_id()
                self.run_ids.append(run_id)
                replay_into(self.spec, self._chunk(start_s), run_id)
                start_s += CHUNK_S
        except BaseException as err:  # reported when the block ends, not lost in the thread
            self._error = err

    def __enter__(self) -> "BackgroundLoad":
        self._thread.start()
        return self

    def ledger(self) -> dict[str, int]:
        """What the probe's ledger says of every run so far, once each is final: expected, lost, duplicates."""
        grace_s = self.spec.probe.late_after_s + CHUNK_S
        reports = [wait_for_report(self.spec, run_id, grace_s) for run_id in self.run_ids]
        return {"runs": len(reports), "expected": sum(r.expected for r in reports),
                "lost": sum(r.lost_events for r in reports), "duplicates": sum(r.duplicate_events for r in reports),
                "late": sum(r.late_events for r in reports)}

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._error is not None:
            raise TestbedError(f"the background replay failed: {self._error}") from self._error
