"""testbed.harness: the tuning run's verdict on a testbed window, the warm-up the window before."""

from models.observation import Observation
from testbed.harness import window_verdict

BASE = dict(duration_s=35.0, offered_eps=1750.0, throughput_eps=1750.0, p50_s=20.0, p95_s=30.0, p99_s=31.0,
            mean_s=20.0)


class _Telemetry:
    """Prometheus as the harness reads it: the warm-up [0, 10] and the window [10, 45] with their source backlogs."""

    def __init__(self, backlog_at_end: float) -> None:
        self.backlog_at_end = backlog_at_end

    def window(self, start: float, end: float) -> Observation:
        if (start, end) == (0.0, 10.0):
            return Observation(**(BASE | {"duration_s": 10.0}), backlog_events={"source": 10_000})
        assert (start, end) == (10.0, 45.0)
        return Observation(**BASE, backlog_events={"source": self.backlog_at_end})


def test_a_window_is_behind_when_the_backlog_before_kafka_grows_though_the_table_keeps_pace():
    """A window whose output matched its input but whose source backlog grew past the tolerated shortfall since the
    warm-up (Zero-Wait's queue in Filebeat) is behind."""
    assert window_verdict(_Telemetry(40_000), 0.0, 10.0, 45.0, 0.95).behind
    assert not window_verdict(_Telemetry(10_200), 0.0, 10.0, 45.0, 0.95).behind
