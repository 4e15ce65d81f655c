"""The registry's engine choice (``parser.engines``) and the embedded-file recursion's caps."""

from __future__ import annotations

import pytest

from include.contract import BlockKind, ParseError, ParseErrorCode, RawDocument
from plugins.parsers._embedded import EmbeddedFile, embedded_images_wanted, parse_embedded
from plugins.parsers.registry import check_engines, choose_engine, engine_choices, get_parser, parse_document
from tests.parsers.pdfgen import build_pdf

PDF = "application/pdf"


def test_pdf_engines_default_to_auto_and_a_chosen_one_is_recorded() -> None:
    spec = get_parser(PDF)
    assert spec is not None and spec.engines[0] == "auto" and set(spec.engines) == {"auto", "text", "ocr"}
    assert choose_engine(spec, {}) == "auto"
    assert choose_engine(spec, {"engines": {"pdf": "text"}}) == "text"
    raw = RawDocument("a.pdf", build_pdf([[(72, 100, 11, "Quarterly figures")]]), "a.pdf")
    doc = parse_document(raw, {"engines": {"pdf": "text"}})
    assert doc.engine == "text" and doc.text == "Quarterly figures"
    # a parser without a choice records none
    assert parse_document(RawDocument("n.md", b"# T\n\nbody\n", "n.md")).engine is None


def test_an_engine_the_parser_lacks_is_refused_per_document_and_at_planning() -> None:
    raw = RawDocument("a.pdf", build_pdf([[(72, 100, 11, "x")]]), "a.pdf")
    with pytest.raises(ParseError) as err:
        parse_document(raw, {"engines": {"pdf": "magic"}})
    assert err.value.code == ParseErrorCode.UNSUPPORTED and "auto" in err.value.message
    check_engines({"engines": {"pdf": "ocr", "embedded_images": "ocr"}})
    check_engines({})
    with pytest.raises(ValueError, match=r"parser.engines.pdf: 'magic' is not one of"):
        check_engines({"engines": {"pdf": "magic"}})
    with pytest.raises(ValueError, match="no parser has a choice of engine for 'pfd'"):
        check_engines({"engines": {"pfd": "text"}})
    with pytest.raises(ValueError, match="must be a mapping"):
        check_engines({"engines": ["pdf"]})
    assert "pdf" in engine_choices() and engine_choices()["embedded_images"] == ("off", "ocr")


def test_embedded_files_become_blocks_under_a_heading_naming_them() -> None:
    files = [
        EmbeddedFile("word/embeddings/notes.md", b"# Inside\n\nEmbedded words.\n", where="page 2"),
        EmbeddedFile("word/embeddings/table.csv", b"name,qty\npear,2\nplum,5\n", media_type="text/csv"),
    ]
    result = parse_embedded(files, {}, heading_path=["Report"])
    first = result.blocks[0]
    assert (first.kind, first.text, first.level, first.heading_path) == (
        BlockKind.HEADING,
        "notes.md (page 2)",
        2,
        ["Report"],
    )
    inner = next(b for b in result.blocks if b.text == "Embedded words.")
    assert inner.heading_path == ["Report", "notes.md (page 2)", "Inside"]
    assert inner.metadata["embedded_from"] == ["word/embeddings/notes.md"]
    rows = [r for b in result.blocks if b.kind == BlockKind.TABLE for r in b.rows or []]
    assert rows == [["pear", "2"], ["plum", "5"]]
    meta: dict = {}
    result.record(meta)
    assert [p["parser"] for p in meta["embedded"]] == ["markdown", "csv"] and "embedded_failed" not in meta


def test_a_bad_embedded_file_is_listed_and_the_rest_goes_on() -> None:
    files = [
        EmbeddedFile("bad.pdf", b"%PDF-1.7\n garbage that is no PDF"),
        EmbeddedFile("good.txt", b"still here"),
    ]
    result = parse_embedded(files, {})
    assert [f["name"] for f in result.failed] == ["bad.pdf"] and result.failed[0]["code"] == "corrupt"
    assert any(b.text == "still here" for b in result.blocks)


def test_depth_file_and_byte_caps_skip_with_a_reason() -> None:
    deep = parse_embedded([EmbeddedFile("x.txt", b"deep")], {"_embed_depth": 3, "embed_max_depth": 3})
    assert not deep.blocks and "embed_max_depth=3" in deep.skipped[0]["reason"]
    files = [EmbeddedFile(f"f{i}.txt", b"x" * 40) for i in range(3)]
    by_bytes = parse_embedded(files, {"embed_max_total": 100})
    assert len(by_bytes.parsed) == 2 and "embed_max_total=100" in by_bytes.skipped[0]["reason"]
    by_count = parse_embedded(files, {"embed_max_files": 1})
    assert len(by_count.parsed) == 1 and len(by_count.skipped) == 2


def test_nested_parses_inherit_what_is_left_of_the_allowance(monkeypatch: pytest.MonkeyPatch) -> None:
    # the nested parse sees depth 1 and the allowance minus what this level handed over
    seen: list[dict] = []
    from plugins.parsers import _embedded

    def spy(raw, options=None):
        seen.append(dict(options or {}))
        return parse_document(raw, options)

    monkeypatch.setattr(_embedded, "parse_document", spy)
    parse_embedded([EmbeddedFile("a.txt", b"x" * 10), EmbeddedFile("b.txt", b"y")], {"embed_max_total": 50})
    assert [(o["_embed_depth"], o["_embed_bytes_left"], o["_embed_chain"]) for o in seen] == [
        (1, 40, ["a.txt"]),
        (1, 39, ["b.txt"]),
    ]


def test_embedded_image_ocr_is_asked_for_explicitly() -> None:
    assert not embedded_images_wanted({})
    assert not embedded_images_wanted({"engines": {"embedded_images": "off"}})
    assert embedded_images_wanted({"engines": {"embedded_images": "ocr"}})
