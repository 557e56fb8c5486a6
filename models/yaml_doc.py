"""The top-level mapping of a YAML document (agent.yaml, a pipeline file, a deployment file)."""

from __future__ import annotations

import yaml


def yaml_mapping(text: str, source: str, what: str) -> dict:
    """`text` parsed as YAML; a `ValueError` naming `source` when it is not YAML or not a mapping of `what`."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"{source} is not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{source}: expected a mapping of {what} fields at the top level")
    return raw
