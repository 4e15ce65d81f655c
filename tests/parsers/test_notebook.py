"""Jupyter notebooks: markdown cells as Markdown, code cells as code, outputs as text (issue 23, point 4).

The notebooks are written here the way Jupyter writes them (nbformat 4 JSON, one-space
indent, multiline strings as lists of lines, "cells" first and "nbformat" last) and in the
older nbformat 3 layout (worksheets, ``input``, ``pyout``/``pyerr``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from include.contract import BlockKind, ParseError, ParseErrorCode
from plugins.parsers import sniff_media_type
from tests.parsers.conftest import parse_bytes

NOTEBOOK = "application/x-ipynb+json"


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def notebook_v4(cells: list[dict[str, Any]], language: str = "python") -> bytes:
    doc = {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": language, "name": "python3"},
            "language_info": {"name": language, "version": "3.11.7"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode()


def md(text: str) -> dict[str, Any]:
    return {"cell_type": "markdown", "metadata": {}, "source": _lines(text)}


def code(text: str, *outputs: dict[str, Any]) -> dict[str, Any]:
    return {"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": list(outputs), "source": _lines(text)}


STREAM = {"name": "stdout", "output_type": "stream", "text": ["total 42\n", "  indented line\n"]}
RESULT = {
    "data": {"text/plain": ["   a  b\n", "0  1  2"], "text/html": ["<table><tr><td>1</td></tr></table>"]},
    "execution_count": 2,
    "metadata": {},
    "output_type": "execute_result",
}
FIGURE = {
    "data": {"image/png": "iVBORw0KGgo=", "text/plain": ["<Figure size 640x480 with 1 Axes>"]},
    "metadata": {},
    "output_type": "display_data",
}
HTML_ONLY = {
    "data": {"text/html": ["<div><script>alert(1)</script><b>Styled</b> <i>table</i></div>"]},
    "metadata": {},
    "output_type": "display_data",
}
ERROR = {
    "ename": "ZeroDivisionError",
    "evalue": "division by zero",
    "output_type": "error",
    "traceback": ["\x1b[0;31m---------\x1b[0m", "\x1b[0;31mZeroDivisionError\x1b[0m"],
}
ANSI_STREAM = {"name": "stderr", "output_type": "stream", "text": ["\x1b[31mwarning:\x1b[0m careful\n"]}

CELLS = [
    md("# 销售分析 Sales analysis\n\nThe *quarterly* numbers, read from `sales.csv`."),
    code(
        "import pandas as pd\n\ndef total(df):\n    return df.sum()\n\nprint(total(pd.Series([42])))",
        STREAM,
        RESULT,
        FIGURE,
    ),
    md("## Errors\n\n| k | v |\n|---|---|\n| x | 1 |\n\n- one\n- two"),
    code("1 / 0", ERROR, ANSI_STREAM, HTML_ONLY),
    {"cell_type": "raw", "metadata": {}, "source": "raw cell text"},
    md(""),
]


def test_cells_in_order_with_paths_languages_and_headings() -> None:
    doc = parse_bytes(notebook_v4(CELLS), "analysis.ipynb")
    assert doc.parser == "notebook" and doc.media_type == NOTEBOOK
    assert doc.title == "销售分析 Sales analysis"
    assert doc.metadata == {"nbformat": 4, "cells": 6, "language": "python"}
    got = [(b.kind, b.positions[0].path) for b in doc.blocks]
    assert got == [
        (BlockKind.HEADING, "cells[0]"),
        (BlockKind.PARAGRAPH, "cells[0]"),
        (BlockKind.CODE, "cells[1]"),
        (BlockKind.PARAGRAPH, "cells[1].outputs[0]"),
        (BlockKind.PARAGRAPH, "cells[1].outputs[1]"),
        (BlockKind.HEADING, "cells[2]"),
        (BlockKind.TABLE, "cells[2]"),
        (BlockKind.LIST, "cells[2]"),
        (BlockKind.CODE, "cells[3]"),
        (BlockKind.PARAGRAPH, "cells[3].outputs[0]"),
        (BlockKind.PARAGRAPH, "cells[3].outputs[1]"),
        (BlockKind.PARAGRAPH, "cells[3].outputs[2]"),
        (BlockKind.PARAGRAPH, "cells[4]"),
    ]
    blocks = doc.blocks
    assert blocks[1].text == "The quarterly numbers, read from sales.csv."
    # code keeps its indentation and blank lines, and says its language
    assert (
        blocks[2].text == "import pandas as pd\n\ndef total(df):\n    return df.sum()\n\nprint(total(pd.Series([42])))"
    )
    assert blocks[2].metadata == {"language": "python"}
    # a code cell sits under the heading of the markdown cell above it; headings nest across cells
    assert blocks[2].heading_path == ["销售分析 Sales analysis"]
    assert blocks[8].heading_path == ["销售分析 Sales analysis", "Errors"]
    assert blocks[3].text == "total 42\n  indented line" and blocks[3].metadata == {"output_type": "stream"}
    assert blocks[4].text == "   a  b\n0  1  2"  # text/plain preferred to HTML
    assert blocks[6].header == ["k", "v"] and blocks[6].rows == [["x", "1"]]
    assert blocks[9].text == "ZeroDivisionError: division by zero"
    assert blocks[10].text == "warning: careful"  # ANSI colours stripped
    assert blocks[11].text == "Styled table"  # HTML-only output: tags and scripts stripped
    assert "Figure size" not in doc.text and "iVBOR" not in doc.text


def test_language_from_language_info_and_kernel() -> None:
    doc = parse_bytes(notebook_v4([code('println("hi")')], language="Scala"), "s.ipynb")
    assert doc.blocks[0].metadata == {"language": "scala"}
    nb = json.loads(notebook_v4([code("x <- 1")]))
    nb["metadata"] = {"language_info": {"name": "R"}}
    doc = parse_bytes(json.dumps(nb).encode(), "r.ipynb")
    assert doc.blocks[0].metadata == {"language": "r"}


def test_nbformat_3_worksheets() -> None:
    v3 = {
        "metadata": {"name": "old"},
        "nbformat": 3,
        "nbformat_minor": 0,
        "worksheets": [
            {
                "cells": [
                    {"cell_type": "heading", "level": 1, "metadata": {}, "source": ["Old notebook"]},
                    {"cell_type": "markdown", "metadata": {}, "source": ["Some **text**."]},
                    {
                        "cell_type": "code",
                        "collapsed": False,
                        "input": ["for i in range(2):\n", "    print(i)"],
                        "language": "python",
                        "metadata": {},
                        "outputs": [
                            {"output_type": "stream", "stream": "stdout", "text": ["0\n", "1\n"]},
                            {"output_type": "pyout", "prompt_number": 2, "metadata": {}, "text": ["3"]},
                            {
                                "output_type": "display_data",
                                "png": "iVBOR",
                                "text": ["<matplotlib.figure.Figure at 0x10>"],
                            },
                            {"output_type": "pyerr", "ename": "KeyError", "evalue": "'x'", "traceback": []},
                        ],
                        "prompt_number": 2,
                    },
                ],
                "metadata": {},
            }
        ],
    }
    data = json.dumps(v3).encode()
    doc = parse_bytes(data, "old.ipynb")
    assert [(b.kind, b.text, b.positions[0].path) for b in doc.blocks] == [
        (BlockKind.HEADING, "Old notebook", "worksheets[0].cells[0]"),
        (BlockKind.PARAGRAPH, "Some text.", "worksheets[0].cells[1]"),
        (BlockKind.CODE, "for i in range(2):\n    print(i)", "worksheets[0].cells[2]"),
        (BlockKind.PARAGRAPH, "0\n1", "worksheets[0].cells[2].outputs[0]"),
        (BlockKind.PARAGRAPH, "3", "worksheets[0].cells[2].outputs[1]"),
        (BlockKind.PARAGRAPH, "KeyError: 'x'", "worksheets[0].cells[2].outputs[3]"),
    ]
    assert doc.blocks[2].metadata == {"language": "python"}
    assert sniff_media_type(data, "") == NOTEBOOK


def test_sniffed_without_a_name_and_routed_from_json() -> None:
    data = notebook_v4(CELLS)
    assert sniff_media_type(data, "") == NOTEBOOK
    # servers label notebooks application/json; the JSON parser hands them on
    doc = parse_bytes(data, "analysis", "application/json")
    assert doc.media_type == NOTEBOOK and doc.blocks[2].kind == BlockKind.CODE
    # a big notebook (outputs of 200 KB): its keys are at both ends, not all within the sample
    big = notebook_v4([md("# Big"), code("print('x' * 10)", {**STREAM, "text": ["x" * 100 + "\n"] * 2000})])
    assert len(big) > 65536 and sniff_media_type(big, "") == NOTEBOOK
    # an ordinary JSON document that merely has a "cells" field is not a notebook
    assert sniff_media_type(b'{"cells": [1, 2], "rows": 3}', "") == "application/json"


def test_long_output_is_cut_into_blocks() -> None:
    lines = [f"line {i}\n" for i in range(450)]
    doc = parse_bytes(notebook_v4([code("run()", {**STREAM, "text": lines})]), "long.ipynb")
    outputs = [b for b in doc.blocks if b.kind == BlockKind.PARAGRAPH]
    assert [len(b.text.splitlines()) for b in outputs] == [200, 200, 50]
    assert {b.positions[0].path for b in outputs} == {"cells[0].outputs[0]"}


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b'{"cells": [], "nbformat": 4, "metadata": {}}', ParseErrorCode.EMPTY),
        (notebook_v4(CELLS)[:-300], ParseErrorCode.CORRUPT),  # truncated
        (b'{"nbformat": 4, "cells": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", ParseErrorCode.BOMB),
        (b'{"no": "cells"}', ParseErrorCode.CORRUPT),
        (b"\x00\x01 not json", ParseErrorCode.CORRUPT),
    ],
)
def test_bad_notebooks_are_typed_errors(data: bytes, code: ParseErrorCode) -> None:
    with pytest.raises(ParseError) as err:
        parse_bytes(data, "bad.ipynb")
    assert err.value.code == code


def test_cells_of_the_wrong_shape_are_skipped_not_fatal() -> None:
    nb = json.loads(notebook_v4([md("# Kept")]))
    nb["cells"] += [None, 3, {"cell_type": "code", "source": 5, "outputs": "no"}, {"cell_type": "unknown"}]
    doc = parse_bytes(json.dumps(nb).encode(), "odd.ipynb")
    assert [b.text for b in doc.blocks] == ["Kept"]


def test_nbformat_2_lines_without_newlines() -> None:
    # nbformat 2 wrote source lines without their newline (nbformat's v2 reader joins them with one)
    v2 = {
        "metadata": {"name": "intro"},
        "nbformat": 2,
        "worksheets": [
            {
                "cells": [
                    {"cell_type": "markdown", "source": ["# An introduction", "", "First paragraph", "goes on."]},
                    {"cell_type": "code", "input": ["for x in y:", "    f(x)"], "language": "python", "outputs": []},
                ]
            }
        ],
    }
    doc = parse_bytes(json.dumps(v2).encode(), "intro.ipynb")
    assert [b.text for b in doc.blocks] == ["An introduction", "First paragraph\ngoes on.", "for x in y:\n    f(x)"]
