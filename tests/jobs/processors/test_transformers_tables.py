"""transformers' tables of architectures, read from its source where torch is not installed (the portal's own
machines): the same tables transformers builds, and a clear refusal of a layout the reader does not know."""

import pytest

from jobs.processors.partner_model import Embed
from jobs.processors.transformers_tables import TablesUnreadable, mapping_names, tables_in
from tests.support import needs_libraries_of

MODELING_AUTO = "transformers.models.auto.modeling_auto"


def test_it_reads_the_tables_a_partners_model_is_checked_against():
    tables = mapping_names(MODELING_AUTO)
    assert tables["MODEL_MAPPING_NAMES"]["bert"] == "BertModel"
    assert tables["MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"]["llama"] == "LlamaForCausalLM"
    assert tables["MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"]["distilbert"] == (
        "DistilBertForSequenceClassification"
    )
    # A table built by unpacking another holds the other's entries too.
    multimodal = tables["MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES"]
    assert tables["MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"].items() <= multimodal.items()


@needs_libraries_of(Embed())
def test_its_tables_are_those_transformers_builds_where_torch_is_installed():
    from transformers.models.auto import modeling_auto  # noqa: PLC0415 (imports only where torch is)

    built = {name: dict(getattr(modeling_auto, name)) for name in dir(modeling_auto) if name.endswith("_MAPPING_NAMES")}
    del built["CONFIG_MAPPING_NAMES"]  # imported from configuration_auto, which imports without torch
    assert mapping_names(MODELING_AUTO) == built


def test_it_follows_a_table_unpacked_into_another_in_each_form():
    source = """
A_MAPPING_NAMES = OrderedDict([("bert", "BertModel"), ("t5", ("T5Model", "T5EncoderModel"))])
B_MAPPING_NAMES = OrderedDict([*list(A_MAPPING_NAMES.items()), ("gpt2", "GPT2Model")])
C_MAPPING_NAMES = {**A_MAPPING_NAMES, "opt": "OPTModel"}
D_MAPPING_NAMES = OrderedDict(**{"gpt-sw3": "GPT2Model"}, **A_MAPPING_NAMES)
"""
    tables = tables_in(source)
    assert tables["B_MAPPING_NAMES"] == {"bert": "BertModel", "t5": ("T5Model", "T5EncoderModel"), "gpt2": "GPT2Model"}
    assert tables["C_MAPPING_NAMES"]["opt"] == "OPTModel" and "t5" in tables["C_MAPPING_NAMES"]
    assert list(tables["D_MAPPING_NAMES"]) == ["gpt-sw3", "bert", "t5"]


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("A_MAPPING_NAMES = build_it()", "an expression of kind Call at line 1"),
        ("A_MAPPING_NAMES = OrderedDict([(name, 'X')])", "not a literal at line 1"),
        ("A_MAPPING_NAMES = OrderedDict([*list(B_MAPPING_NAMES.items())])", "a reference it cannot follow"),
        ("OTHER = {}", "no *_MAPPING_NAMES table in the source"),
    ],
)
def test_it_refuses_a_layout_it_cannot_read_saying_where(source, said):
    with pytest.raises(TablesUnreadable, match=said.replace("*", r"\*")):
        tables_in(source)
