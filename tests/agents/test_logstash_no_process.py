"""The Logstash adapter without a Logstash process (none can run here): rendered files against golden
files written from the Logstash 7.17 reference, its own syntax check, and health read from a stub
that serves `_node/stats/pipelines` in the documented shape."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from agents.adapter import ValidationFailed, write_files
from agents.logstash import LogstashAdapter, LogstashLayout, check_pipeline_syntax
from models.presets import preset
from models.space import SearchSpace

GOLDEN = Path(__file__).parent / "golden"
LAYOUT = LogstashLayout(Path("/etc/logstash"), 5044, ("10.0.0.5:9092", "10.0.0.6:9092"), "nginx-access")


def _hybrid_config(adapter: LogstashAdapter):
    changes = {k: v for k, v in preset("hybrid").items() if k.startswith("logstash.")}
    return SearchSpace(adapter.params).config(changes | {"logstash.output.kafka.acks": "all",
                                                         "logstash.output.kafka.compression_type": "lz4"})


def test_no_logstash_process_rendered_files_match_the_golden_files():
    adapter = LogstashAdapter(LAYOUT)
    files = adapter.render(_hybrid_config(adapter))
    assert sorted(files) == ["conf.d/pipetune.conf", "logstash.yml", "pipelines.yml"]
    for name, text in files.items():
        assert text == (GOLDEN / Path(name).name).read_text(), name


def test_no_logstash_process_tuned_settings_live_in_the_reloadable_files():
    adapter = LogstashAdapter(LAYOUT)
    config = SearchSpace(adapter.params).config({"logstash.pipeline.workers": 6, "logstash.pipeline.batch.delay": 12.4,
                                                  "logstash.output.kafka.linger_ms": 5})
    files = adapter.render(config)
    [pipeline] = yaml.safe_load(files["pipelines.yml"])
    assert (pipeline["pipeline.workers"], pipeline["pipeline.batch.delay"]) == (6, 12)
    assert "linger_ms => 5\n" in files["conf.d/pipetune.conf"]
    settings = yaml.safe_load(files["logstash.yml"])
    assert settings["config.reload.automatic"] is True and settings["api.http.host"] == "127.0.0.1"
    assert not any(key.startswith("pipeline.") for key in settings)  # logstash.yml is read only at start


def test_no_logstash_process_validate_accepts_the_render_and_refuses_broken_syntax(tmp_path):
    adapter = LogstashAdapter(LAYOUT)
    write_files(tmp_path, adapter.render(_hybrid_config(adapter)))
    adapter.validate(tmp_path)
    for broken in ('output {\n  kafka {\n}\n', 'output { kafka { topic_id => "a } }\n', "}\n"):
        with pytest.raises(ValidationFailed):
            check_pipeline_syntax(broken)


def _stats(successes: int, failure_at: str | None) -> dict:
    reloads = {"successes": successes, "failures": 1 if failure_at else 0, "last_error": "bad config" if failure_at else None,
               "last_success_timestamp": "2024-05-01T10:00:00.000Z" if successes else None,
               "last_failure_timestamp": failure_at}
    return {"pipelines": {"pipetune": {"events": {"in": 10, "out": 10}, "reloads": reloads}}}


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


def test_no_logstash_process_health_from_a_stub_node_stats(stub_node_stats):
    port, answer = stub_node_stats
    adapter = LogstashAdapter(LogstashLayout(Path("/x"), 5044, ("k:9092",), "t", api_port=port))
    answer |= _stats(2, None)
    assert adapter.health().ok and adapter.reloads() == (2, 0)
    answer |= _stats(2, "2024-05-01T10:05:00.000Z")
    health = adapter.health()
    assert not health.ok and "bad config" in health.detail
    answer.clear()
    answer["pipelines"] = {}
    assert not adapter.health().ok
