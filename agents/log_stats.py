"""How much the replay has written to the log, counted at each scrape by reading only the new bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

_EVENT_MARK = b'"request_id"'  # once per event, in single-line and multi-line JSON alike


class LogCollector(Collector):
    """Events and bytes appended to one log file since the collector started; a file replaced or
    truncated later is read from its start."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._inode: int | None = None
        self._offset = 0
        self._events = 0
        self._bytes = 0
        try:  # what an earlier run left in the log is not offered load
            stat = path.stat()
            self._inode, self._offset = stat.st_ino, stat.st_size
        except OSError:
            pass

    def _catch_up(self) -> None:
        try:
            stat = self.path.stat()
            if stat.st_ino != self._inode or stat.st_size < self._offset:
                self._inode, self._offset = stat.st_ino, 0
            with open(self.path, "rb") as log:
                log.seek(self._offset)
                chunk = log.read(stat.st_size - self._offset)
        except OSError:
            return
        # Count only whole lines, so an event being written is counted once, on the next scrape.
        whole = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(whole)
        self._bytes += len(whole)
        self._events += whole.count(_EVENT_MARK)

    def collect(self) -> Iterator[Metric]:
        self._catch_up()
        yield CounterMetricFamily("pipetune_log_events_written", "Events the replay appended to the log",
                                  value=self._events)
        yield CounterMetricFamily("pipetune_log_written_bytes", "Bytes the replay appended to the log",
                                  value=self._bytes)
