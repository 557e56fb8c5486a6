"""The learner's settings (models.bayes.settings) and the table docs/learner.md gives of them."""

import ast
import dataclasses
import re
from pathlib import Path

from models.bayes.settings import LearnerSettings

DOC = Path(__file__).resolve().parents[2] / "docs" / "learner.md"


def test_the_docs_list_every_setting_with_its_value_and_where_it_comes_from():
    rows = {m[1]: (m[2], m[3].strip()) for m in re.finditer(r"^\| `(\w+)` \| `([^`]+)` \|(.+)\|$", DOC.read_text(),
                                                            re.MULTILINE)}
    settings = LearnerSettings()
    names = [f.name for f in dataclasses.fields(settings)]
    assert sorted(rows) == sorted(names)
    for name in names:
        value, where = rows[name]
        assert ast.literal_eval(value) == getattr(settings, name), name
        assert where, name
