"""What Filebeat's scans cost: its CPU with 0, 200 and 1000 idle rotated files at two scan intervals, and the cost
of a scan and of each file it stats fitted to that (the twin's `filebeat.cpu_per_scan_s` and
`node.cpu_per_scanned_file_s`, models/twin/filebeat.py).

Each cell runs the testbed's Filebeat (`python -m testbed.install`) on a directory of its own laid out as
`pipetune testbed up --idle-files N` lays it out (testbed/filebeat_layout.py: the live log, N idle rotated files
and the input's glob over them), with the testbed's config but for its output (a file: the scan does not depend
on where events go, and no broker competes for the cores). A light steady load (the replay engine's JSON lines)
goes into the live log the whole time. Filebeat reads each idle file once when it starts; with `close_inactive`
at 3 s their harvesters have closed after the warm-up, as an operator's have 5 minutes after they were last
written, so the window sees the steady state: one open harvester, and scans that stat every file. The figure
is the Filebeat process's CPU seconds (/proc, user + system) over the window, which a machine shared with
other work changes little. The cells run in a shuffled order, so no kind runs all at one busy moment.

Per input (`filestream`, the testbed's default, and `log`) a least-squares fit of
    CPU cores = base + scans per second x (per scan + idle files x per file)
gives the per-scan cost (the live log alone) and the per-file cost; the base is the load's and the harvester's.

    python -m bench.scan_cost [--out docs/evidence/scan-cost] [--quick] [--inputs filestream,log]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from agents.adapter import write_files
from agents.filebeat.render import INPUTS_FILE, MAIN_FILE, render_filebeat_config, render_filebeat_inputs
from agents.process_stats import cpu_seconds
from bench.result import RESULT_FILE, BenchResult
from models.presets import preset
from models.space import PIPELINE_SPACE
from replay.arrivals import steady
from replay.engine import Workload, run
from replay.sinks import SinkSpec
from testbed.filebeat_layout import filebeat_layout, write_idle_files
from testbed.install import install_filebeat
from testbed.pipeline import load_pipeline

IDLE_FILES = (0, 200, 1000)
SCAN_S = (10.0, 0.1)  # Filebeat's default scan_frequency (check_interval), and a fast one
LOAD_EPS = 50.0
CLOSE_INACTIVE_S = 3.0  # idle files' harvesters close during the warm-up


@dataclass(frozen=True)
class Plan:
    inputs: tuple[str, ...]
    idle_files: tuple[int, ...]
    warmup_s: float
    window_s: float


FULL = Plan(("filestream", "log"), IDLE_FILES, 20.0, 40.0)
QUICK = Plan(("filestream",), (0, 200), 12.0, 8.0)


@dataclass(frozen=True)
class Cell:
    input: str
    idle_files: int
    scan_s: float


def _open_logs(pid: int, log_dir: Path) -> int:
    """How many files under `log_dir` the process holds open: its open harvesters."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += Path(fd.readlink()).is_relative_to(log_dir)
        except OSError:
            continue  # closed meanwhile
    return count


def _write_config(cell: Cell, run_dir: Path) -> tuple[Path, Path]:
    """The cell's Filebeat config as `testbed up --idle-files` writes it, output to a file; (filebeat.yml, log)."""
    spec = load_pipeline().model_copy(update={"name": "scan-cost", "run_dir": run_dir})
    spec = spec.model_copy(update={"filebeat": spec.filebeat.model_copy(update={"input": cell.input})})
    spec = spec.with_idle_files(cell.idle_files)
    layout = filebeat_layout(spec)
    config = PIPELINE_SPACE.config({"filebeat.scan_frequency": cell.scan_s,
                                    "filebeat.close_inactive": CLOSE_INACTIVE_S}, base=preset("defaults"))
    main = yaml.safe_load(render_filebeat_config(layout, config))
    del main["output.kafka"], main["http"]
    main["output.file"] = {"path": str(run_dir / "out"), "filename": "events", "rotate_every_kb": 1 << 20}
    write_files({layout.home_dir / MAIN_FILE: yaml.safe_dump(main, sort_keys=False),
                 layout.home_dir / INPUTS_FILE: render_filebeat_inputs(layout, config)})
    log = spec.log_path()
    write_idle_files(log, cell.idle_files, spec.log.format)
    log.touch()  # the first scan finds the live log
    return layout.home_dir / MAIN_FILE, log


def measure(cell: Cell, plan: Plan, filebeat: Path) -> dict:
    """Run Filebeat on the cell's directory under the light load; its CPU over the window after the warm-up."""
    with tempfile.TemporaryDirectory(prefix="pipetune-scan-cost-") as tmp:
        run_dir = Path(tmp)
        main, log = _write_config(cell, run_dir)
        load = threading.Thread(target=run, args=(steady(LOAD_EPS, plan.warmup_s + plan.window_s + 1.0),
                                                  SinkSpec("file", str(log)), Workload(fmt="json")),
                                kwargs={"run_id": "scan"}, daemon=True)
        with open(run_dir / "filebeat.out", "wb") as out:
            process = subprocess.Popen([str(filebeat), "-c", str(main), "--path.home", str(main.parent)],
                                       stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            load.start()
            time.sleep(plan.warmup_s)
            open_start, start_cpu_s, start_s = _open_logs(process.pid, log.parent), cpu_seconds(process.pid), \
                time.monotonic()
            time.sleep(plan.window_s)
            end_cpu_s, elapsed_s = cpu_seconds(process.pid), time.monotonic() - start_s
            open_end = _open_logs(process.pid, log.parent)
        finally:
            process.terminate()
            process.wait(30)
            load.join()
        if start_cpu_s is None or end_cpu_s is None:
            tail = (run_dir / "filebeat.out").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"Filebeat exited during cell {cell}:\n{tail}")
    cpu_s = end_cpu_s - start_cpu_s
    return {"input": cell.input, "idle_files": cell.idle_files, "scan_s": cell.scan_s, "window_s": round(elapsed_s, 2),
            "cpu_s": round(cpu_s, 3), "cpu_cores": cpu_s / elapsed_s, "open_files_start": open_start,
            "open_files_end": open_end}


def fit(rows: list[dict]) -> dict:
    """Least squares of CPU cores = base + scans/s x (per scan + idle files x per file), with R²."""
    scans = np.array([1.0 / r["scan_s"] for r in rows])
    idle = np.array([r["idle_files"] for r in rows], dtype=float)
    cores = np.array([r["cpu_cores"] for r in rows])
    design = np.column_stack([np.ones_like(scans), scans, scans * idle])
    (base, per_scan, per_file), *_ = np.linalg.lstsq(design, cores, rcond=None)
    residual = cores - design @ np.array([base, per_scan, per_file])
    spread = float(((cores - cores.mean()) ** 2).sum())
    return {"input": rows[0]["input"], "cells": len(rows), "base_cores": float(base), "cpu_per_scan_s": float(per_scan),
            "cpu_per_scanned_file_s": float(per_file),
            "r2": 1.0 - float((residual ** 2).sum()) / spread if spread else float("nan"),
            "max_residual_cores": float(np.abs(residual).max())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help=f"write {RESULT_FILE} (bench/result.py) into this directory")
    parser.add_argument("--quick", action="store_true", help="filestream only, 0 and 200 idle files, short windows")
    parser.add_argument("--inputs", help="comma-separated Filebeat inputs (default: filestream,log; quick: filestream)")
    parser.add_argument("--seed", type=int, default=0, help="the cells' shuffled order")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    if args.inputs:
        plan = Plan(tuple(args.inputs.split(",")), plan.idle_files, plan.warmup_s, plan.window_s)
    result = BenchResult.start("bench.scan_cost")
    filebeat = install_filebeat()
    cells = [Cell(i, n, s) for i in plan.inputs for n in plan.idle_files for s in SCAN_S]
    random.Random(args.seed).shuffle(cells)
    print(f"{len(cells)} cells of {plan.warmup_s:g} s warm-up + {plan.window_s:g} s, load {LOAD_EPS:g} ev/s",
          flush=True)
    print(f"{'input':>10} {'idle':>5} {'scan s':>6} | {'CPU s':>6} {'cores':>7} | {'open files':>10}", flush=True)
    rows = []
    for cell in cells:
        row = measure(cell, plan, filebeat)
        rows.append(row)
        print(f"{row['input']:>10} {row['idle_files']:>5} {row['scan_s']:>6g} | {row['cpu_s']:>6.2f} "
              f"{row['cpu_cores']:>7.4f} | {row['open_files_start']:>4} -> {row['open_files_end']}", flush=True)
    fits = [fit([r for r in rows if r["input"] == name]) for name in plan.inputs]
    for f in fits:
        print(f"{f['input']}: per scan {f['cpu_per_scan_s'] * 1e6:.1f} µs, per scanned file "
              f"{f['cpu_per_scanned_file_s'] * 1e6:.2f} µs, base {f['base_cores']:.4f} cores "
              f"(R² {f['r2']:.3f}, largest residual {f['max_residual_cores']:.4f} cores)")
    if args.out:
        finished = result.finish({"cells": rows, "fit": fits},
                                 {"load_eps": LOAD_EPS, "close_inactive_s": CLOSE_INACTIVE_S, "warmup_s": plan.warmup_s,
                                  "window_s": plan.window_s, "order": [vars(c) for c in cells]})
        print(f"result: {finished.write(args.out / RESULT_FILE)}")


if __name__ == "__main__":
    main()
