"""Which node-agent component takes which parameter, and the daemon's changes found in the agents' audit logs.

The rule is the agent's own: a component takes the parameters it lists in `params_allowed`
(`GET /components`). A config change goes to every component that takes one of its parameters,
as that component's next version; nothing here knows component names or parameter prefixes.
"""

from __future__ import annotations

from typing import Mapping

from models.space import Value

Owned = Mapping[str, frozenset[str]]  # component name -> the parameters it takes


def owned_params(components: list[dict]) -> dict[str, frozenset[str]]:
    """Each component's parameters, from an agent's `GET /components` answer."""
    return {component["name"]: frozenset(component["params_allowed"]) for component in components}


def by_component(params: Mapping[str, Value], owned: Owned) -> dict[str, dict[str, Value]]:
    """`params` split by the components that take them; components taking none are left out."""
    parts = {name: {p: v for p, v in params.items() if p in names} for name, names in owned.items()}
    return {name: part for name, part in parts.items() if part}


def _changed(decision: dict) -> dict[str, Value]:
    return {name: to for name, (_, to) in decision["change"].items()}


def changes_for_agent(decisions: list[dict], owned: Owned) -> list[dict]:
    """The decisions that changed a parameter one of the agent's components takes."""
    return [d for d in decisions if by_component(_changed(d), owned)]


def changes_not_in_audit(decisions: list[dict], audit: Mapping[str, list[dict]], owned: Owned) -> list[dict]:
    """The decisions whose change to the agent's components is not a version the agent decided.

    `audit` holds each component's audit entries since the run began. A change touching several
    components is several versions, one in each component's log; a change the agent refused at its
    checks has no version (the push stops at the first refusal) but leaves a rejection.
    """
    started = {name: [entry["changes"] for entry in entries if entry["event"] == "change_started"]
               for name, entries in audit.items()}
    rejected = any(entry["event"] == "rejected" for entries in audit.values() for entry in entries)
    missing = []
    for decision in decisions:
        parts = by_component(_changed(decision), owned)
        found = [any(part.items() <= entry.items() for entry in started.get(name, [])) for name, part in parts.items()]
        refused = decision["reason"].startswith("apply failed") and (rejected or any(found))
        if not (all(found) or refused):
            missing.append(decision)
    return missing
