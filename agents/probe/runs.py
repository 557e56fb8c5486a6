"""Replay runs as the probe sees them: manifests dropped in a directory, reports written beside them.

The replay engine (or `pipetune measure`) writes `<run_id>.json` into the manifests directory before
its first event; the probe writes `<run_id>.json` into the reports directory every pass until the
run is final, so any process can read how the run arrived.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agents.probe.ledger import Ledger, Manifest, RunReport
from agents.probe.metrics import ProbeMetrics


class RunTracker:
    """Registers new manifests with the ledger and keeps each open run's report file current."""

    def __init__(self, ledger: Ledger, metrics: ProbeMetrics, manifests_dir: Path, reports_dir: Path) -> None:
        self.ledger = ledger
        self.metrics = metrics
        self.manifests_dir = manifests_dir
        self.reports_dir = reports_dir
        self._final: dict[str, int] = {}  # final run -> its arrivals when its report was last written
        self._done: set[Path] = set()  # manifests loaded, or unusable
        reports_dir.mkdir(parents=True, exist_ok=True)

    def scan(self) -> None:
        """Pick up manifests not yet known (a half-written one is retried on the next pass)."""
        for path in sorted(self.manifests_dir.glob("*.json")):
            if path in self._done:
                continue
            try:
                manifest = Manifest.from_file(path)
            except (OSError, json.JSONDecodeError):
                continue
            except ValueError:
                self._done.add(path)
                continue
            self._done.add(path)
            if not manifest.request_ids_in_lines:  # nothing in its lines to account for
                continue
            earlier = read_report(self.reports_dir, manifest.run_id)
            if earlier is None or not earlier.final:  # a run finished before this probe started stays done
                self.ledger.add_manifest(manifest)

    def hand_over(self, checkpoint: Path, now: float) -> None:
        """As the probe stops: every run's report at `now`, then the arrivals of the runs still open at that same
        `now` saved for the next process (`Ledger.save`). A run that turned final since the last pass is reported
        here, by the process that holds its arrivals: saved at a later moment than its last report, it was in
        neither, and the next process reported all 20,000 events of a bench.live run lost."""
        self.scan()
        self.write_reports(now)
        self.ledger.save(checkpoint, now)

    def write_reports(self, now: float) -> list[RunReport]:
        """Write the report of every open run, and of a final run when late arrivals changed it.

        `pipetune_lost_events_total` counts what was missing when each run became final; events that
        arrive after that count as late (`pipetune_late_events_total`) and leave the report's
        `lost_events`.
        """
        written = []
        for manifest in self.ledger.manifests():
            run_id = manifest.run_id
            arrivals = self.ledger.arrivals(run_id)
            if self._final.get(run_id) == arrivals:
                continue
            report = self.ledger.report(run_id, now)
            if report.final:
                if run_id not in self._final:
                    self.metrics.lost.inc(report.lost_events)
                self._final[run_id] = arrivals
            write_json_atomically(self.reports_dir / f"{run_id}.json", report.to_dict())
            written.append(report)
        return written


def write_json_atomically(path: Path, document: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(document))
    os.replace(tmp, path)


def read_report(reports_dir: Path, run_id: str) -> RunReport | None:
    """The probe's latest report of a run, if it has written one."""
    try:
        return RunReport(**json.loads((reports_dir / f"{run_id}.json").read_text()))
    except (OSError, ValueError):
        return None
