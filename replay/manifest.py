"""The run manifest: what a replay sent, so the end-of-pipeline probe can prove nothing was lost."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from replay.engine import ReplayResult
from replay.events import REQUEST_ID_FORMAT, STAMPED_FORMATS


def build_manifest(result: ReplayResult, fmt: str, sink: str) -> dict:
    """Counts, the request_id range, per-second counts (by actual send time), profile and seed.

    Request ids are `REQUEST_ID_FORMAT` over the contiguous range `first_seq..last_seq`;
    `failed_request_ids` lists those the sink could not deliver (HTTP errors, Kafka send failures).
    `request_ids_in_lines` is false for the formats whose lines carry no request_id (combined,
    nginx-json): the probe then has nothing to account for.
    """
    seconds = int(np.ceil(result.duration_s))
    per_second = np.bincount(np.floor(result.sent_at_s).astype(int), minlength=seconds)
    return {
        "run_id": result.run_id,
        "profile": result.schedule.profile,
        "seed": result.schedule.seed,
        "events": result.events,
        "request_id_format": REQUEST_ID_FORMAT,
        "request_ids_in_lines": fmt in STAMPED_FORMATS,
        "first_seq": 0,
        "last_seq": result.events - 1,
        "per_second": per_second.tolist(),
        "started_at": round(result.started_at, 3),
        "duration_s": round(result.duration_s, 3),
        "format": fmt,
        "sink": sink,
        "processes": result.processes,
        "failed_request_ids": result.sink.failed_request_ids,
    }


def write_manifest(path: str | Path, manifest: dict) -> None:
    """Write atomically, so a reader never sees half a manifest."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(path)
