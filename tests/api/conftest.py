"""An API over a fresh state directory, with its token."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from controller.state import StateStore

TOKEN = "s3cret-token-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def store(tmp_path) -> StateStore:
    return StateStore(tmp_path / "state")


@pytest.fixture
def client(store: StateStore) -> TestClient:
    return TestClient(create_app(store, TOKEN))
