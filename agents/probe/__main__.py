"""`python -m agents.probe`: the probe as a long-running process (the testbed starts it; on an operator's pipeline,
the operator does: docs/agents.md). `--manifests` and `--reports` are for pipetune's own replay only: its runs
announced in manifests and reported on with the ledger; without them the probe measures whatever the topic
carries."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from pathlib import Path

from prometheus_client import ProcessCollector, start_http_server

from agents.kafka import properties_file
from agents.process_stats import ProcessCpuCollector
from agents.probe.consumer import Probe, ProbeOptions, consumer_settings
from agents.probe.ledger import Ledger
from agents.probe.metrics import ProbeMetrics
from agents.probe.runs import RunTracker
from models.event_time import FORMATS, EventTimeSpec


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m agents.probe", description=__doc__)
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers, host:port")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group-id", default="pipetune-probe")
    parser.add_argument("--metrics-port", type=int, required=True, help="Prometheus metrics on 127.0.0.1:PORT")
    parser.add_argument("--manifests", type=Path, help="directory of replay manifests (pipetune's replay only)")
    parser.add_argument("--reports", type=Path, help="directory the run reports and the ledger's checkpoint go to "
                                                     "(with --manifests)")
    parser.add_argument("--late-after-s", type=float, default=10.0)
    parser.add_argument("--consumer-properties", type=Path, metavar="FILE",
                        help="librdkafka settings (name=value lines), read at start: the agent renders them")
    parser.add_argument("--cpu-of", action="append", default=[], metavar="NAME=PID_FILE",
                        help="export the CPU time of the process in PID_FILE as component NAME (repeatable)")
    when = parser.add_argument_group("event time", "where each line's own write time is and how it is written")
    when.add_argument("--event-time-field", metavar="FIELD",
                      help="JSON field (dotted path) of the write time (default: ts_nginx, unless --event-time-regex)")
    when.add_argument("--event-time-regex", metavar="REGEX",
                      help="for plain lines: a regex whose group `time` (else the first group) is the write time")
    when.add_argument("--event-time-format", choices=FORMATS, default="epoch_s")
    when.add_argument("--event-time-timezone", default="UTC", help="IANA zone of times written without one")
    when.add_argument("--backfill-after-s", type=float, default=ProbeOptions.backfill_after_s,
                      help="events older than this are counted as backfill, out of the histograms")
    when.add_argument("--future-tolerance-s", type=float, default=ProbeOptions.future_tolerance_s,
                      help="events further ahead than this are counted as future, out of the histograms")
    when.add_argument("--sample-above-eps", type=float, default=ProbeOptions.sample_above_eps,
                      help="above this rate observe one event in N (0: every event; the ledger needs every one)")
    when.add_argument("--canary-grace-s", type=float, default=ProbeOptions.canary_grace_s,
                      help="a heartbeat sequence gap is lost once it stays open this long")
    when.add_argument("--clock-offsets", type=Path, metavar="FILE",
                      help="per-node clock offsets (JSON the controller writes), re-read when it changes")
    args = parser.parse_args()
    if (args.manifests is None) != (args.reports is None):
        parser.error("--manifests and --reports go together (pipetune's replay runs), or neither")
    return args


def probe_options(args: argparse.Namespace) -> ProbeOptions:
    """The options the flags give; exits naming the flag when one is out of range."""
    field = args.event_time_field if args.event_time_field or args.event_time_regex else "ts_nginx"
    try:
        spec = EventTimeSpec(args.event_time_format, field=field, regex=args.event_time_regex,
                             timezone=args.event_time_timezone)
        return ProbeOptions(spec, args.backfill_after_s, args.future_tolerance_s, args.sample_above_eps,
                            args.canary_grace_s, args.clock_offsets)
    except ValueError as err:
        raise SystemExit(f"python -m agents.probe: {err}") from None


def main() -> None:
    args = _arguments()
    options = probe_options(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    metrics = ProbeMetrics()
    ProcessCollector(registry=metrics.registry)
    pid_files = dict(item.split("=", 1) for item in args.cpu_of)
    metrics.registry.register(ProcessCpuCollector({name: Path(path) for name, path in pid_files.items()}))
    # A recreated probe (the agent restarts it to change its consumer settings) carries on counting.
    checkpoint = args.reports / "ledger.checkpoint" if args.reports else None
    ledger = Ledger.load(checkpoint, args.late_after_s) if checkpoint else Ledger(args.late_after_s)
    tracker = None
    if args.manifests:
        args.manifests.mkdir(parents=True, exist_ok=True)
        tracker = RunTracker(ledger, metrics, args.manifests, args.reports)
    settings = consumer_settings(args.bootstrap, args.group_id)
    if args.consumer_properties:
        settings |= properties_file.read(args.consumer_properties.read_text())
    probe = Probe(settings, args.topic, metrics, ledger, options)
    start_http_server(args.metrics_port, addr="127.0.0.1", registry=metrics.registry)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    # The receiving thread stamps arrivals: it must get the interpreter within well under a millisecond
    # of a fetch, not after the default 5 ms that parsing or a metrics scrape could hold it.
    sys.setswitchinterval(0.0002)

    def bookkeeping() -> None:
        probe.reader.end_pass()
        if tracker:
            tracker.scan()
            with probe.lock:
                tracker.write_reports(time.time())

    try:
        probe.run(stop, bookkeeping)
    finally:
        probe.close()  # commits the consumer's offsets: the checkpoint holds exactly what came before them
        if tracker and checkpoint:  # --manifests and --reports go together
            with probe.lock:
                tracker.hand_over(checkpoint, time.time())


if __name__ == "__main__":
    main()
