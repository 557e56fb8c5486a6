"""The Spark query adapter: only the tuned keys of the job's own properties file change, values read as the job reads
them, an out-of-range change is refused naming the key and its range, and a change the job cannot put in force is
rolled back to the previous file. The agent is served for real; the job is a stand-in serving the real job's
`/reload` and `/progress` (the real job's test, which changes its trigger through the agent while requests flow,
is tests/testbed/test_spark_sink.py)."""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from agents.adapter import ValidationFailed
from agents.client import AgentError
from agents.config import AgentConfig
from agents.kafka import properties_file
from agents.spark import SparkQueryAdapter, spark_seconds
from models.components.spark import MAX_OFFSETS_NO_LIMIT
from models.learning import TunedCube
from models.policy import Policy
from models.space import PIPELINE_SPACE, Config
from tests.agents.conftest import ServedAgent
from tests.conftest import free_ports

# The testbed's file (testbed/spark_sink.py writes it) with an operator's comment and a key of their own.
JOB_FILE = """\
# pipetune's Spark sink (testbed/spark_job.py)
master=local[2]
topic=nginx-access
# the operator's note: keep the trigger short
trigger.interval.s = 1.0
maxOffsetsPerTrigger=
checkpoint.dir=/run/spark/checkpoint
spark.sql.shuffle.partitions=2
spark.ui.enabled=false
"""


def _adapter(path: Path, url: str = "http://127.0.0.1:1") -> SparkQueryAdapter:
    path.write_text(JOB_FILE)
    return SparkQueryAdapter("spark", path, url)


def _config(**changes: object) -> Config:
    return PIPELINE_SPACE.config({"spark.trigger.interval": 1.0, "spark.maxOffsetsPerTrigger": MAX_OFFSETS_NO_LIMIT,
                                  "spark.sql.shuffle.partitions": 2} | {k.replace("__", "."): v
                                                                          for k, v in changes.items()})


def test_read_gives_the_values_as_the_job_reads_them(tmp_path):
    adapter = _adapter(tmp_path / "job.properties")
    assert adapter.read() == {"spark.trigger.interval": 1.0, "spark.maxOffsetsPerTrigger": MAX_OFFSETS_NO_LIMIT,
                              "spark.minOffsetsPerTrigger": 0, "spark.maxTriggerDelay": 900.0,
                              "spark.sql.shuffle.partitions": 2}  # an empty limit is the job's: none, the top of its
    # range; keys the file lacks are Spark's defaults: no minimum, a 15-minute delay


@pytest.mark.parametrize("text, seconds", [("15m", 900.0), ("2500ms", 2.5), ("30s", 30.0), ("1500", 1.5),
                                           (" 2H ", 7200.0), ("1min", 60.0), ("", 900.0)])
def test_the_trigger_delay_reads_as_spark_reads_a_time_string(tmp_path, text, seconds):
    adapter = _adapter(tmp_path / "job.properties")
    adapter.properties.write_text(JOB_FILE + f"maxTriggerDelay={text}\n")
    assert adapter.read()["spark.maxTriggerDelay"] == seconds


def test_the_minimum_and_the_delay_are_written_as_the_job_and_spark_read_them(tmp_path):
    adapter = _adapter(tmp_path / "job.properties")
    base = _config()
    wanted = PIPELINE_SPACE.config({"spark.minOffsetsPerTrigger": 200, "spark.maxTriggerDelay": 2.5}, base=base)
    props = properties_file.read(adapter.patch(wanted, base)[adapter.properties])
    assert props["minOffsetsPerTrigger"] == "200" and props["maxTriggerDelay"] == "2500ms"
    adapter.properties.write_text(adapter.patch(wanted, base)[adapter.properties])
    assert adapter.read()["spark.maxTriggerDelay"] == 2.5 and adapter.read()["spark.minOffsetsPerTrigger"] == 200
    # back to no minimum: the key left empty, as for the maximum
    assert properties_file.read(adapter.patch(base, wanted)[adapter.properties])["minOffsetsPerTrigger"] == ""


def test_a_patch_changes_only_the_tuned_keys_every_other_byte_stays(tmp_path):
    adapter = _adapter(tmp_path / "job.properties")
    base = _config()
    wanted = PIPELINE_SPACE.config({"spark.trigger.interval": 2.5, "spark.maxOffsetsPerTrigger": 500}, base=base)
    text = adapter.patch(wanted, base)[tmp_path / "job.properties"]
    assert text == JOB_FILE.replace("trigger.interval.s = 1.0", "trigger.interval.s = 2.5").replace(
        "maxOffsetsPerTrigger=\n", "maxOffsetsPerTrigger=500\n")
    # the same values again write nothing new
    assert adapter.patch(base, base)[tmp_path / "job.properties"] == JOB_FILE
    # back to no limit: the key left empty again
    adapter.properties.write_text(text)
    assert properties_file.read(adapter.patch(base, wanted)[adapter.properties])["maxOffsetsPerTrigger"] == ""


def test_no_limit_is_the_top_of_the_maximums_range_so_the_smallest_step_from_it_is_a_loose_limit(tmp_path):
    # A limit of 0 (none) at the bottom of the range made the search's first step from it its tightest limit: 488
    # records a batch on the paper pipeline, whose job then fell behind at 300 ev/s.
    param = PIPELINE_SPACE["spark.maxOffsetsPerTrigger"]
    assert param.default == param.high == MAX_OFFSETS_NO_LIMIT and param.log_scale
    cube = TunedCube(("spark.maxOffsetsPerTrigger",), Policy())
    start = PIPELINE_SPACE.defaults()
    nearby = cube.decode(cube.encode(start) - 0.1, base=start)["spark.maxOffsetsPerTrigger"]  # a tenth of the cube
    assert 1_000_000 <= nearby < MAX_OFFSETS_NO_LIMIT
    adapter = _adapter(tmp_path / "job.properties")
    for written in ("maxOffsetsPerTrigger=0\n", "maxOffsetsPerTrigger=\n"):  # the job reads both as none
        adapter.properties.write_text(JOB_FILE.replace("maxOffsetsPerTrigger=\n", written))
        assert adapter.read()["spark.maxOffsetsPerTrigger"] == MAX_OFFSETS_NO_LIMIT


def test_a_key_the_file_lacks_is_appended(tmp_path):
    path = tmp_path / "job.properties"
    adapter = _adapter(path)
    path.write_text(JOB_FILE.replace("spark.sql.shuffle.partitions=2\n", ""))
    assert adapter.read()["spark.sql.shuffle.partitions"] == 200  # Spark's default
    wanted = PIPELINE_SPACE.config({"spark.sql.shuffle.partitions": 4}, base=_config())
    text = adapter.patch(wanted, None)[path]
    assert properties_file.read(text)["spark.sql.shuffle.partitions"] == "4"
    assert text.startswith(JOB_FILE.replace("spark.sql.shuffle.partitions=2\n", ""))


def test_validate_names_the_key_the_job_would_not_read(tmp_path):
    adapter = _adapter(tmp_path / "job.properties")
    with pytest.raises(ValidationFailed, match=r"trigger.interval.s='fast': the job reads spark.trigger.interval as "
                                               r"a number in \[0, 60\] s"):
        adapter.validate({adapter.properties: JOB_FILE.replace("= 1.0", "= fast")})
    with pytest.raises(ValidationFailed, match=r"spark.sql.shuffle.partitions='0'.*an integer in \[1, 1000\]"):
        adapter.validate({adapter.properties: JOB_FILE.replace("partitions=2", "partitions=0")})
    with pytest.raises(ValidationFailed, match=r"maxTriggerDelay='2.5s': the job reads spark.maxTriggerDelay as a "
                                               r"number in \[0, 3600\] s"):  # Spark takes whole units only
        adapter.validate({adapter.properties: JOB_FILE + "maxTriggerDelay=2.5s\n"})
    with pytest.raises(ValidationFailed, match=r"maxTriggerDelay='2h'.*\[0, 3600\] s"):
        adapter.validate({adapter.properties: JOB_FILE + "maxTriggerDelay=2h\n"})
    adapter.validate({adapter.properties: JOB_FILE})


class StandInJob:
    """Serves the real job's `/progress` and `/reload` (testbed/spark_job.py): a reload reads the file again and
    starts a new run on it, or, told to fail, answers 500 and keeps the run it had (as the real job does)."""

    def __init__(self, properties: Path) -> None:
        self.properties = properties
        self.fail_next = False
        self.reloads = 0
        self.settings = self._read()
        self.run_id = str(uuid.uuid4())
        job = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                self._answer(200, {"active": True, "settings": job.settings, "run_id": job.run_id,
                                   "last": {"runId": job.run_id, "batchId": 3, "timestamp": "now"}})

            def do_POST(self) -> None:  # noqa: N802
                job.reloads += 1
                if job.fail_next:
                    job.fail_next = False
                    self._answer(500, {"error": "StreamingQueryException: cannot start", "settings": job.settings})
                    return
                job.settings, job.run_id = job._read(), str(uuid.uuid4())
                self._answer(200, {"settings": job.settings, "run_id": job.run_id})

            def _answer(self, status: int, doc: dict) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _read(self) -> dict:
        props = properties_file.read(self.properties.read_text())
        return {"trigger_interval_s": float(props["trigger.interval.s"]),
                "max_offsets_per_trigger": int(props["maxOffsetsPerTrigger"] or 0),
                "min_offsets_per_trigger": int(props.get("minOffsetsPerTrigger") or 0),
                "max_trigger_delay_s": spark_seconds(props.get("maxTriggerDelay", "")),
                "shuffle_partitions": int(props["spark.sql.shuffle.partitions"])}


@pytest.fixture
def served(tmp_path) -> Iterator[tuple[ServedAgent, StandInJob]]:
    path = tmp_path / "spark-job.properties"
    path.write_text(JOB_FILE)
    job = StandInJob(path)
    config = AgentConfig.model_validate({
        "state_dir": str(tmp_path / "state"), "port": free_ports(1)[0], "health_timeout_s": 10, "settle_s": 0,
        "components": [{"kind": "spark-query", "name": "spark", "properties": str(path), "url": job.url}]})
    agent = ServedAgent(config)
    try:
        yield agent, job
    finally:
        agent.close()
        job.server.shutdown()


def test_the_agent_starts_on_the_running_query_without_restarting_it(served):
    agent, job = served
    state = agent.client.component("spark")
    assert state["params"]["spark.trigger.interval"] == 1.0 and state["health"]["ok"]
    assert job.reloads == 0


def test_a_change_reloads_the_query_on_the_patched_file(served):
    agent, job = served
    result = agent.client.put_config("spark", 1, {"spark.trigger.interval": 3.0, "spark.sql.shuffle.partitions": 4})
    assert result.status == "applied"
    assert job.settings == {"trigger_interval_s": 3.0, "max_offsets_per_trigger": 0, "min_offsets_per_trigger": 0,
                            "max_trigger_delay_s": 900.0, "shuffle_partitions": 4}
    assert job.properties.read_text() == JOB_FILE.replace("= 1.0", "= 3").replace("partitions=2", "partitions=4")


def test_a_minimum_with_its_delay_reloads_the_query_on_both(served):
    agent, job = served
    result = agent.client.put_config("spark", 1, {"spark.minOffsetsPerTrigger": 300, "spark.maxTriggerDelay": 5.0})
    assert result.status == "applied", result.message
    assert job.settings["min_offsets_per_trigger"] == 300 and job.settings["max_trigger_delay_s"] == 5.0
    assert job.properties.read_text() == JOB_FILE + "minOffsetsPerTrigger=300\nmaxTriggerDelay=5000ms\n"
    assert agent.client.component("spark")["health"]["ok"]


def test_an_out_of_range_value_is_refused_naming_the_key_and_the_range(served):
    agent, job = served
    with pytest.raises(AgentError) as refused:
        agent.client.put_config("spark", 1, {"spark.trigger.interval": 120.0})
    assert refused.value.status == 422
    assert refused.value.detail["field"] == "spark.trigger.interval"
    assert refused.value.detail["allowed"] == "a number in [0, 60] s"
    assert job.properties.read_text() == JOB_FILE and job.reloads == 0


def test_a_change_the_job_cannot_start_is_rolled_back_to_the_previous_file(served):
    agent, job = served
    job.fail_next = True
    result = agent.client.put_config("spark", 1, {"spark.maxOffsetsPerTrigger": 1000})
    assert result.status == "rolled_back" and "answered 500" in result.message
    assert job.properties.read_text() == JOB_FILE  # byte for byte
    assert job.settings["max_offsets_per_trigger"] == 0
    assert agent.client.component("spark")["version"] == 0
