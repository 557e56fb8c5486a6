"""The Filebeat adapter: the operator's filebeat.yml (and the input files it loads) patched in place —
the selected inputs, `queue.mem.*` and the output's tuned keys — checked with `filebeat test config`,
put in force by a restart.

Input keys too, even where Filebeat reloads its input files itself (`filebeat.config.inputs` with
`reload.enabled`): a reload stops the input while its harvester may wait to hand a line to a full
queue; Filebeat 7.17 drops that line, but has already moved the harvester's in-memory offset past it,
and the reloaded input resumes from there, so the line is lost for good (issue #14, measured by
`python -m bench.reload_loss`). A restart resumes from the registry, which
holds only offsets Kafka acknowledged: lines may come twice, never not at all. The agent stops
Filebeat before it writes the files (agents/component.py), so the reloader never sees them first.

With its registry's filesystem full Filebeat ships on, but its registry stops (agents/filebeat/registry.py): it is
reported not healthy, and a change, whose restart would send again every line since the registry's last write,
is refused as a full disk."""

from __future__ import annotations

import os
import tempfile
import urllib.request
from pathlib import Path
from typing import Mapping

import yaml

from agents.adapter import (Applied, Health, Runtime, ValidationFailed, naming_full_disk, read_text,
                            restart_if_needed, run_check)
from agents.filebeat import patch as filebeat_patch
from agents.filebeat.patch import FilebeatFiles, InputSelector
from agents.filebeat.registry import registry_room
from agents.rebase import OnDisk
from agents.yaml_patch import YamlPatchError, key_splits
from models.space import PIPELINE_PARAMS, PIPELINE_SPACE, ChangeCost, Config, Param, Value

PARAMS = tuple(p for p in PIPELINE_PARAMS if p.component == "filebeat")


class FilebeatAdapter:
    """Filebeat 7.17 on this node, configured by the operator's filebeat.yml; `data_dir` its path.data (None: not
    known here, as in a container, and its registry's room is not watched)."""

    name = "filebeat"

    def __init__(self, config: Path, selectors: list[InputSelector], binary: Path, *, http_port: int | None = None,
                 runtime: Runtime | None = None, data_dir: Path | None = None, check_timeout_s: float = 60.0) -> None:
        self.files: FilebeatFiles = filebeat_patch.discover(config, selectors)  # FilebeatConfigError names file:line
        self.binary = binary
        self.http_port = http_port
        self.runtime = runtime
        self.data_dir = data_dir
        self.check_timeout_s = check_timeout_s
        self.left_alone = _left_alone(filebeat_patch.on_disk(self.files))
        self.params: tuple[Param, ...] = tuple(p for p in PARAMS if p.name not in self.left_alone)

    def read(self) -> dict[str, Value]:
        """What the files hold now for each parameter (the first selected input's; what Filebeat reads for its
        input type where it sets none)."""
        try:
            found = filebeat_patch.on_disk(self.files)
        except (YamlPatchError, OSError) as err:  # the operator changed or removed a file since the agent started
            raise ValidationFailed(str(err)) from None
        first: dict[str, Value] = {}
        for key in found:
            if key.value is not None and key.param not in self.left_alone:
                first.setdefault(key.param, key.value)
        return first

    def patch(self, config: Config, base: Config | None = None) -> dict[Path, str]:
        try:
            changed = filebeat_patch.patch(self.files, {p.name: config[p.name] for p in self.params},
                                           None if base is None else {p.name: base[p.name] for p in self.params})
        except (YamlPatchError, OSError) as err:  # the operator changed or removed a file since the agent started
            raise ValidationFailed(str(err)) from None
        return {path: changed[path] if path in changed else read_text(path) for path in self.files.files()}

    def validate(self, files: Mapping[Path, str]) -> None:
        """`filebeat test config` on a patched copy staged next to filebeat.yml (relative paths and
        `${path.config}` resolve as for the real one), with the tuned input files inlined: Filebeat's
        check does not read files under `filebeat.config.inputs`. `DiskFull` when the registry has no room (the
        restart would send lines again) or the copy does not fit beside filebeat.yml."""
        full = registry_room(self.data_dir) if self.data_dir is not None else None
        if full is not None:
            raise full
        config = self.files.config
        document = yaml.safe_load(files[config]) or {}
        loader = _located(document, "filebeat.config.inputs")
        if loader is not None:
            del loader[0][loader[1]]
        external = [entry for path, text in files.items() if path != config for entry in yaml.safe_load(text) or []]
        inline = _located(document, "filebeat.inputs")
        if inline is not None and isinstance(inline[0][inline[1]], list):
            inline[0][inline[1]] += external
        elif external:
            document["filebeat.inputs"] = external
        fd, check = tempfile.mkstemp(dir=config.parent, prefix=f".pipetune-check-{config.stem}.", suffix=".yml")
        try:
            with naming_full_disk(config), os.fdopen(fd, "w") as handle:  # mkstemp makes it 0600, as Filebeat wants
                yaml.safe_dump(document, handle, sort_keys=False)
            with tempfile.TemporaryDirectory(prefix="pipetune-filebeat-check-") as scratch:
                run_check([str(self.binary), "test", "config", "-c", check, "--path.config", str(config.parent),
                           "--path.data", scratch, "--path.logs", scratch],
                          f"filebeat test config ({config} as patched)", self.check_timeout_s)
        finally:
            Path(check).unlink(missing_ok=True)

    def apply(self, config: Config, runtime: Runtime | None, cost: ChangeCost) -> Applied:
        """A restart (never Filebeat's live input reload: it can lose a line, see above)."""
        return restart_if_needed(runtime, cost, self.name) or Applied("already in force")

    def health(self) -> Health:
        """Filebeat's HTTP endpoint answers with its stats (without one, only that the process runs), and its
        registry has room to be written."""
        answers = self._answers()
        full = registry_room(self.data_dir) if answers.ok and self.data_dir is not None else None
        return answers if full is None else Health(False, f"{answers.detail}; {full}")

    def _answers(self) -> Health:
        if self.http_port is None:
            running = self.runtime is not None and self.runtime.running()
            return Health(running, "the process runs (no http_port)" if running else "the process is not running")
        url = f"http://127.0.0.1:{self.http_port}/stats"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                return Health(response.status == 200, f"GET {url}: {response.status}")
        except OSError as err:
            return Health(False, f"GET {url}: {err}")


def _left_alone(found: list[OnDisk]) -> dict[str, str]:
    """Parameters whose keys hold what pipetune cannot tune from (a value outside the parameter's range, or
    not one it reads), and why: the agent leaves them as they are rather than write a value over them."""
    why = {}
    for key in found:
        param = PIPELINE_SPACE[key.param]
        said = f"{key.where}: {key.written if key.written is not None else 'not set'}"
        if key.value is None:
            why.setdefault(key.param, f"{said}, not a value pipetune reads")
        elif not param.low <= float(key.value) <= param.high:  # type: ignore[arg-type, operator]
            reads = "" if key.written is not None else f" (Filebeat reads {key.value:g}{param.unit})"
            why.setdefault(key.param, f"{said}{reads}, where pipetune takes {param.allowed()}")
    return why


def _located(mapping: dict, dotted: str) -> tuple[dict, str] | None:
    """The mapping and key where `dotted` is written, however it is split between nesting and dots
    (as Beats reads it); None when it is not written."""
    for key, rest in key_splits(dotted):
        if key in mapping:
            if not rest:
                return mapping, key
            if isinstance(mapping[key], dict):
                found = _located(mapping[key], rest)
                if found is not None:
                    return found
    return None
