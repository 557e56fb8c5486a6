"""schemathesis against the running app's own OpenAPI schema: no 5xx, every response as documented.

The state directory holds a few windows of a real twin daemon run, so the read endpoints answer with
real decisions and status; mutating calls carry the token (schemathesis also replays them without it).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest
import schemathesis
from schemathesis.checks import positive_data_acceptance
from hypothesis import HealthCheck, settings

from api.app import create_app
from controller.state import StateStore
from tests.api.conftest import AUTH, TOKEN
from tests.api.test_daemon_steering import make_daemon

# The app reads the directory at each request, so the schema can be loaded (at collection) before it is filled.
STORE = StateStore(tempfile.mkdtemp(prefix="pipetune-schemathesis-"))
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(STORE, TOKEN))


@pytest.fixture(scope="module", autouse=True)
def daemon_history() -> Iterator[None]:
    daemon = make_daemon(STORE)
    for _ in range(3):
        daemon.step()
    yield
    shutil.rmtree(Path(STORE.dir), ignore_errors=True)


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case) -> None:
    # A schema-valid override may still be refused (422) by the policy another call just stored: that
    # refusal is the point, so "valid data must be accepted" is the one check left out.
    case.call_and_validate(headers=AUTH, excluded_checks=[positive_data_acceptance])
