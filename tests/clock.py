"""A clock the test controls, standing in for the `time` module of the code under test.

Time moves only when the code sleeps or the test calls `advance`, so what a test checks about
schedules, lags and expiries no longer depends on how loaded the machine running it is.
"""

from __future__ import annotations

import math
import types

import pytest


class VirtualClock:
    """`time()`, `perf_counter()` and `monotonic()` read one virtual clock; `sleep(s)` moves it by `s`."""

    def __init__(self, start: float = 1.8e9) -> None:
        self.now = float(start)

    def time(self) -> float:
        return self.now

    perf_counter = monotonic = time

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        later = self.now + max(0.0, seconds)
        # a sleep shorter than the clock's resolution still passes time, so a loop waiting for a due time ends
        self.now = later if later > self.now or seconds <= 0 else math.nextafter(self.now, math.inf)

    def install(self, monkeypatch: pytest.MonkeyPatch, *modules: types.ModuleType) -> "VirtualClock":
        """Make `modules` (each of which does `import time`) read this clock instead of the real one."""
        for module in modules:
            monkeypatch.setattr(module, "time", self)
        return self
