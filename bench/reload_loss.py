"""Does changing a Filebeat input key under load lose events? (issue #14)

On its own testbed (ports 400 above the default pipeline's, run dir `reload-loss`), with a small memory
queue so that the harvester mostly waits to publish, the replay writes a steady load into the log while
the bench changes `filebeat.max_backoff` back and forth through the node agent, `--changes` times,
`--every` seconds apart. The probe's ledger then says how many of the replayed events never reached
Kafka, and for each lost event the sample gives its write time, which the bench sets against the
change that followed it. The agent's answer to each change says how it was put in force: "filebeat
restarted" since the fix (before it, "filebeat inputs reloaded", Filebeat's live input reload, which
lost 14 of 420,000 events: before-fix.json in docs/evidence/bench/reload-loss/ at 1773e7a).

    python -m bench.reload_loss [--changes 40] [--every 3] [--rate 2000] [--queue-events 64]
                                [--bulk-max-size 32] [--out docs/evidence/reload-loss]

Starts its testbed (and stops it again); writes result.json (bench/result.py) to --out and prints its figures.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from agents.probe.ledger import split_request_id
from agents.probe.runs import read_report
from bench.result import RESULT_FILE, BenchResult
from models.presets import preset
from models.space import PIPELINE_SPACE, Config
from replay.profiles import Profile, WorkloadSpec
from testbed import lifecycle
from testbed.calibration_design import LOW_LATENCY
from testbed.harness import BackgroundLoad, prime
from testbed.pipeline import DEFAULT_PIPELINE, PipelineSpec, load_pipeline

ROOT = Path(__file__).resolve().parents[1]
PORT_SHIFT = 400
BACKOFFS_S = (0.05, 0.07)  # the two values `filebeat.max_backoff` alternates between (both low latency)


# Each restart pauses Filebeat for 1-2 s of every `--every` 3 s (one in twenty waited 15 s for it to stop), so the
# changes build a backlog that is shipped after them: counted lost at the default 10 s grace, half the events of a
# run at 2,000 ev/s read "lost" that were still in the log. Lost here means never shipped.
DRAIN_S = 300.0


def reload_spec() -> PipelineSpec:
    """The default pipeline on ports of its own and a run dir of its own, its probe counting an event lost only
    `DRAIN_S` after its run ended."""
    spec = load_pipeline(DEFAULT_PIPELINE).beside("reload-loss", PORT_SHIFT)
    return spec.model_copy(update={"probe": spec.probe.model_copy(update={"late_after_s": DRAIN_S})})


def busy_config(queue_events: int, bulk_max_size: int) -> Config:
    """Low latency, with a queue small enough that the harvester waits on it whenever the log has a backlog."""
    return PIPELINE_SPACE.config(LOW_LATENCY | {"filebeat.queue.mem.events": queue_events,
                                                "filebeat.output.bulk_max_size": bulk_max_size},
                                 base=preset("defaults"))


def change_inputs(spec: PipelineSpec, config: Config, changes: int, every_s: float) -> list[dict]:
    """`changes` input changes through the agent, `every_s` apart; each one's time and the agent's answer."""
    made = []
    for i in range(changes):
        changed = PIPELINE_SPACE.config({"filebeat.max_backoff": BACKOFFS_S[(i + 1) % 2]}, base=config)
        at = time.time()
        message = lifecycle.apply(spec, changed)
        took_s = time.time() - at
        made.append({"at": at, "took_s": round(took_s, 3), "message": message})
        time.sleep(max(0.0, every_s - took_s))
    return made


def lost_times(spec: PipelineSpec, run_ids: list[str]) -> list[float]:
    """The write time of each lost event the probe's reports sample (evenly spaced steady runs)."""
    times = []
    for run_id in run_ids:
        report = read_report(spec.resolved_run_dir() / "reports", run_id)
        manifest = json.loads((spec.resolved_run_dir() / "manifests" / f"{run_id}.json").read_text())
        spacing_s = manifest["duration_s"] / max(manifest["events"], 1)
        for request_id in report.lost_sample if report else []:
            parsed = split_request_id(request_id)
            if parsed is not None:
                times.append(manifest["started_at"] + parsed[1] * spacing_s)
    return sorted(times)


def figure_row(result: dict) -> dict:
    """The run in one row: what was changed how often, how it was put in force, and what the ledger counted."""
    return {"changes": result["changes"], "every_s": result["every_s"], "rate_eps": result["rate_eps"],
            "put_in_force_by": ", ".join(result["actions"]), "events": result["ledger"]["expected"],
            "lost": result["ledger"]["lost"], "duplicates": result["ledger"]["duplicates"],
            "changes_followed_by_loss": result["changes_followed_by_loss"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=40)
    parser.add_argument("--every", type=float, default=3.0, help="seconds between changes")
    parser.add_argument("--rate", type=float, default=2000.0, help="events/s the replay writes")
    parser.add_argument("--queue-events", type=int, default=64)
    parser.add_argument("--bulk-max-size", type=int, default=32)
    parser.add_argument("--out", type=Path, default=ROOT / "docs/evidence/reload-loss")
    args = parser.parse_args()
    started = BenchResult.start("bench.reload_loss")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stop still brings its testbed down
    spec, config = reload_spec(), busy_config(args.queue_events, args.bulk_max_size)
    lifecycle.down(spec)
    lifecycle.up(spec, config)
    try:
        prime(spec, config)
        began = time.time()
        with BackgroundLoad(spec, WorkloadSpec(Profile.steady, args.rate, args.changes * args.every)) as load:
            time.sleep(2.0)  # the load under way before the first change
            changes = change_inputs(spec, config, args.changes, args.every)
            time.sleep(2.0)
        ledger = load.ledger()
        lost_at = lost_times(spec, load.run_ids)
    finally:
        lifecycle.down(spec)
    starts = [c["at"] for c in changes]
    # For each lost event: how long before the next change began it was written (None: after the last).
    following = [next((i for i, s in enumerate(starts) if s >= t), None) for t in lost_at]
    before_change = [None if i is None else round(starts[i] - t, 2) for i, t in zip(following, lost_at)]
    actions = sorted({c["message"] for c in changes})
    result = {"changes": len(changes), "every_s": args.every, "rate_eps": args.rate,
              "queue_events": args.queue_events, "bulk_max_size": args.bulk_max_size,
              "actions": actions, "change_took_s_max": max(c["took_s"] for c in changes),
              "ledger": ledger, "lost_written_s_before_next_change": before_change,
              "changes_followed_by_loss": len({i for i in following if i is not None}),
              "load_s": round(time.time() - began, 1)}
    started.finish([figure_row(result)], result | {"change_log": changes}).write(args.out / RESULT_FILE)
    print(f"{len(changes)} input changes, {args.every:g} s apart, at {args.rate:g} events/s "
          f"(queue.mem.events {args.queue_events}, bulk_max_size {args.bulk_max_size})")
    print(f"put in force by: {', '.join(actions)} (slowest change {result['change_took_s_max']:.1f} s)")
    print(f"events: {ledger['expected']} written, {ledger['lost']} lost, {ledger['duplicates']} duplicated, "
          f"{ledger['late']} late")
    print(f"lost events, seconds written before the next change: {before_change}")
    print(f"changes with a lost event written before them (and after the one before): "
          f"{result['changes_followed_by_loss']} of {len(changes)}")


if __name__ == "__main__":
    main()
