"""Filebeat's registry (`<path.data>/registry/filebeat`, its memlog store), read from outside: the offset it holds
acknowledged for each harvested file, and whether its filesystem has room for the next write.

Measured on Filebeat 7.17 with `path.data` on a full filesystem (tests/faults/test_disk_full.py): it ships on, every
line reaches the output, and it logs `Failed to update state in the registry` for each batch (no /stats counter
says so for a filestream input); the registry keeps the last offsets that fitted. A restart then sends again
every line since those. Once there is room, the next acknowledged batch writes a whole checkpoint, and a restart
from then on sends nothing twice.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from agents.adapter import DiskFull

# A registry key ends with the file's identity: `filestream::<id>::native::<inode>-<device>` (filestream),
# `filebeat::logs::native::<inode>-<device>` (log input).
_NATIVE_KEY = re.compile(r"native::(\d+)-(\d+)$")


def registry_offsets(data_dir: Path, tail_bytes: int = 1 << 16) -> dict[tuple[int, int], int]:
    """Acknowledged read offset per file identity (device, inode), from Filebeat's registry: its last
    checkpoint, then the newest entries of its op log (only the log's tail is read: it grows until the
    next checkpoint). Filebeat keys a file by its identity, so a renamed file keeps its offset."""
    home = data_dir / "registry" / "filebeat"
    entries: list[tuple[object, object]] = []
    try:
        checkpoint = home / (home / "active.dat").read_text().strip().rsplit("/", 1)[-1]
        entries += [(entry.get("_key"), entry) for entry in json.loads(checkpoint.read_text())
                    if isinstance(entry, dict)]
    except (OSError, ValueError):
        pass  # no checkpoint yet
    entries += [(entry.get("k"), entry.get("v")) for entry in _tail_entries(home / "log.json", tail_bytes)
                if isinstance(entry, dict)]
    offsets: dict[tuple[int, int], int] = {}
    for key, value in entries:
        found = _NATIVE_KEY.search(key) if isinstance(key, str) else None
        if found is None or not isinstance(value, dict):
            continue
        # filestream keeps it in its cursor, the log input at the top of its state.
        offset = (value.get("cursor") or {}).get("offset", value.get("offset"))
        if isinstance(offset, int):
            offsets[(int(found.group(2)), int(found.group(1)))] = offset
    return offsets


def _tail_entries(path: Path, tail_bytes: int) -> list[dict]:
    try:
        with open(path, "rb") as log:
            start = max(path.stat().st_size - tail_bytes, 0)
            log.seek(start)
            lines = log.read().splitlines()[1 if start else 0:]  # a line cut by the seek is skipped
    except OSError:
        return []
    entries = []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue  # a line being written
    return entries


def registry_room(data_dir: Path) -> DiskFull | None:
    """`DiskFull` saying why Filebeat cannot write its registry under `data_dir` now; None when it can. Its next
    write is a log entry, or a checkpoint of the whole state to a new file: it needs one block and room for a
    checkpoint as large as the last one."""
    home = data_dir / "registry" / "filebeat"
    existing = next((p for p in (home, data_dir, *data_dir.parents) if p.is_dir()), Path("/"))
    stat = os.statvfs(existing)
    free = stat.f_bavail * stat.f_frsize
    try:
        checkpoint = (home / (home / "active.dat").read_text().strip().rsplit("/", 1)[-1]).stat().st_size
    except (OSError, ValueError):
        checkpoint = 0
    needed = checkpoint + stat.f_frsize
    if free >= needed:
        return None
    return DiskFull(data_dir, f"Filebeat's registry: {free} bytes free where its next write needs {needed}; Filebeat "
                              f"ships on, but a restart now would send again every line since its last registry write")
