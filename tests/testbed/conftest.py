"""Fixtures the testbed's real-component tests share: one nginx per session in front of the session testbed."""

from __future__ import annotations

import http.client
from typing import Iterator

import pytest

from testbed import processes
from testbed.nginx_source import REQUEST_LOG_FORMAT, nginx_service
from testbed.pipeline import PipelineSpec
from tests.conftest import free_ports


def _ready(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/ready")
        return connection.getresponse().status == 204
    finally:
        connection.close()


@pytest.fixture(scope="session")
def nginx(testbed: PipelineSpec) -> Iterator[int]:
    """Debian's nginx logging each request (nginx's own `$request_id`) into the session testbed's log; its port."""
    port = free_ports(1)[0]
    service = nginx_service(testbed.node_layouts()[0], port, log_format=REQUEST_LOG_FORMAT)
    processes.start(service)
    try:
        processes.wait_ready(service, lambda: _ready(port), 30.0)
        yield port
    finally:
        processes.stop(service)
