"""What `pipetune autotune` shows of a run: each window numbered within the run, with its cost; the end summary;
and a plot that does not replace an earlier run's."""

import io

from rich.console import Console

from cli.autotune_view import WindowNumbers, WindowView, new_plot_path, pool_line, print_summary
from controller.state import Decision


def _decision(window: int, action: str = "hold") -> Decision:
    return Decision(window=window, t_s=30.0 * window, config={}, action=action, reason="converged",
                    observed={"p95_s": 1.0, "throughput_ratio": 1.0, "offered_eps": 300.0})


def _numbers(text: str) -> list[str]:
    return [line.split("  ")[0] for line in text.splitlines() if line.startswith(("window", "pool"))]


def test_a_resumed_run_numbers_its_windows_within_its_own_total():
    """The daemon's numbering carries on across a resumed state directory (here 30 windows in, after a
    warm-up it could not read): the live output still counts this run's 3 windows, and the revert on exit
    is no window (issue 39: "window 2/25" ... "window 26/25")."""
    out = io.StringIO()
    with WindowView(3, Console(file=out, width=200)) as view:  # not a terminal: one plain line a window
        for window in (31, 32, 33):
            view.add(_decision(window))
        view.add(_decision(34, "revert"))
    assert _numbers(out.getvalue()) == ["window 1/3", "window 2/3", "window 3/3", "window on exit"]


def test_pools_are_numbered_each_on_its_own():
    numbers = WindowNumbers(None)
    lines = [pool_line(pool, _decision(window), numbers) for pool, window in (("web", 7), ("api", 2), ("web", 8))]
    assert _numbers("\n".join(lines)) == ["pool web: window 1", "pool api: window 1", "pool web: window 2"]


def test_a_resumed_run_writes_its_plot_beside_the_earlier_ones(tmp_path):
    assert new_plot_path(tmp_path) == tmp_path / "autotune.png"
    (tmp_path / "autotune.png").write_bytes(b"first run")
    assert new_plot_path(tmp_path) == tmp_path / "autotune-2.png"
    (tmp_path / "autotune-2.png").write_bytes(b"second run")
    assert new_plot_path(tmp_path) == tmp_path / "autotune-3.png"


def test_each_window_shows_the_shippers_cpu_and_the_requests_into_kafka_beside_its_p95():
    """Filebeat's and Logstash's CPU together as a share of one core (every node's), Produce requests a second; a
    window logged before costs were, or not measured, shows a dash."""
    out = io.StringIO()
    costly = _decision(1)
    costly.observed |= {"cpu_cores": {"filebeat": 0.25, "filebeat-node-2": 0.125, "broker-1": 0.5, "probe": 0.1},
                        "produce_requests_per_s": 161.4}
    with WindowView(2, Console(file=out, width=200)) as view:
        view.add(costly)
        view.add(_decision(2))
    first, second = out.getvalue().split("window 2/2")
    assert "P95 1.000 s  CPU 37.5%  161 req/s  out/in 100.0%" in first
    assert "P95 1.000 s  CPU –  – req/s  out/in 100.0%" in second


def test_the_end_summary_shows_what_each_config_costs():
    out = io.StringIO()
    measured = {"p95_s": 2.0, "p50_s": 1.0, "throughput_ratio": 1.0, "cpu_cores": {"filebeat": 0.03, "kafka": 0.4},
                "produce_requests_per_s": 40.0}
    print_summary(Console(file=out, width=200), {"final": measured, "defaults": measured | {"p95_s": 4.0},
                                                 "hybrid": measured})
    assert "defaults:  P95 4.000 s  P50 1.000 s  out/in 100.0%  CPU 3.0%  40 req/s\n    P95 ×2.0" in out.getvalue()
