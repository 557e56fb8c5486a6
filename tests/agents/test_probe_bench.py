"""bench/probe.py against the real broker: every produced record is consumed and parsed."""

import secrets

import pytest

from bench.probe import delete_topic, drain, fill

pytestmark = pytest.mark.slow


def test_bench_drains_every_record(testbed):
    topic = "bench-" + secrets.token_hex(3)
    try:
        fill(testbed.bootstrap, topic, 5000, "benchrun")
        parsed, seconds = drain(testbed.bootstrap, topic, 5000)
    finally:
        delete_topic(testbed.bootstrap, topic)
    assert 0 < parsed <= 5000 and seconds > 0
