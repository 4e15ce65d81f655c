"""Paths, keys and notebook outputs are charged as they are built (issue 33, points 7 and 8).

Each hostile case runs in a forked child under an address-space cap (``run_capped``), so a
regression fails there (a failed allocation, or peak memory over the bound asserted here)
instead of swapping the shared machine. Before these fixes the XML, JSON and JSON Lines cases
ran to the cap (3 GiB in 2.6-7 s), the YAML one to its isolated child's 1 GiB limit (``bomb``).
"""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec
import pytest

from include.contract import ParseError, ParseErrorCode
from plugins.parsers import notebook
from plugins.parsers.jsonl import MAX_KEY_CHARS, NOTEBOOK
from plugins.parsers.notebook import CELL_OUTPUT_CHARS
from plugins.parsers.registry import get_parser
from plugins.parsers.text import keep_lines
from tests.parsers.capped import MiB, run_capped
from tests.parsers.conftest import parse_bytes

CAP = 1024 * MiB  # address space a case's child may add: what a regression runs into
KEY = "k" * (1 << 20)  # a 1 MiB key
CUT_KEY = "k" * MAX_KEY_CHARS + "…"


def _outcome(data: bytes, name: str, declared: str | None = None, **options: object) -> dict[str, Any]:
    """What a parse ended in, small enough to send back from the capped child."""
    try:
        doc = parse_bytes(data, name, declared, **options)
    except ParseError as exc:
        return {"error": exc.code, "message": exc.message}
    paths = [p.path or "" for b in doc.blocks for p in b.positions]
    return {
        "blocks": len(doc.blocks),
        "chars": sum(len(b.text) for b in doc.blocks),
        "longest_line": max(len(line) for b in doc.blocks for line in b.text.splitlines()),
        "longest_path": max(map(len, paths)),
        "first_line": doc.blocks[0].text.split("\n", 1)[0][:400],
        "paths": paths[:3],
        "metadata": doc.metadata,
    }


def _capped(data: bytes, name: str, declared: str | None = None, **options: object) -> tuple[dict[str, Any], int]:
    return run_capped(lambda: _outcome(data, name, declared, **options), CAP, timeout_s=240)


# --------------------------------------------------------------------------- XML


def _deep_xml(depth: int, name_len: int, leaves: int) -> bytes:
    names = [f"e{i:03d}" + "n" * (name_len - 4) for i in range(depth)]
    return ("".join(f"<{n}>" for n in names) + "<v>1</v>" * leaves + "".join(f"</{n}>" for n in names[::-1])).encode()


def test_xml_paths_under_250_long_nested_names_are_charged_as_built() -> None:
    # 100,000 leaves under 250 nested 2,000-character names: 50 GB of paths written out in full
    data = _deep_xml(250, 2000, 100_000)
    result, growth = _capped(data, "deep.xml")
    assert result["error"] == ParseErrorCode.TOO_LARGE and "max_chars" in result["message"], result
    assert growth < 512 * MiB, growth >> 20  # the tree (~200 MiB), not the paths


def test_xml_long_element_names_are_cut_in_paths() -> None:
    result, growth = _capped(_deep_xml(250, 2000, 20), "deep.xml")
    assert result["blocks"] == 20, result
    # each of the 250 steps cut to 256 characters and "…", plus "/", then "/v[i]"
    assert result["longest_path"] <= 250 * (256 + 2) + len("/v[20]")
    first = result["paths"][0]
    assert first.startswith("/e000" + "n" * 252 + "…/e001") and first.endswith("/v[1]")
    assert growth < 256 * MiB, growth >> 20


# --------------------------------------------------------------------------- JSON, JSON Lines, YAML


def _leaves(n: int) -> dict[str, int]:
    return {f"a{i}": i for i in range(n)}


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("key.json", json.dumps({KEY: _leaves(20_000)}).encode()),
        # a record array under the long key: each record's position path held the key
        ("records.json", json.dumps({KEY: [{"a": i} for i in range(20_000)]}).encode()),
        ("key.jsonl", (json.dumps({KEY: _leaves(20_000)}) + "\n" + json.dumps({"b": 1}) + "\n").encode()),
        # an explicit key ("? "): a YAML implicit key is capped at 1,024 characters
        ("key.yaml", ("? " + KEY + "\n:\n" + "".join(f"  a{i}: {i}\n" for i in range(20_000))).encode()),
    ],
    ids=["json", "json-records", "jsonl", "yaml"],
)
def test_a_1_mib_key_over_20000_leaves_is_cut_and_parsed_within_the_cap(name: str, data: bytes) -> None:
    # isolate off: the YAML parse runs in the capped child itself, where its memory is measured
    result, growth = _capped(data, name, isolate=False)
    assert "error" not in result, result
    # the key, cut, starts the first block's first line, or (a record array) its path
    assert result["first_line"].startswith(CUT_KEY) or result["paths"][0].startswith(f"$.{CUT_KEY}[0]")
    assert result["longest_line"] < 2 * MAX_KEY_CHARS  # "kkk…k….a123: 123", "kkk…k…[7].a: 7"
    assert result["longest_path"] < 2 * MAX_KEY_CHARS
    assert result["chars"] < 6_000_000  # 20,000 lines of ~270 characters, not 20 GB
    assert growth < 256 * MiB, growth >> 20


def test_json_lines_are_refused_at_the_character_cap_as_they_are_built() -> None:
    # the same document with a 1 MB character cap: too_large once the lines reach it
    data = json.dumps({KEY: _leaves(20_000)}).encode()
    for name in ("key.json", "key.jsonl"):
        result, growth = _capped(data, name, max_chars=1_000_000)
        assert result["error"] == ParseErrorCode.TOO_LARGE and "max_chars" in result["message"], result
        assert growth < 128 * MiB, growth >> 20


def test_ordinary_json_keys_and_envelope_are_unchanged() -> None:
    data = json.dumps({"total": 2, "data": {"items": [{"id": 1, "tags": ["a", "b"]}, {"id": 2}]}}).encode()
    doc = parse_bytes(data, "e.json")
    assert [(b.text, b.positions[0].path) for b in doc.blocks] == [
        ("id: 1\ntags: a, b", "$.data.items[0]"),
        ("id: 2", "$.data.items[1]"),
        ("total: 2", "$"),
    ]


# --------------------------------------------------------------------------- notebooks


def _notebook(outputs: list[bytes], source: bytes = b'["print(1)\\n"]') -> bytes:
    """A v4 notebook of one code cell with these outputs (raw JSON, so a test can make them huge cheaply)."""
    cell = b'{"cell_type":"code","metadata":{},"execution_count":1,"source":%s,"outputs":[%s]}' % (
        source,
        b",".join(outputs),
    )
    return b'{"cells":[%s],"metadata":{"kernelspec":{"language":"python"}},"nbformat":4,"nbformat_minor":5}' % cell


def _stream(lines: int, line: bytes = b"0123456\\n") -> bytes:
    return b'{"output_type":"stream","name":"stdout","text":[' + b",".join([b'"' + line + b'"'] * lines) + b"]}"


def test_a_huge_output_is_cut_at_the_cell_cap_in_memory_proportional_to_what_is_kept() -> None:
    # 2M output lines (18 MB; the 16M-line 208 MB notebook scaled down): json.loads made
    # 2M strings, the join and splitlines 2M more (~300 MiB here, 2.5 GB at 16M lines)
    data = _notebook([_stream(2_000_000)])
    result, growth = _capped(data, "big.ipynb", isolate=False)
    assert "error" not in result, result
    assert result["metadata"]["outputs_cut"] == 1
    assert result["metadata"]["max_cell_output_chars"] == CELL_OUTPUT_CHARS
    assert result["chars"] <= CELL_OUTPUT_CHARS + len("print(1)")
    assert growth < 96 * MiB, growth >> 20


def test_the_cut_is_recorded_on_the_block_where_it_fell_and_later_outputs_are_dropped() -> None:
    outputs = [
        _stream(3, b"first\\n"),
        b'{"output_type":"execute_result","data":{"text/plain":["' + b"x" * 50 + b'\\n"],"image/png":"iVBOR"}}',
        _stream(1, b"never read\\n"),
    ]
    doc = parse_bytes(_notebook(outputs), "cut.ipynb", max_cell_output_chars=30)
    blocks = [(b.text, b.positions[0].path, b.metadata.get("output_cut")) for b in doc.blocks[1:]]
    assert blocks == [
        ("first\nfirst\nfirst", "cells[0].outputs[0]", None),
        ("x" * 12, "cells[0].outputs[1]", True),  # 18 characters kept, then 12 of the second
    ]
    assert doc.metadata["outputs_cut"] == 1 and doc.metadata["max_cell_output_chars"] == 30
    # within the cap nothing is marked
    whole = parse_bytes(_notebook(outputs[:1]), "whole.ipynb", max_cell_output_chars=30)
    assert "outputs_cut" not in whole.metadata and all("output_cut" not in b.metadata for b in whole.blocks)


def test_a_cells_source_over_the_document_cap_is_too_large() -> None:
    source = b"[" + b",".join([b'"x = 1\\n"'] * 200_000) + b"]"
    with pytest.raises(ParseError) as err:
        parse_bytes(_notebook([], source), "src.ipynb", max_chars=100_000)
    assert err.value.code == ParseErrorCode.TOO_LARGE and "max_chars" in err.value.message
    assert parse_bytes(_notebook([], source), "src.ipynb").blocks[0].text.count("\n") == 199_999


@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_lines_are_decoded_a_chunk_at_a_time_as_json_would(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    # escapes, quotes, non-BMP characters and a line longer than a chunk, at every chunk size
    lines = ['say "hi"\n', "back\\slash\n", "é😀\n", "", "\t tab\n", "x" * 100 + "\n", "]," + "\n", "end"]
    monkeypatch.setattr(notebook, "_CHUNK", chunk)
    raw = msgspec.Raw(json.dumps(lines).encode())
    assert notebook._multiline(raw, 10_000) == ("".join(lines), False)
    assert notebook._multiline(raw, 20) == ("".join(lines)[:20], True)
    # nbformat 2: lines without their newline are joined with one
    v2 = msgspec.Raw(json.dumps(["a", "b", "c"] * 5).encode())
    assert notebook._multiline(v2, 10_000) == ("\n".join(["a", "b", "c"] * 5), False)
    # a string, not a list; and an item that is not a string ends the text
    assert notebook._multiline(msgspec.Raw(b'"one\\ntwo"'), 5) == ("one\nt", True)
    assert notebook._multiline(msgspec.Raw(b'["a\\n", 5, "b"]'), 100) == ("a\n", False)


def test_kept_lines_matches_keep_lines_over_splitlines() -> None:
    rng = random.Random(33)
    alphabet = ["a", "b", " ", "\t", "\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1f", "\x85", "\u2028", "\xa0", "\x01"]
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
        assert notebook.kept_lines(text) == keep_lines(text.splitlines()), repr(text)


def test_notebooks_run_isolated_and_json_hands_them_over_before_loading() -> None:
    assert get_parser(NOTEBOOK).isolate  # type: ignore[union-attr]
    # a notebook served as application/json: read lazily by the notebook parser, not json.loads
    data = _notebook([_stream(300_000)])
    result, growth = _capped(data, "served", declared="application/json")
    assert result["metadata"]["outputs_cut"] == 1, result
    assert growth < 64 * MiB, growth >> 20
