"""The heartbeat writer: low-rate lines (node, sequence number, write time in ms) at `eps` a second.

Each line is `{"pipetune_canary": {"node": "n1", "seq": 17, "ts_ms": 1800000000123}}` (the key, agent.yaml's
`canary` section and the probe's `pipetune_canary_*` metrics keep the name deployments already read), appended
with one `write(2)` on an O_APPEND descriptor, so it can share a log file with the operator's writer (when
they opt in) without ever interleaving half a line. The probe measures each node's heartbeat latency and
counts lost and duplicated heartbeats by sequence number, so the sequence continues across agent
restarts: the next number is kept in the agent's state directory.

A heartbeat file of its own is read by its own harvester, which meets end-of-file after every line and
backs off: its latency is not the busy log's (bench/measurement.py measures how far apart they are).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable

_SEQ_WIDTH = 20  # the state file holds the next sequence number, overwritten in place


def heartbeat_line(node: str, seq: int, ts_s: float) -> bytes:
    """One heartbeat line (the node name is JSON-escaped by the config's pattern: letters, digits, ._-)."""
    return b'{"pipetune_canary": {"node": "%s", "seq": %d, "ts_ms": %d}}\n' % (node.encode(), seq, int(ts_s * 1000))


class HeartbeatWriter:
    """Writes heartbeats from a thread of its own until `stop`; `write_one` is the step, for tests."""

    def __init__(self, path: Path, node: str, eps: float, state_dir: Path,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic) -> None:
        if eps <= 0:
            raise ValueError(f"heartbeat eps must be > 0, got {eps}")
        self.path = path
        self.node = node
        self.period_s = 1.0 / eps
        self.clock = clock
        self.monotonic = monotonic
        state_dir.mkdir(parents=True, exist_ok=True)
        # the file keeps its old name, so an upgraded agent continues its sequence
        self._seq_fd = os.open(state_dir / "canary.seq", os.O_RDWR | os.O_CREAT, 0o600)
        saved = os.pread(self._seq_fd, _SEQ_WIDTH, 0).strip()
        self.next_seq = int(saved) if saved.isdigit() else 0
        self._fd: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors = 0  # writes that failed (the file's directory gone, a full disk): retried next period

    def write_one(self) -> int:
        """Append the next heartbeat and keep its successor's number; returns the number written."""
        if self._fd is not None and not self._same_file():
            self._reopen()  # rotated away (renamed or deleted), as logrotate does: follow the path
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        seq = self.next_seq
        os.write(self._fd, heartbeat_line(self.node, seq, self.clock()))
        self.next_seq = seq + 1
        os.pwrite(self._seq_fd, str(self.next_seq).rjust(_SEQ_WIDTH).encode(), 0)
        return seq

    def _run(self) -> None:
        due = self.monotonic()
        while not self._stop.wait(max(0.0, due - self.monotonic())):
            try:
                self.write_one()
            except OSError:
                self.errors += 1
                self._reopen()
            # A stalled thread resumes on the beat rather than bursting to catch up: a burst would look
            # like heartbeats arriving together, not like the pipeline's latency.
            due = max(due + self.period_s, self.monotonic())

    def _same_file(self) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(self._fd).st_ino  # type: ignore[arg-type]
        except FileNotFoundError:
            return False

    def _reopen(self) -> None:
        """Close the file, to open the path afresh on the next write."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pipetune-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._reopen()
        os.close(self._seq_fd)
