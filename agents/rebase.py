"""Rebasing a version's tuned keys onto a component's files as they are on disk now.

Every write of a component's files is one: the agent never writes back a whole file it stored, so whatever the
operator changed since (comments, other keys, other inputs) stays. Each tuned key on disk is compared with the
value the target version gives it and the one the version in force gave it (`base`): a key that already holds
the target's value is left as it is (a restart on an unchanged version rewrites nothing), one that holds the
base's is rewritten, and one that holds neither was changed by hand since the agent wrote it. Then nothing is
written: `RebaseConflict` names every such key, its file and line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from agents.adapter import ValidationFailed
from models.space import PIPELINE_SPACE, Value


class RebaseConflict(ValidationFailed):
    """Tuned keys the operator changed by hand since the agent wrote them; the message names each."""


@dataclass(frozen=True)
class OnDisk:
    """One tuned key as a file has it now."""

    param: str
    where: str  # `file:line key`, where it is written (or would be added)
    written: str | None  # its text in the file; None when the file does not set it
    value: Value | None  # what the component reads there (its default when not written); None: not readable


def same(a: Value | None, b: Value | None) -> bool:
    """The same value as the component reads it (1024 and 1024.0 alike, 55.8 however it was computed)."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _shown(param: str, value: Value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:g} {PIPELINE_SPACE[param].unit}".strip()


def to_rewrite(keys: Sequence[OnDisk], target: Mapping[str, Value], base: Mapping[str, Value] | None) -> list[OnDisk]:
    """The keys to rewrite so that the files hold `target`. `target` and `base` are values as the files hold
    them (a duration as rounded when written); `base` None (the agent's first version) lets any value be
    replaced. Raises `RebaseConflict` when a key holds neither `target`'s value nor `base`'s."""
    rewrite, conflicts = [], []
    for key in keys:
        if same(key.value, target[key.param]):
            continue
        if base is not None and not same(key.value, base[key.param]):
            conflicts.append(f"{key.where} is {key.written if key.written is not None else 'not set'} on disk, "
                             f"where the version in force has {key.param} {_shown(key.param, base[key.param])}")
        rewrite.append(key)
    if conflicts:
        raise RebaseConflict("changed by hand since the agent wrote it, so the agent writes nothing until it holds "
                             "the version in force's value again: " + "; ".join(conflicts))
    return rewrite
