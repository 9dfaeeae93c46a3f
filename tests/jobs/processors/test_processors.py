"""The processor registry: built-in work kinds and third-party ones from the entry-point group."""

import pytest

from jobs import processors


def test_it_lists_the_built_in_and_the_plugin_work_kinds():
    names = [processor.name for processor in processors.available()]
    assert "clean-table" in names
    assert "test-slow-echo" in names, "registered through the e31.processors entry point"


def test_it_names_the_kinds_when_one_is_unknown():
    message = "There is no work kind 'nope'; the kinds are: classify, clean-table"
    with pytest.raises(processors.ParamError, match=message):
        processors.get("nope")
