"""What is appended to the files Filebeat harvests, and what of it Filebeat has not shipped yet.

The agent watches the paths of each tuned input (a glob) and, at every scrape of its /metrics, reads
only the bytes appended since the last one. It counts whole lines (a line being written is counted
once, at the scrape after its newline), and events: a line is an event, or, for an input with a
multiline pattern, a line that starts one (as Filebeat will join them). The source backlog is what has
been appended but not acknowledged by Filebeat's output: the watched bytes minus the offset Filebeat's
registry holds for the same file (device and inode, so a renamed file keeps its offset).

Rotation: a file is followed by its open descriptor, so lines appended after a rename (before the
writer reopens) are counted, and the new file at the old path is counted from its start; a file that
shrinks (copytruncate) is counted again from its start. What a file held when the agent started is not
offered load; a file that appears later is counted whole, as Filebeat reads it whole.

Lines end at `\n` only, as Filebeat splits them (a `\r` in binary garbage is not a line end), and a line longer
than a read block is followed to its end. A line at least as long as the largest message Filebeat's Kafka output
sends (`output.kafka.max_message_bytes`, 1,000,000 by default) is counted oversized: that output drops such an
event, yet counts it acknowledged (`dropping too large message` in Filebeat's log, measured in
tests/faults/test_bad_input.py), so it is lost; lines a little shorter may be dropped too (the event adds its
fields to the line).
"""

from __future__ import annotations

import glob
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

import yaml
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agents.filebeat.patch import FilebeatFiles, TunedInput

Identity = tuple[int, int]  # (device, inode): how Filebeat's registry names a file too
READ_BLOCK_BYTES = 1 << 20


@dataclass(frozen=True)
class WatchedSource:
    """One glob of harvested files; `event_start` set: a line starts an event when `matches(line)` is
    `starts_on_match` (Filebeat's `negate`), else every line is an event."""

    glob: str
    event_start: re.Pattern[bytes] | None = None
    starts_on_match: bool = True

    def events_in(self, lines: list[bytes]) -> int:
        if self.event_start is None:
            return len(lines)
        return sum(1 for line in lines if bool(self.event_start.search(line)) == self.starts_on_match)


@dataclass
class _File:
    handle: BinaryIO
    offset: int  # bytes counted so far (whole lines)
    baseline: int  # bytes it held when first seen that are not offered load
    path: str


@dataclass
class _Counts:
    lines: int = 0
    events: int = 0
    bytes: int = 0
    oversized: int = 0
    files: dict[Identity, _File] = field(default_factory=dict)


class SourceWatch(Collector):
    """Appended lines, events and bytes per watched glob, and the source backlog, collected at each scrape.

    `acknowledged` returns Filebeat's acknowledged offset per file identity (its registry); None: no
    Filebeat registry known, the backlog is what was appended since the agent started. `message_max_bytes`: the
    largest message Filebeat's output sends (None: no such limit), longer lines are counted oversized.
    """

    def __init__(self, sources: list[WatchedSource],
                 acknowledged: Callable[[], dict[Identity, int]] | None = None,
                 message_max_bytes: int | None = None) -> None:
        self.sources = sources
        self.acknowledged = acknowledged
        self.message_max_bytes = message_max_bytes
        self._lock = threading.Lock()
        self._counts = {source.glob: _Counts() for source in sources}
        for source in sources:  # what the files hold now predates the watch
            self._discover(source, self._counts[source.glob], initial=True)

    def _discover(self, source: WatchedSource, counts: _Counts, initial: bool) -> set[Identity]:
        present: set[Identity] = set()
        for path in sorted(glob.glob(source.glob)):
            try:
                stat = os.stat(path)
            except OSError:
                continue  # removed between the glob and the stat
            identity = (stat.st_dev, stat.st_ino)
            present.add(identity)
            if identity in counts.files or not os.path.isfile(path):
                continue
            try:
                handle = open(path, "rb")
            except OSError:
                continue
            start = _whole_lines_end(handle, stat.st_size) if initial else 0
            counts.files[identity] = _File(handle, start, start, path)
        return present

    def _catch_up(self, source: WatchedSource, counts: _Counts) -> None:
        present = self._discover(source, counts, initial=False)
        for identity, watched in list(counts.files.items()):
            grew = self._read_new(source, counts, watched)
            # A file out of the glob (rotated away) or deleted is followed until it stops growing.
            if identity not in present and not grew:
                watched.handle.close()
                del counts.files[identity]

    def _read_new(self, source: WatchedSource, counts: _Counts, watched: _File) -> bool:
        size = os.fstat(watched.handle.fileno()).st_size
        if size < watched.offset:  # copytruncate: the file starts over
            watched.offset = watched.baseline = 0
        grew = False
        watched.handle.seek(watched.offset)
        while watched.offset < size:
            chunk = watched.handle.read(min(READ_BLOCK_BYTES, size - watched.offset))
            length = chunk.rfind(b"\n") + 1
            if length:
                lines = chunk[:length].split(b"\n")[:-1]
                lengths = [len(line) for line in lines]
            else:  # one line longer than the block, or a line still being written
                length = _line_length(watched.handle, watched.offset + len(chunk), size) + len(chunk)
                if length <= len(chunk):
                    break  # no newline yet
                lines, lengths = [chunk], [length - 1]  # its first block says whether it starts an event
            counts.lines += len(lines)
            counts.events += source.events_in(lines)
            counts.bytes += length
            if self.message_max_bytes is not None:
                counts.oversized += sum(1 for n in lengths if n >= self.message_max_bytes)
            watched.offset += length
            watched.handle.seek(watched.offset)
            grew = True
        return grew

    def _backlog_bytes(self, counts: _Counts, acked: dict[Identity, int]) -> int:
        return sum(max(f.offset - acked.get(identity, f.baseline), 0) for identity, f in counts.files.items())

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            for source in self.sources:
                self._catch_up(source, self._counts[source.glob])
            acked = self.acknowledged() if self.acknowledged else {}
            families = {
                "lines": CounterMetricFamily("pipetune_source_lines", "Whole lines appended to the watched files",
                                             labels=["path"]),
                "events": CounterMetricFamily("pipetune_source_events", "Events appended to the watched files "
                                              "(lines, or multiline events as Filebeat joins them)", labels=["path"]),
                "bytes": CounterMetricFamily("pipetune_source_bytes", "Bytes of whole lines appended to the watched "
                                             "files", labels=["path"]),
                "backlog": GaugeMetricFamily("pipetune_source_backlog_bytes", "Bytes appended to the watched files "
                                             "that Filebeat's output has not acknowledged", labels=["path"]),
                "oversized": CounterMetricFamily("pipetune_source_oversized_lines", "Lines at least as long as the "
                                                 "largest message Filebeat's output sends: dropped by it, and lost",
                                                 labels=["path"]),
            }
            for name, counts in self._counts.items():
                families["oversized"].add_metric([name], counts.oversized)
                families["lines"].add_metric([name], counts.lines)
                families["events"].add_metric([name], counts.events)
                families["bytes"].add_metric([name], counts.bytes)
                families["backlog"].add_metric([name], self._backlog_bytes(counts, acked))
        yield from families.values()

    def close(self) -> None:
        with self._lock:
            for counts in self._counts.values():
                for watched in counts.files.values():
                    watched.handle.close()
                counts.files.clear()


def _line_length(handle: BinaryIO, start: int, size: int) -> int:
    """Bytes from `start` up to and including the next newline before `size`; 0 when there is none (yet)."""
    handle.seek(start)
    position = start
    while position < size:
        block = handle.read(min(READ_BLOCK_BYTES, size - position))
        found = block.find(b"\n")
        if found >= 0:
            return position + found + 1 - start
        position += len(block)
    return 0


def message_max_bytes(files: FilebeatFiles) -> int | None:
    """The largest message Filebeat's output sends: `output.kafka.max_message_bytes` (1,000,000 by default, as
    Filebeat 7.17 has it); None for the Logstash output, which sets none."""
    if files.output != "kafka":
        return None
    document = yaml.safe_load(files.config.read_text()) or {}
    kafka = _nested(_nested(document, "output") if isinstance(document, dict) else {}, "kafka")
    limit = kafka.get("max_message_bytes", 1_000_000)
    return int(limit) if isinstance(limit, int) else 1_000_000


def _whole_lines_end(handle: BinaryIO, size: int) -> int:
    """The offset just past the last newline in the first `size` bytes (0 when there is none)."""
    position = size
    while position > 0:
        start = max(position - READ_BLOCK_BYTES, 0)
        handle.seek(start)
        found = handle.read(position - start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        position = start
    return 0


def watched_sources(inputs: tuple[TunedInput, ...]) -> list[WatchedSource]:
    """One `WatchedSource` per path glob of the tuned inputs, with the input's multiline rule if it has one."""
    sources: dict[str, WatchedSource] = {}
    for tuned in inputs:
        start, on_match = _multiline_rule(_input_entry(tuned))
        for path in tuned.paths:
            sources.setdefault(path, WatchedSource(path, start, on_match))
    return list(sources.values())


def _input_entry(tuned: TunedInput) -> dict:
    """The input's own mapping, read from the file it is written in (a list of inputs, or filebeat.yml)."""
    document = yaml.safe_load(tuned.file.read_text())
    if isinstance(document, dict):
        inputs = document.get("filebeat.inputs") or (document.get("filebeat") or {}).get("inputs") or []
    else:
        inputs = document or []
    entry = inputs[tuned.index] if tuned.index < len(inputs) else {}
    return entry if isinstance(entry, dict) else {}


def _multiline_rule(entry: dict) -> tuple[re.Pattern[bytes] | None, bool]:
    """A `pattern` multiline rule of a log input (`multiline.*`) or a filestream parser: which lines start
    an event. With `negate: false` matching lines join a neighbour, so the others start events; with
    `negate: true` it is the matching ones (for `match: after` and `before` alike)."""
    settings = _nested(entry, "multiline")
    for parser in entry.get("parsers") or []:
        if isinstance(parser, dict) and isinstance(parser.get("multiline"), dict):
            settings = parser["multiline"]
    pattern = settings.get("pattern")
    if not isinstance(pattern, str) or settings.get("type", "pattern") != "pattern":
        return None, True
    return re.compile(pattern.encode()), bool(settings.get("negate", False))


def _nested(entry: dict, prefix: str) -> dict:
    """`prefix.key: v` and `prefix: {key: v}` alike, as Filebeat reads dotted keys."""
    found = dict(entry.get(prefix) or {}) if isinstance(entry.get(prefix), dict) else {}
    found |= {key[len(prefix) + 1:]: value for key, value in entry.items() if key.startswith(prefix + ".")}
    return found


def filebeat_data_dir(config: Path, argv: list[str] | None) -> Path:
    """Filebeat's path.data: `--path.data` or `--path.home` on its command line, else filebeat.yml's
    `path.data` or `path.home`, else beside the binary (Filebeat's own default)."""
    flags = _flags(argv or [])
    document = yaml.safe_load(config.read_text()) or {}
    paths = _nested(document, "path") if isinstance(document, dict) else {}
    if "path.data" in flags:
        return Path(flags["path.data"])
    if "path.home" in flags:
        return Path(flags["path.home"]) / "data"
    if paths.get("data"):
        return Path(str(paths["data"]))
    if paths.get("home"):
        return Path(str(paths["home"])) / "data"
    return Path(argv[0]).resolve().parent / "data" if argv else config.parent / "data"


def _flags(argv: list[str]) -> dict[str, str]:
    found = {}
    for i, arg in enumerate(argv):
        for name in ("path.data", "path.home"):
            if arg.startswith(f"--{name}="):
                found[name] = arg.split("=", 1)[1]
            elif arg == f"--{name}" and i + 1 < len(argv):
                found[name] = argv[i + 1]
    return found
