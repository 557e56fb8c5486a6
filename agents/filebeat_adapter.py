"""The Filebeat adapter: filebeat.yml and its reloadable inputs file from the shared renderer,
checked with `filebeat test config`, put in force by input reload (no restart) or a restart."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import yaml

from agents.adapter import Applied, Health, Runtime, restart_if_needed, run_check
from agents.filebeat_render import FilebeatLayout, render_filebeat_config, render_filebeat_inputs
from models.space import PIPELINE_PARAMS, ChangeCost, Config, Param

INPUTS_FILE = "inputs.d/replay.yml"
MAIN_FILE = "filebeat.yml"


class FilebeatAdapter:
    """Filebeat 7.17 on this node; its config directory is the layout's home directory."""

    name = "filebeat"
    params: tuple[Param, ...] = tuple(p for p in PIPELINE_PARAMS if p.component == "filebeat")

    def __init__(self, layout: FilebeatLayout, binary: Path, *, check_timeout_s: float = 60.0) -> None:
        self.layout = layout
        self.binary = binary
        self.config_dir = layout.home_dir
        self.check_timeout_s = check_timeout_s

    def render(self, config: Config) -> dict[str, str]:
        return {MAIN_FILE: render_filebeat_config(self.layout, config),
                INPUTS_FILE: render_filebeat_inputs(self.layout, config)}

    def validate(self, staged_dir: Path) -> None:
        """`filebeat test config` on the staged filebeat.yml with the staged inputs inlined.

        Filebeat's check does not read files under `filebeat.config.inputs`, so the inputs go in as
        `filebeat.inputs` for the check: both files are then checked by Filebeat itself.
        """
        document = yaml.safe_load((staged_dir / MAIN_FILE).read_text())
        document.pop("filebeat.config.inputs", None)
        document["filebeat.inputs"] = yaml.safe_load((staged_dir / INPUTS_FILE).read_text())
        check = staged_dir / "check.yml"
        check.write_text(yaml.safe_dump(document, sort_keys=False))
        check.chmod(0o600)
        run_check([str(self.binary), "test", "config", "-c", str(check), "--path.home", str(staged_dir),
                   "--path.data", str(staged_dir / "data"), "--path.logs", str(staged_dir / "logs")],
                  "filebeat test config", self.check_timeout_s)

    def apply(self, config: Config, runtime: Runtime | None, cost: ChangeCost) -> Applied:
        """Input-only changes: Filebeat re-reads inputs.d itself (reload.period); anything else restarts it."""
        return restart_if_needed(runtime, cost, self.name) or Applied("inputs reloaded")

    def health(self) -> Health:
        """Filebeat's HTTP endpoint answers with its stats."""
        url = f"http://127.0.0.1:{self.layout.http_port}/stats"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                return Health(response.status == 200, f"GET {url}: {response.status}")
        except OSError as err:
            return Health(False, f"GET {url}: {err}")
