"""Sheet models for the lakesheet golden tests: a hand-written one with its expected workbook,
and a hypothesis strategy for generated ones whose expectations follow from how they are built.

Models use the keys real lakesheet payloads carry (``data[row][col].v``, ``s`` -> ``vStore``,
dict-shaped ``rows``/``columns``, ``mergeCells`` values), per the reference §4.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

LONG_NAME = "二〇二六年度华东区销售数据汇总表（含退货与折扣明细）"  # > 31 characters

GOLDEN: list[dict[str, Any]] = [
    {
        # listed first but index 1: must become the second worksheet
        "name": "明细:2026/Q1",
        "index": 1,
        "id": "b2X9",
        "rowCount": 200,
        "colCount": 26,
        "data": {
            "0": {"0": {"v": "产品", "s": 0}, "1": {"v": "数量", "s": 0}, "2": {"v": "单价", "s": 0}, "3": {"v": "合计", "s": 0}},
            "1": {"0": {"v": "苹果"}, "1": {"v": "12"}, "2": {"v": "3.5"},
                  "3": {"v": {"class": "formula", "formula": "B2*C2", "value": 42, "sources": [[1, 1]], "error": False}}},
            "2": {"0": {"v": "梨子"}, "1": {"v": 8}, "2": {"v": "007"},
                  "3": {"v": {"class": "formula", "formula": "=IF(B3>5,\"多\",\"少\")", "value": "多"}}},
            "3": {"0": {"v": "第一行\n第二行", "s": 2}, "1": {}, "3": {"v": {"class": "formula", "formula": "SUM(D2:D2)"}}},
            "5": {"0": {"v": "备注：价格含税", "s": 1}},
            "6": {"0": {"v": "=这不是公式"}},
        },
        "rows": {"0": {"size": 40, "customSize": 40}, "5": {"size": 32}},
        "columns": {"0": {"size": 140, "customSize": 140}, "3": {"size": 98}},
        "mergeCells": {"A6:D6": {"row": 5, "col": 0, "rowCount": 1, "colCount": 4}},
        "vStore": {
            "style": ["z14c0w7h1b0", "h2b1c1", "w4h0"],
            "style_color": ["#C00000", "rgb(0, 112, 192)"],
            "style_backColor": ["#F8B881", "rgba(255,242,204,1)"],
        },
        "filter": {},
        "selections": {"row": 0, "col": 0, "rowCount": 1, "colCount": 1},
    },
    {
        "name": "总览",
        "index": 0,
        "id": "q0F6",
        "rowCount": 200,
        "colCount": 26,
        "data": {
            "0": {"0": {"v": "完成"}, "1": {"v": {"class": "checkbox", "value": True}}},
            "1": {"0": {"v": "状态"}, "1": {"v": {"class": "select", "value": ["s2", "s3"], "multi": True,
                                                   "options": [{"value": "s1", "label": "待办"}, {"value": "s2", "label": "进行中"}, {"value": "s3"}]}}},
            "2": {"0": {"v": "链接"}, "1": {"v": {"class": "link", "text": "语雀", "url": "https://www.yuque.com"}}},
            "3": {"0": {"v": "图片"}, "1": {"v": {"class": "image", "src": "https://cdn.nlark.com/x.png", "name": "架构图.png"}}},
            "4": {"0": {"v": "-4"}, "1": {"v": "1.25"}, "2": {"v": "12345678901234567890"}},
            # refers to a sheet whose name is not legal in Excel: the reference follows the rename
            "5": {"0": {"v": {"class": "formula", "formula": "'明细:2026/Q1'!B2+1", "value": 13}}},
        },
        "rows": {},
        "columns": {},
        "mergeCells": {"m1": {"row": 6, "col": 1, "rowCount": 3, "colCount": 2}},
        "vStore": {},
    },
    {"name": LONG_NAME, "index": 2, "data": {"0": {"0": {"v": "长名字"}}}, "vStore": {}},
    {"name": LONG_NAME, "index": 3, "data": {"0": {"0": {"v": "重名"}}}, "vStore": {}},
    {"name": "总览", "index": 4, "data": {}, "vStore": {}},
]  # fmt: skip

# what the rebuilt workbook must hold: sheet title -> {coordinate: value} (values read with
# data_only=True, i.e. formula cells show their cached value)
GOLDEN_TITLES = ["总览", "明细_2026_Q1", LONG_NAME[:31], LONG_NAME[:27] + " (2)", "总览 (2)"]
GOLDEN_VALUES = {
    "总览": {
        "A1": "完成", "B1": True, "A2": "状态", "B2": "进行中, s3", "A3": "链接", "B3": "语雀",
        "A4": "图片", "B4": "架构图.png", "A5": -4, "B5": 1.25, "C5": "12345678901234567890", "A6": 13,
    },
    "明细_2026_Q1": {
        "A1": "产品", "B1": "数量", "C1": "单价", "D1": "合计",
        "A2": "苹果", "B2": 12, "C2": 3.5, "D2": 42,
        "A3": "梨子", "B3": 8, "C3": "007", "D3": "多",
        "A4": "第一行\n第二行", "A6": "备注：价格含税", "A7": "=这不是公式",
    },
    LONG_NAME[:31]: {"A1": "长名字"},
    LONG_NAME[:27] + " (2)": {"A1": "重名"},
    "总览 (2)": {},
}  # fmt: skip
GOLDEN_FORMULAS = {
    "明细_2026_Q1": {"D2": "=B2*C2", "D3": '=IF(B3>5,"多","少")', "D4": "=SUM(D2:D2)"},
    "总览": {"A6": "='明细_2026_Q1'!B2+1"},
}


# --------------------------------------------------------------------------- generated models

_TEXT = st.text(alphabet="语雀表格数据销售华东北京上海αβ abcXYZ-_", min_size=1, max_size=12).filter(
    lambda s: s.strip() and not s.lstrip("-").isdigit()
)
_COLORS = st.sampled_from(["#FF0000", "#00B050", "#1F4E79", "rgb(255, 192, 0)", "#abcdef"])


@st.composite
def cell_values(draw: Any) -> tuple[Any, Any]:
    """-> (v as Yuque stores it, value expected in the workbook)."""
    kind = draw(st.sampled_from(["text", "int", "float", "native"]))
    if kind == "text":
        text = draw(_TEXT)
        return text, text
    if kind == "int":
        n = draw(st.integers(-(10**9), 10**9))
        return str(n), n
    if kind == "float":
        whole, frac = draw(st.integers(0, 10**6)), draw(st.integers(1, 99))
        text = f"{whole}.{frac:02d}" if frac % 10 else f"{whole}.{frac // 10}"
        return text, float(text)
    n = draw(st.integers(-1000, 1000))
    return n, n


@st.composite
def sheet_models(draw: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Several sheets with values, styles, merges and sizes, plus the expectations."""
    sheets, expected = [], []
    count = draw(st.integers(1, 3))
    order = draw(st.permutations(list(range(count))))
    for n in range(count):
        styles = draw(st.lists(st.tuples(st.integers(9, 20), st.booleans(), st.sampled_from([0, 1, 2]), _COLORS),
                               min_size=1, max_size=3))  # fmt: skip
        codes = [f"z{size}{'w7' if bold else 'w4'}h{h}b{i}" for i, (size, bold, h, _) in enumerate(styles)]
        backs = [color for *_, color in styles]
        cells = draw(st.dictionaries(st.tuples(st.integers(0, 30), st.integers(0, 8)),
                                     st.tuples(cell_values(), st.one_of(st.none(), st.integers(0, len(styles) - 1))),
                                     max_size=25))  # fmt: skip
        data: dict[str, dict[str, Any]] = {}
        want: dict[tuple[int, int], Any] = {}
        for (r, c), ((v, value), style) in cells.items():
            cell: dict[str, Any] = {"v": v}
            if style is not None:
                cell["s"] = style
            data.setdefault(str(r), {})[str(c)] = cell
            want[(r + 1, c + 1)] = (value, None if style is None else styles[style])
        merge = draw(
            st.one_of(
                st.none(), st.tuples(st.integers(32, 40), st.integers(0, 5), st.integers(1, 3), st.integers(2, 3))
            )
        )
        merges = (
            {}
            if merge is None
            else {"m": {"row": merge[0], "col": merge[1], "rowCount": merge[2], "colCount": merge[3]}}
        )
        widths = draw(st.dictionaries(st.integers(0, 8), st.integers(30, 400), max_size=3))
        heights = draw(st.dictionaries(st.integers(0, 30), st.integers(16, 120), max_size=3))
        sheets.append({
            "name": f"表{n}", "index": order[n], "data": data, "mergeCells": merges,
            "columns": {str(c): {"size": px} for c, px in widths.items()},
            "rows": {str(r): {"size": px} for r, px in heights.items()},
            "vStore": {"style": codes, "style_backColor": backs},
        })  # fmt: skip
        expected.append({"name": f"表{n}", "index": order[n], "cells": want, "merge": merge,
                         "widths": widths, "heights": heights})  # fmt: skip
    return sheets, {"sheets": sorted(expected, key=lambda e: e["index"])}
