"""Puts a Python process on a `testbed.faketime.FakeClock`: its wall clock (`time.time`, `time.time_ns`) reads the
clock's file again every 0.1 s and runs that far off the real one; its monotonic clock stays. libfaketime cannot:
under it Python 3.11's `time.sleep` fails (EINVAL from its absolute-time `clock_nanosleep`)."""

import os
import time

_PATH = os.environ.get("PIPETUNE_FAKE_CLOCK")
if _PATH:
    _real_time, _real_time_ns, _monotonic = time.time, time.time_ns, time.monotonic
    _read = {"offset_s": 0.0, "at": -1.0}

    def _offset_s() -> float:
        now = _monotonic()
        if now - _read["at"] >= 0.1:
            try:
                with open(_PATH) as clock:
                    _read["offset_s"] = float(clock.read())
            except (OSError, ValueError):
                pass  # keep the last offset read
            _read["at"] = now
        return _read["offset_s"]

    time.time = lambda: _real_time() + _offset_s()
    time.time_ns = lambda: _real_time_ns() + round(_offset_s() * 1e9)
