"""The Logstash 7.17 adapter: the operator's `pipelines.yml` entry of one pipeline (`pipeline.workers`,
`pipeline.batch.size`, `pipeline.batch.delay`) and one kafka output (by its `id`) in that pipeline's
config, patched in place. Checked by pipetune's reader of both files, and by Logstash's own
`--config.test_and_exit` where a Logstash binary is configured; put in force by a reload (SIGHUP, or
`config.reload.automatic`); health is `_node/stats/pipelines` on the API port.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Mapping

from agents.adapter import (Applied, Health, Runtime, ValidationFailed, naming_full_disk, read_text, restart_if_needed,
                            run_check)
from agents.logstash import patch as logstash_patch
from agents.logstash.conf import LogstashConfigError, read_plugins
from agents.logstash.patch import LogstashFiles
from agents.yaml_patch import YamlPatchError, compose
from models.space import PIPELINE_PARAMS, ChangeCost, Config, Param, Value

PIPELINES_FILE = "pipelines.yml"


class LogstashAdapter:
    """Logstash on this node, reloaded by SIGHUP (the runtime's reload signal) or its own file watch."""

    name = "logstash"
    params: tuple[Param, ...] = tuple(p for p in PIPELINE_PARAMS if p.component == "logstash")

    def __init__(self, settings_dir: Path, pipeline_id: str, output_id: str, binary: Path | None = None, *,
                 api_port: int = 9600, reload_timeout_s: float = 60.0) -> None:
        self.settings_dir = settings_dir
        # LogstashConfigError names the file and line of what cannot be read or found.
        self.files: LogstashFiles = logstash_patch.discover(settings_dir / PIPELINES_FILE, pipeline_id, output_id)
        self.binary = binary  # bin/logstash, for --config.test_and_exit where Logstash is installed
        self.api_port = api_port
        self.reload_timeout_s = reload_timeout_s

    @property
    def pipeline_id(self) -> str:
        return self.files.pipeline_id

    def read(self) -> dict[str, Value]:
        """What the files hold now for each parameter (what Logstash reads where they set none)."""
        try:
            return {key.param: key.value for key in logstash_patch.on_disk(self.files) if key.value is not None}
        except (LogstashConfigError, YamlPatchError, OSError) as err:  # a file changed or removed since the start
            raise ValidationFailed(str(err)) from None

    def patch(self, config: Config, base: Config | None = None) -> dict[Path, str]:
        try:
            changed = logstash_patch.patch(self.files, {p.name: config[p.name] for p in self.params},
                                           None if base is None else {p.name: base[p.name] for p in self.params})
        except (LogstashConfigError, YamlPatchError, OSError) as err:  # a file changed or removed since the start
            raise ValidationFailed(str(err)) from None
        return {path: changed[path] if path in changed else read_text(path)
                for path in (self.files.pipelines_yml, self.files.conf)}

    def validate(self, files: Mapping[Path, str]) -> None:
        """The reader on both patched files; then Logstash's own check of the pipeline when installed."""
        try:
            compose(files[self.files.pipelines_yml], str(self.files.pipelines_yml))
            read_plugins(files[self.files.conf], str(self.files.conf))
        except (YamlPatchError, LogstashConfigError) as err:
            raise ValidationFailed(str(err)) from None
        if self.binary is None:
            return
        # The pipeline's files, the patched one among them, staged by name (so in Logstash's reading
        # order) in a hidden directory next to the settings (a `*.conf` glob does not match it).
        staged = Path(tempfile.mkdtemp(prefix=".pipetune-check-", dir=self.settings_dir))
        try:
            with naming_full_disk(self.settings_dir):
                for source in self.files.sources:
                    (staged / source.name).write_text(files[source] if source in files else read_text(source))
            run_check([str(self.binary), "--path.settings", str(self.settings_dir), "-f", str(staged),
                       "--config.test_and_exit"], "logstash --config.test_and_exit", 300.0)
        finally:
            shutil.rmtree(staged, ignore_errors=True)

    def apply(self, config: Config, runtime: Runtime | None, cost: ChangeCost) -> Applied:
        """A reload (SIGHUP) for pipeline settings; waits until Logstash counts one more successful reload."""
        restarted = restart_if_needed(runtime, cost, self.name)
        if restarted is not None:
            return restarted
        started = time.monotonic()
        before = self.reloads()
        runtime.reload()  # type: ignore[union-attr]
        deadline = started + self.reload_timeout_s
        while time.monotonic() < deadline:
            now = self.reloads()
            if now[1] > before[1]:
                raise RuntimeError(f"Logstash failed to reload pipeline {self.pipeline_id!r} (see its log)")
            if now[0] > before[0]:
                return Applied("pipeline reloaded", time.monotonic() - started)
            time.sleep(0.5)
        raise TimeoutError(f"Logstash did not reload pipeline {self.pipeline_id!r} within {self.reload_timeout_s:g} s")

    def _stats(self) -> dict:
        url = f"http://127.0.0.1:{self.api_port}/_node/stats/pipelines"
        with urllib.request.urlopen(url, timeout=2.0) as response:
            return json.load(response)

    def reloads(self) -> tuple[int, int]:
        """(successes, failures) of the pipeline's reloads as Logstash counts them."""
        reloads = self._stats()["pipelines"][self.pipeline_id]["reloads"]
        return int(reloads["successes"]), int(reloads["failures"])

    def health(self) -> Health:
        """The node API answers and the pipeline runs, its last reload not a failure."""
        try:
            pipeline = self._stats()["pipelines"].get(self.pipeline_id)
        except (OSError, ValueError, KeyError) as err:
            return Health(False, f"_node/stats: {err}")
        if pipeline is None:
            return Health(False, f"pipeline {self.pipeline_id!r} is not running")
        reloads = pipeline["reloads"]
        failed, succeeded = reloads.get("last_failure_timestamp"), reloads.get("last_success_timestamp")
        if failed and (not succeeded or failed > succeeded):
            return Health(False, f"last reload failed: {reloads.get('last_error')}")
        return Health(True, f"pipeline {self.pipeline_id!r} running")
