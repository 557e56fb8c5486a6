"""agents/runtimes.py's process runtime: the component process the agent started is found again after the agent
dies, whenever it died."""

import json
import secrets
import subprocess
import sys
import time

from agents.process_stats import start_ticks
from agents.runtimes import STARTED_AS, ProcessRuntime

SLEEPER = (sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)")


def test_a_component_started_by_an_agent_killed_before_it_recorded_the_pid_is_found_and_not_started_twice(tmp_path):
    # the state a SIGKILL leaves between the start and the pid's record: the file names the token, the process runs
    runtime = ProcessRuntime("filebeat", SLEEPER, tmp_path)
    token = secrets.token_hex(8)
    runtime.pid_file.write_text(json.dumps({"token": token, "argv": list(SLEEPER)}))
    orphan = subprocess.Popen(SLEEPER, start_new_session=True, env={STARTED_AS: token}, stdout=subprocess.PIPE)
    try:
        # Popen returns once the exec began, before the kernel has set the new environment out where /proc shows
        # it (a loaded machine showed it empty): the agent that comes back after a kill comes back well after that
        assert orphan.stdout.readline() == b"up\n"
        restarted = ProcessRuntime("filebeat", SLEEPER, tmp_path)  # the agent, started again (seconds later)
        deadline = time.monotonic() + 10.0
        while restarted.pid() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert restarted.pid() == orphan.pid and restarted.running()
        restarted.restart()  # stops the one it found before it starts the next
        assert orphan.wait(timeout=30) is not None
        assert restarted.pid() not in (None, orphan.pid)
        record = json.loads(restarted.pid_file.read_text())
        assert record["pid"] == restarted.pid() and record["start_ticks"] == start_ticks(record["pid"])
        restarted.stop()
        assert not restarted.running() and not restarted.pid_file.exists()
    finally:
        orphan.kill()
        orphan.wait()
        orphan.stdout.close()


def test_a_token_no_process_carries_is_not_running(tmp_path):
    runtime = ProcessRuntime("filebeat", SLEEPER, tmp_path)
    runtime.pid_file.write_text(json.dumps({"token": secrets.token_hex(8), "argv": list(SLEEPER)}))
    assert runtime.pid() is None and not runtime.running()
    runtime.stop()  # nothing to stop: no error
