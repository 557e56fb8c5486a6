"""The probe's ledger: every request_id seen, checked against each replay run's manifest."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

_SAMPLE = 20  # lost request_ids listed in a report; the count is always exact


@dataclass(frozen=True)
class Manifest:
    """What a replay run wrote: the contract between the replay engine and the probe."""

    run_id: str
    events: int
    first_seq: int
    last_seq: int
    started_at: float
    duration_s: float
    request_id_format: str = "{run_id}-{seq:08d}"
    request_ids_in_lines: bool = True  # False: the lines carry no request_id (combined, nginx-json): no ledger

    @classmethod
    def from_file(cls, path: Path) -> "Manifest":
        raw = json.loads(path.read_text())
        try:
            return cls(str(raw["run_id"]), int(raw["events"]), int(raw["first_seq"]), int(raw["last_seq"]),
                       float(raw["started_at"]), float(raw["duration_s"]),
                       str(raw.get("request_id_format", cls.request_id_format)),
                       bool(raw.get("request_ids_in_lines", True)))
        except KeyError as err:
            raise ValueError(f"manifest {path} has no field {err}") from None

    @property
    def ends_at(self) -> float:
        return self.started_at + self.duration_s

    def request_id(self, seq: int) -> str:
        return self.request_id_format.format(run_id=self.run_id, seq=seq)


@dataclass(frozen=True)
class RunReport:
    """How one run arrived: lost, duplicated and late events; `final` once no more are awaited."""

    run_id: str
    expected: int
    received: int  # distinct request_ids of the run that arrived
    lost_events: int
    duplicate_events: int  # arrivals beyond the first of a request_id
    late_events: int  # arrived after the run's end plus the grace period
    lost_sample: list[str]
    complete: bool
    final: bool

    def to_dict(self) -> dict:
        return asdict(self)


def split_request_id(request_id: str) -> tuple[str, int] | None:
    """(run_id, seq) of a `{run_id}-{seq}` request_id, or None for one of another shape."""
    run_id, _, seq = request_id.rpartition("-")
    return (run_id, int(seq)) if run_id and seq.isdigit() else None


class Ledger:
    """Counts arrivals per (run, seq); compares them with the manifests it is given."""

    def __init__(self, late_after_s: float) -> None:
        self.late_after_s = late_after_s
        self._arrivals: dict[str, dict[int, int]] = defaultdict(dict)
        self._manifests: dict[str, Manifest] = {}
        self._late: dict[str, int] = defaultdict(int)
        self._totals: dict[str, int] = defaultdict(int)
        self.foreign = 0  # request_ids not of the `{run_id}-{seq}` shape

    def add_manifest(self, manifest: Manifest) -> None:
        self._manifests[manifest.run_id] = manifest

    def manifests(self) -> list[Manifest]:
        return list(self._manifests.values())

    def record(self, request_id: str, received_at: float) -> tuple[bool, bool]:
        """Count one arrival; says whether it (duplicates an earlier one, arrived late)."""
        parsed = split_request_id(request_id)
        if parsed is None:
            self.foreign += 1
            return False, False
        run_id, seq = parsed
        seen = self._arrivals[run_id]
        count = seen.get(seq, 0)
        seen[seq] = count + 1
        self._totals[run_id] += 1
        manifest = self._manifests.get(run_id)
        late = manifest is not None and received_at > manifest.ends_at + self.late_after_s
        if late:
            self._late[run_id] += 1
        return count > 0, late

    def arrivals(self, run_id: str) -> int:
        """Every arrival of the run so far, duplicates included."""
        return self._totals.get(run_id, 0)

    def report(self, run_id: str, now: float) -> RunReport:
        """The run's state against its manifest; `final` once its end plus the grace period has passed."""
        manifest = self._manifests[run_id]
        seen = self._arrivals.get(run_id, {})
        expected = range(manifest.first_seq, manifest.last_seq + 1)
        missing = [seq for seq in expected if seq not in seen]
        received = len(expected) - len(missing)
        duplicates = sum(count - 1 for seq, count in seen.items() if count > 1 and seq in expected)
        return RunReport(run_id, len(expected), received, len(missing), duplicates, self._late[run_id],
                         [manifest.request_id(seq) for seq in missing[:_SAMPLE]], not missing,
                         now > manifest.ends_at + self.late_after_s)

    def save(self, path: Path, now: float) -> None:
        """Write the arrivals of every run not yet final at `now`, for the next probe process to `load`.

        The agent recreates the probe when its consumer settings change; the consumer commits its
        offsets as it closes, so the old process's arrivals plus what the new one consumes from the
        committed offsets are every arrival exactly once, and an open run is not declared lost.
        """
        open_runs = [run_id for run_id in self._arrivals
                     if run_id not in self._manifests or now <= self._manifests[run_id].ends_at + self.late_after_s]
        document = {run_id: {"seqs": sorted(self._arrivals[run_id]), "late": self._late[run_id],
                             "repeats": {str(seq): count for seq, count in self._arrivals[run_id].items() if count > 1}}
                    for run_id in open_runs}
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(document))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path, late_after_s: float) -> "Ledger":
        """A ledger carrying on from a `save`d one (an empty one when there is none)."""
        ledger = cls(late_after_s)
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError):
            return ledger
        for run_id, saved in document.items():
            seen = dict.fromkeys(saved["seqs"], 1) | {int(seq): count for seq, count in saved["repeats"].items()}
            ledger._arrivals[run_id] = seen
            ledger._totals[run_id] = sum(seen.values())
            ledger._late[run_id] = saved["late"]
        return ledger
