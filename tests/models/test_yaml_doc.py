"""The top-level mapping of a YAML document, with errors naming its source (`models.yaml_doc`)."""

import pytest

from models.yaml_doc import yaml_mapping


def test_a_mapping_is_returned_as_parsed():
    assert yaml_mapping("a: 1\nb: [x]\n", "x.yaml", "agent") == {"a": 1, "b": ["x"]}


@pytest.mark.parametrize("text, message", [("a: [1\n", r"^x.yaml is not valid YAML: "),
                                           ("- 1\n", r"^x.yaml: expected a mapping of agent fields at the top level$"),
                                           ("", r"^x.yaml: expected a mapping of agent fields")])
def test_what_is_not_a_mapping_is_refused_naming_the_file(text, message):
    with pytest.raises(ValueError, match=message):
        yaml_mapping(text, "x.yaml", "agent")
