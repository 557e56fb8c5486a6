"""The Logstash adapter without a Logstash process (none can run here): the operator's golden node
(`golden/operator/logstash`) patched through the adapter, the reader refusing what it cannot parse, a
stand-in `bin/logstash` receiving the staged pipeline for `--config.test_and_exit`, and health read from a
stub that serves `_node/stats/pipelines` in the documented shape."""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from agents.adapter import ValidationFailed
from agents.logstash.adapter import LogstashAdapter
from agents.logstash.conf import LogstashConfigError
from models.space import SearchSpace

GOLDEN = Path(__file__).parents[1] / "golden" / "operator" / "logstash"


@pytest.fixture
def node(tmp_path: Path) -> Path:
    shutil.copytree(GOLDEN, tmp_path / "logstash")
    return tmp_path / "logstash"


def _config(adapter: LogstashAdapter, **changes: object):
    return SearchSpace(adapter.params).config({f"logstash.{k.replace('__', '.')}": v for k, v in changes.items()})


def test_no_logstash_process_a_change_patches_only_the_tuned_keys(node):
    adapter = LogstashAdapter(node, "web", "kafka-main")
    before = {p: p.read_text() for p in node.rglob("*") if p.is_file()}
    files = adapter.patch(_config(adapter, pipeline__workers=6, pipeline__batch__delay=12.4,
                                  output__kafka__linger_ms=5))
    assert sorted(files) == [node / "conf.d" / "20-web.conf", node / "pipelines.yml"]
    pipelines = files[node / "pipelines.yml"]
    assert "  pipeline.workers: 6\n" in pipelines and "  pipeline.batch.delay: 12\n" in pipelines
    assert "queue.type: persisted      # survive restarts" in pipelines
    assert pipelines.split("- pipeline.id: heartbeat")[1] == before[node / "pipelines.yml"].split(
        "- pipeline.id: heartbeat")[1]
    conf = files[node / "conf.d" / "20-web.conf"]
    assert "    linger_ms => 5     # batch for throughput\n" in conf
    assert "      linger_ms => 5\n      acks => \"all\"" in conf  # the other kafka output is untouched
    assert {p: p.read_text() for p in node.rglob("*") if p.is_file()} == before  # nothing written yet
    adapter.validate(files)


def test_no_logstash_process_an_unknown_pipeline_or_output_is_refused_at_start(node):
    with pytest.raises(LogstashConfigError, match="no pipeline.id 'api'"):
        LogstashAdapter(node, "api", "kafka-main")
    with pytest.raises(LogstashConfigError, match="kafka output with id 'kafka-x'"):
        LogstashAdapter(node, "web", "kafka-x")


def test_no_logstash_process_the_reader_refuses_a_broken_file_naming_its_line(node):
    adapter = LogstashAdapter(node, "web", "kafka-main")
    files = adapter.patch(_config(adapter))
    conf = node / "conf.d" / "20-web.conf"
    with pytest.raises(ValidationFailed, match=r"20-web.conf:\d+:\d+"):
        adapter.validate({**files, conf: files[conf].replace("topic_id => \"web-access\"", "topic_id => \"web")})


def test_no_logstash_process_a_logstash_binary_checks_the_staged_pipeline(node, tmp_path):
    # A stand-in for bin/logstash: records its arguments and the staged files, fails when told to.
    seen = tmp_path / "seen"
    binary = tmp_path / "bin-logstash"
    binary.write_text(f"""#!/bin/sh
dir=$(echo "$@" | sed 's/.* -f \\([^ ]*\\) .*/\\1/')
echo "$@" > {seen}.args
ls "$dir" > {seen}.files
cat "$dir/20-web.conf" > {seen}.conf
grep -q 'linger_ms => 77' "$dir/20-web.conf" && {{ echo "linger refused"; exit 1; }}
exit 0
""")
    binary.chmod(0o755)
    adapter = LogstashAdapter(node, "web", "kafka-main", binary)
    files = adapter.patch(_config(adapter, output__kafka__linger_ms=9))
    adapter.validate(files)
    assert "--config.test_and_exit" in (tmp_path / "seen.args").read_text()
    assert (tmp_path / "seen.files").read_text().split() == ["10-beats.conf", "20-web.conf"]
    assert "linger_ms => 9" in (tmp_path / "seen.conf").read_text()
    with pytest.raises(ValidationFailed, match="linger refused"):
        adapter.validate(adapter.patch(_config(adapter, output__kafka__linger_ms=77)))
    assert not list(node.glob(".pipetune-check-*"))  # the staged copy is gone


def _stats(successes: int, failure_at: str | None) -> dict:
    reloads = {"successes": successes, "failures": 1 if failure_at else 0, "last_error": "bad config" if failure_at else None,
               "last_success_timestamp": "2024-05-01T10:00:00.000Z" if successes else None,
               "last_failure_timestamp": failure_at}
    return {"pipelines": {"web": {"events": {"in": 10, "out": 10}, "reloads": reloads}}}


@pytest.fixture
def stub_node_stats() -> Iterator[tuple[int, dict]]:
    """An HTTP stub of Logstash's node API; the test sets what it answers."""
    answer: dict = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server hook name
            body = json.dumps(answer).encode()
            self.send_response(200 if self.path == "/_node/stats/pipelines" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], answer
    finally:
        server.shutdown()


def test_no_logstash_process_health_from_a_stub_node_stats(stub_node_stats, node):
    port, answer = stub_node_stats
    adapter = LogstashAdapter(node, "web", "kafka-main", api_port=port)
    answer |= _stats(2, None)
    assert adapter.health().ok and adapter.reloads() == (2, 0)
    answer |= _stats(2, "2024-05-01T10:05:00.000Z")
    health = adapter.health()
    assert not health.ok and "bad config" in health.detail
    answer.clear()
    answer["pipelines"] = {}
    assert not adapter.health().ok


def test_no_logstash_process_a_file_broken_since_the_start_refuses_the_patch(node):
    adapter = LogstashAdapter(node, "web", "kafka-main")
    conf = node / "conf.d" / "20-web.conf"
    conf.write_text(conf.read_text().replace('topic_id => "web-access"', 'topic_id => "web'))
    with pytest.raises(ValidationFailed, match=r"20-web.conf:\d+:\d+"):
        adapter.patch(_config(adapter))
