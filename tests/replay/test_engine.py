"""The open-loop scheduler and the sinks, against real files, a real HTTP server and stdout."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

import replay.engine
import replay.sinks
from replay import arrivals
from replay.engine import Workload, run
from replay.events import Request, prepare
from replay.manifest import build_manifest
from replay.sinks import SinkSpec
from tests.clock import VirtualClock


@pytest.fixture
def clock(monkeypatch) -> VirtualClock:
    """The scheduler's clock, under the test's control: send times and lags follow from the schedule and
    the sink, not from how busy the machine is."""
    return VirtualClock().install(monkeypatch, replay.engine, replay.sinks)


def test_five_seconds_at_2000_eps_into_a_file_has_every_event_on_time(tmp_path, read_events, clock):
    log = tmp_path / "access.log"
    result = run(arrivals.steady(2000, 5), SinkSpec("file", str(log)), run_id="t1")
    events = read_events(log)
    assert len(events) == result.events == 10000
    assert len({e["request_id"] for e in events}) == 10000
    assert {e["request_id"] for e in events} == {f"t1-{i:08d}" for i in range(10000)}
    assert result.lag_ms(99) < 50
    # ts_nginx is the actual write time: never before the scheduled time, and close to it
    lateness = np.array([e["ts_nginx"] - e["ts_scheduled"] for e in events])
    assert lateness.min() >= -0.002 and np.percentile(lateness, 99) < 0.05


def test_a_slow_sink_shows_as_send_lag_not_as_a_stretched_schedule(tmp_path, clock):
    class SlowSink:
        prepare = staticmethod(prepare)

        def __init__(self):
            self.n = 0

        def send(self, batch, ts):
            clock.sleep(0.05)  # a sink that takes 50 ms per write
            self.n += len(batch)

        def wait(self, timeout_s):
            clock.sleep(timeout_s)

        def close(self):
            from replay.sinks import SinkStats
            return SinkStats(delivered=self.n)

    class SlowSpec(SinkSpec):
        def open(self, process_index=0, processes=1):
            return SlowSink()

    result = run(arrivals.steady(1000, 2), SlowSpec("slow"), run_id="slow")
    assert result.events == 2000 and result.sink.delivered == 2000
    # events kept their schedule: the whole run still took about 2 s, and lateness was measured
    assert result.duration_s < 2.5
    assert result.lag_ms(99) >= 40


def test_rotation_under_load_loses_and_duplicates_nothing(tmp_path, read_events):
    log = tmp_path / "access.log"
    result = run(arrivals.steady(5000, 3), SinkSpec("file", str(log), rotate_bytes=100_000), run_id="rot")
    files = sorted(tmp_path.glob("access.log*"))
    assert len(files) > 10 and result.sink.detail["rotations"] == len(files) - 1
    events = read_events(*files)
    ids = [e["request_id"] for e in events]
    assert len(ids) == len(set(ids)) == result.events == 15000
    assert all(f.stat().st_size <= 100_000 for f in files)
    # logrotate numbering: .1 is the newest rotated file, higher numbers are older
    first_seq = lambda f: int(json.loads(f.read_text().splitlines()[0])["request_id"].split("-")[1])
    rotated = sorted(files[1:], key=lambda f: int(f.name.rsplit(".", 1)[1]))
    assert [first_seq(f) for f in rotated] == sorted((first_seq(f) for f in rotated), reverse=True)


def test_rotation_keeps_at_most_rotate_keep_files(tmp_path):
    log = tmp_path / "access.log"
    run(arrivals.steady(3000, 2), SinkSpec("file", str(log), rotate_bytes=50_000, rotate_keep=3), run_id="k")
    assert sorted(f.name for f in tmp_path.glob("access.log*")) == ["access.log", "access.log.1", "access.log.2",
                                                                    "access.log.3"]


def test_multiline_json_mode_writes_pretty_objects(tmp_path):
    log = tmp_path / "access.log"
    run(arrivals.steady(200, 1), SinkSpec("file", str(log)), Workload(fmt="multiline-json"), run_id="ml")
    text = log.read_text()
    objects = [json.loads("{" + chunk) for chunk in text.split("\n{")[1:]] + [json.loads(text.split("\n{")[0])]
    assert len(objects) == 200 and all("ts_nginx" in o and "request_id" in o for o in objects)
    assert text.count("\n") > 200 * 10  # one field per line


def test_several_processes_share_the_schedule_and_ids_stay_unique(tmp_path, read_events):
    log = tmp_path / "access.log"
    result = run(arrivals.steady(4000, 2), SinkSpec("file", str(log)), run_id="mp", processes=2)
    files = sorted(tmp_path.glob("access-p*.log"))
    assert [f.name for f in files] == ["access-p0.log", "access-p1.log"]
    ids = [e["request_id"] for e in read_events(*files)]
    assert len(ids) == len(set(ids)) == 8000 == result.events


def test_manifest_accounts_for_every_event(tmp_path, clock):
    result = run(arrivals.step_burst(500, 6, 2, 4, 2.0), SinkSpec("file", str(tmp_path / "a.log")), run_id="man")
    manifest = build_manifest(result, "json", "file")
    assert manifest["events"] == sum(manifest["per_second"]) == result.events == 4000
    assert manifest["request_id_format"].format(run_id="man", seq=manifest["last_seq"]) == "man-00003999"
    assert manifest["per_second"][:6] == [500, 500, 1000, 1000, 500, 500]
    assert [round(p.achieved_eps) for p in result.phases] == [500, 1000, 500]


@pytest.fixture
def http_server():
    received = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            received.append((self.command, self.path, self.headers["X-Request-ID"]))
            self.send_response(404 if self.path.startswith("/missing") else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = do_DELETE = _answer

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()


def test_http_sink_sends_each_event_as_its_request(http_server):
    url, received = http_server
    result = run(arrivals.steady(200, 2), SinkSpec("http", url), run_id="h")
    assert result.sink.delivered == 400 and not result.sink.failed_request_ids
    assert sorted(r[2] for r in received) == [f"h-{i:08d}" for i in range(400)]
    assert {r[0] for r in received} >= {"GET", "POST"}
    assert all(r[1].startswith("/api/") for r in received)


def test_http_failures_are_reported_not_hidden():
    result = run(arrivals.steady(50, 1), SinkSpec("http", "http://127.0.0.1:9"), run_id="dead")  # discard port
    assert result.events == 50
    assert len(result.sink.failed_request_ids) == 50 and result.sink.delivered == 0


def test_stdout_sink_writes_json_lines(capsys):
    run(arrivals.steady(100, 1), SinkSpec("stdout"), run_id="o")
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["request_id"] for line in lines] == [f"o-{i:08d}" for i in range(100)]


def test_a_batch_larger_than_the_rotation_size_is_spread_over_files_of_whole_lines(tmp_path, read_events):
    from replay.sinks import FileSink

    sink = FileSink(tmp_path / "access.log", rotate_bytes=20_000)
    batch = [prepare(i, "big", 1.7e9, Request.of({"uri": f"/x/{i}"}), "json") for i in range(1000)]
    sink.send(batch, 1.7e9)
    assert sink.close().detail["rotations"] > 1
    files = list(tmp_path.glob("access.log*"))
    assert all(f.stat().st_size <= 20_000 for f in files)
    assert sorted(e["request_id"] for e in read_events(*files)) == [f"big-{i:08d}" for i in range(1000)]
