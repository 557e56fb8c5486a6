"""Judge a recorded live run's windows (`observations.jsonl` of a daemon's state) with `models.verdict` as the
daemon does (the window before, the backlog after the last window of the pipeline's own load), and print each
window's figures and verdict: spurious drains on a live pipeline would show here.

    python docs/evidence/bench/tail-drain-run22/live_windows.py docs/evidence/live/state/observations.jsonl
"""

import json
import sys

from models.observation import Observation
from models.policy import Policy
from models.space import PIPELINE_SPACE
from models.verdict import Drain, buffered_events, judge

previous, settled = None, None
for line in open(sys.argv[1]):
    row = json.loads(line)
    figures = {k: v for k, v in row["observation"].items()
               if k in Observation.__dataclass_fields__ and k != "clock_offsets"}
    observation = Observation(**figures)
    config = PIPELINE_SPACE.config(row["config"])
    verdict = judge(observation, Policy(), config, previous, settled)
    previous = observation
    if verdict.ok and verdict.drain is Drain.NONE:
        settled = observation.backlog_total
    print(f"{observation.offered_eps:5.0f} ev/s out/in {observation.throughput_ratio:.4f} "
          f"backlog {observation.backlog_total:5d} buffered {buffered_events(config, observation.offered_eps):5.0f} "
          f"P50 {observation.p50_s * 1e3:6.1f} ms P95 {observation.p95_s * 1e3:6.1f} ms "
          f"{'ok' if verdict.ok else 'breach'} drain={verdict.drain.value}")
