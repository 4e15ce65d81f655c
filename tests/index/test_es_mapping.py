"""The Elasticsearch mapping/template builders (pure)."""

from __future__ import annotations

import json

import pytest

from include.index._es_bulk import build_chunk_source
from include.index._es_mapping import (
    MAPPED_FIELDS,
    SEARCH_FIELDS,
    index_mappings,
    index_settings,
    index_template,
    physical_index_name,
    physical_index_pattern,
    rebuild_alias,
    template_name,
    validate_alias,
)
from tests.index.helpers import make_write

# MemoryBear design doc, section 11.3: what downstream retrievers read (``image`` aside: no
# connector produces images yet, so the field would only ever be empty).
MEMORYBEAR_FIELDS = {
    "docnm_kwd": "keyword",
    "title_tks": "text",
    "title_sm_tks": "text",
    "content_with_weight": "text",
    "content_ltks": "text",
    "content_sm_ltks": "text",
    "page_num_int": "integer",
    "position_int": "integer",
    "top_int": "integer",
    "doc_type_kwd": "keyword",
}
LINEAGE_FIELDS = {
    "source": "keyword",
    "doc_id": "keyword",
    "doc_version": "keyword",
    "sequence": "integer",
    "heading_path": "keyword",
    "text_hash": "keyword",
    "run_id": "keyword",
    "chunker_options_hash": "keyword",
    "updated_at": "date",
}


def test_mapping_holds_the_memorybear_contract_and_our_lineage() -> None:
    props = index_mappings()["properties"]
    for name, typ in {**MEMORYBEAR_FIELDS, **LINEAGE_FIELDS}.items():
        assert props[name]["type"] == typ, name


def test_chinese_is_analysed_by_the_builtin_cjk_analyzer_beside_standard() -> None:
    props = index_mappings()["properties"]
    assert props["content_ltks"]["analyzer"] == "standard"
    assert props["content_sm_ltks"]["analyzer"] == "cjk"
    assert props["title_tks"]["analyzer"] == "standard"
    assert props["title_sm_tks"]["analyzer"] == "cjk"
    # the text is stored once and reaches both analyzed fields by copy_to
    assert props["content_with_weight"]["copy_to"] == ["content_ltks", "content_sm_ltks"]
    assert props["content_with_weight"]["index"] is False
    searched = {f.split("^")[0] for f in SEARCH_FIELDS}
    assert searched == {"content_ltks", "content_sm_ltks", "title_tks", "title_sm_tks"}


def test_mapping_is_strict_and_arbitrary_metadata_cannot_explode_it() -> None:
    m = index_mappings()
    assert m["dynamic"] == "strict"
    assert m["properties"]["metadata"]["type"] == "flattened"
    assert m["properties"]["positions"] == {"type": "object", "enabled": False}
    # a fresh copy each call: callers may mutate it
    m["properties"]["source"]["type"] = "text"
    assert index_mappings()["properties"]["source"]["type"] == "keyword"


def test_every_field_a_chunk_document_carries_is_mapped() -> None:
    w = make_write("web:demo", "docs/a.pdf", ["one", "two"], positions=True, heading=["H"])
    w.chunks[1].kind = "table"
    for chunk in w.chunks:
        src = build_chunk_source(chunk, w.document, updated_at="2026-11-30T04:00:00.000+00:00")
        assert set(src) <= MAPPED_FIELDS, set(src) - MAPPED_FIELDS
        json.dumps(src)  # serialisable as is


def test_template_covers_every_generation_of_the_alias() -> None:
    t = index_template("tributary", shards=2, replicas=1)
    assert t["name"] == template_name("tributary") == "tributary__chunks"
    assert t["index_patterns"] == ["tributary__v*"] == [physical_index_pattern("tributary")]
    assert t["template"]["settings"] == {"number_of_shards": 2, "number_of_replicas": 1}
    assert t["template"]["mappings"] == index_mappings()
    assert t["meta"]["alias"] == "tributary"
    # every physical generation matches the pattern; the rebuild marker alias does not
    assert physical_index_name("tributary", "0") == "tributary__v0"
    assert physical_index_name("tributary", "20261130042501000001").startswith("tributary__v")
    assert not rebuild_alias("tributary").startswith("tributary__v")


def test_settings_refresh_interval_is_optional() -> None:
    assert index_settings() == {"number_of_shards": 1, "number_of_replicas": 0}
    assert index_settings(refresh_interval="-1")["refresh_interval"] == "-1"


@pytest.mark.parametrize("name", ["Tributary", "a b", "_x", "x__y", "", "a*", "é"])
def test_invalid_index_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        validate_alias(name)


@pytest.mark.parametrize("name", ["tributary", "kb-2", "a_b", "0"])
def test_valid_index_names_pass(name: str) -> None:
    assert validate_alias(name) == name
