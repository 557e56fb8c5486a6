"""Fixtures the testbed's real-component tests share: one nginx per session in front of the session testbed."""

from __future__ import annotations

from typing import Iterator

import pytest

from testbed import processes
from testbed.nginx_source import REQUEST_LOG_FORMAT, answers, nginx_service
from testbed.pipeline import PipelineSpec
from tests.conftest import free_ports


@pytest.fixture(scope="session")
def nginx(testbed: PipelineSpec) -> Iterator[int]:
    """Debian's nginx logging each request (nginx's own `$request_id`) into the session testbed's log; its port."""
    port = free_ports(1)[0]
    service = nginx_service(testbed.node_layouts()[0], port, log_format=REQUEST_LOG_FORMAT)
    processes.start(service)
    try:
        processes.wait_ready(service, lambda: answers(port), 30.0)
        yield port
    finally:
        processes.stop(service)
