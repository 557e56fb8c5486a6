"""The testbed's Filebeats: each node's layout on disk (the log, the idle rotated files beside it) and the pid
file of the process its agent runs."""

from __future__ import annotations

import os
import time
from pathlib import Path

from agents.filebeat.render import FilebeatLayout
from replay.events import Request, prepare
from testbed.pipeline import NodeLayout, PipelineSpec

IDLE_LINES = 3  # in each idle rotated file
IDLE_AGE_STEP_S = 3600.0  # file k was last written k + 1 hours ago: older than the probe's backfill horizon (1 h)
IDLE_RUN_ID = "idle"  # their lines' request_id prefix (json formats), a run no manifest names
_IDLE_REQUEST = Request.of({"method": "GET", "uri": "/", "endpoint": "/", "status": 200, "bytes": 512, "rt": 0.004})


def idle_glob(log_path: Path) -> Path:
    """The glob over the rotated files beside `log_path` (`access.log.*`), as an operator's input has it."""
    return log_path.with_name(f"{log_path.name}.*")


def filebeat_layout(spec: PipelineSpec, node: NodeLayout | None = None) -> FilebeatLayout:
    """Node `node`'s Filebeat (default: the first node's), publishing the node's name as its host.name; it
    reads the node's log, the canaries' own file with `agent.canary_file`, and with `log.idle_files` the
    rotated files beside the log too (`idle_glob`)."""
    node = node or spec.node_layouts()[0]
    paths = (node.log_path, node.canary_path) if spec.agent.canary_file else (node.log_path,)
    if spec.log.idle_files:
        paths += (idle_glob(node.log_path),)
    return FilebeatLayout(paths, spec.filebeat.input, spec.log.format == "multiline-json",
                          tuple(spec.bootstrap.split(",")), spec.filebeat.topic, node.filebeat_http_port,
                          node.home / "filebeat", name=node.name, acks_all=spec.replication_factor > 1)


def write_idle_files(log_path: Path, count: int, log_format: str, now_s: float | None = None) -> list[Path]:
    """Lay out `count` idle rotated files beside `log_path`, as logrotate leaves them: `access.log.1` to
    `access.log.<count>`, each `IDLE_LINES` lines in `log_format`, file k last written (its mtime too) k + 1
    hours before `now_s`. A rotated file numbered higher (an earlier layout's) is removed, so `idle_glob`
    matches exactly `count` files. Filebeat reads each once when it first finds it; the probe counts their
    old lines as backfill."""
    now_s = time.time() if now_s is None else now_s
    log_path.parent.mkdir(parents=True, exist_ok=True)
    for rotated in log_path.parent.glob(idle_glob(log_path).name):
        number = rotated.name.removeprefix(f"{log_path.name}.")
        if number.isdigit() and int(number) > count:
            rotated.unlink()
    written = []
    for k in range(1, count + 1):
        last_s = now_s - (k + 1) * IDLE_AGE_STEP_S
        stamps_s = [last_s - (IDLE_LINES - 1 - i) for i in range(IDLE_LINES)]  # a second apart
        path = log_path.with_name(f"{log_path.name}.{k}")
        path.write_text("".join(prepare((k - 1) * IDLE_LINES + i, IDLE_RUN_ID, ts, _IDLE_REQUEST, log_format).text(ts)
                                for i, ts in enumerate(stamps_s)))
        os.utime(path, (last_s, last_s))
        written.append(path)
    return written


def filebeat_pid_file(spec: PipelineSpec, node: NodeLayout | None = None) -> Path:
    """Where node `node`'s agent (default: the first node's) records the Filebeat it started."""
    node = node or spec.node_layouts()[0]
    return node.home / "agent" / "state" / "filebeat" / "run" / "filebeat.pid.json"
