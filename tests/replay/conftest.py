import json
from pathlib import Path

import pytest


@pytest.fixture
def read_events():
    """Read every JSON event of the given log files (single-line format)."""

    def read(*paths: Path) -> list[dict]:
        return [json.loads(line) for path in paths for line in path.read_text().splitlines() if line]

    return read
