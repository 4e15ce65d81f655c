"""Lakesheet -> .xlsx: rebuilt workbooks read back with openpyxl and compared cell by cell."""

from __future__ import annotations

import io
import json
import zlib
from pathlib import Path

import openpyxl
import pytest
from hypothesis import HealthCheck, given, settings

from plugins.connectors.yuque.lakesheet import (
    LakesheetError,
    _renamer,
    column_width,
    decode_sheets,
    find_wrapper,
    inflate_bounded,
    lakesheet_to_xlsx,
    sanitize_sheet_names,
)
from tests.simulators.yuque import body_sheet_of, encode_lakesheet
from tests.yuque.sheet_models import GOLDEN, GOLDEN_FORMULAS, GOLDEN_TITLES, GOLDEN_VALUES, sheet_models

# read relative to the repo root, like every shared reference (skipped when absent)
SAMPLES = Path(__file__).resolve().parents[2] / ".." / "shared" / "reference" / "samples"
SAMPLE = SAMPLES / "yuque-lakesheet-doc.json"


def _load(data: bytes, *, values: bool = True) -> openpyxl.Workbook:
    return openpyxl.load_workbook(io.BytesIO(data), data_only=values)


def _cells(ws) -> dict[str, object]:
    return {c.coordinate: c.value for row in ws.iter_rows() for c in row if c.value is not None}


def test_golden_values_titles_and_order():
    wb = _load(lakesheet_to_xlsx(encode_lakesheet(GOLDEN)))
    assert wb.sheetnames == GOLDEN_TITLES
    for title, expected in GOLDEN_VALUES.items():
        assert _cells(wb[title]) == expected, title
    # numbers typed in the UI come back typed; lossy-looking ones stay text
    detail = wb["明细_2026_Q1"]
    assert isinstance(detail["B2"].value, int) and isinstance(detail["C2"].value, float)
    assert detail["C3"].data_type == "s" and wb["总览"]["C5"].data_type == "s"
    assert detail["C2"].number_format == "0.0" and wb["总览"]["B5"].number_format == "0.00"


def test_golden_formulas_keep_formula_and_cached_value():
    data = lakesheet_to_xlsx(encode_lakesheet(GOLDEN))
    with_formulas = _load(data, values=False)
    for title, expected in GOLDEN_FORMULAS.items():
        for coord, formula in expected.items():
            assert with_formulas[title][coord].value == formula
    formulas = with_formulas["明细_2026_Q1"]
    # a literal "=..." string is text, not a formula
    assert formulas["A7"].data_type == "s" and formulas["A7"].value == "=这不是公式"
    cached = _load(data)["明细_2026_Q1"]
    assert (cached["D2"].value, cached["D3"].value) == (42, "多")
    assert cached["D4"].value is None  # Yuque gave no cached value: none is invented


def test_golden_styles_merges_and_sizes():
    wb = _load(lakesheet_to_xlsx(encode_lakesheet(GOLDEN)))
    ws = wb["明细_2026_Q1"]
    header = ws["A1"]
    assert header.font.b is True and header.font.sz == 14 and header.font.color.rgb == "FFC00000"
    assert header.alignment.horizontal == "center"
    assert header.fill.fill_type == "solid" and header.fill.fgColor.rgb == "FFF8B881"
    note = ws["A6"]
    assert note.alignment.horizontal == "right" and note.fill.fgColor.rgb == "FFFFF2CC"
    assert note.font.color.rgb == "FF0070C0" and not note.font.b
    wrapped = ws["A4"]
    assert wrapped.alignment.wrap_text is True and wrapped.alignment.horizontal == "left"
    assert not ws["A2"].font.b and ws["A2"].fill.fill_type is None
    assert [str(r) for r in ws.merged_cells.ranges] == ["A6:D6"]
    assert [str(r) for r in wb["总览"].merged_cells.ranges] == ["B7:C9"]
    # Excel widths: (px - 5 px padding) / 7 px per digit, not px / 7 (which is ~5 px too wide)
    assert ws.column_dimensions["A"].width == 19.29 and ws.column_dimensions["D"].width == 13.29
    assert ws.row_dimensions[1].height == 30.0 and ws.row_dimensions[6].height == 24.0
    assert wb["总览"]["B3"].hyperlink.target == "https://www.yuque.com"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sheet_models())
def test_generated_models_rebuild_cell_by_cell(model):
    sheets, expected = model
    wb = _load(lakesheet_to_xlsx(encode_lakesheet(sheets)))
    assert wb.sheetnames == [e["name"] for e in expected["sheets"]]
    for want in expected["sheets"]:
        ws = wb[want["name"]]
        merged = want["merge"]
        covered = set()
        if merged:
            r, c, rc, cc = merged
            covered = {(rr + 1, cc_ + 1) for rr in range(r, r + rc) for cc_ in range(c, c + cc)} - {(r + 1, c + 1)}
            assert [str(x) for x in ws.merged_cells.ranges] == [
                f"{openpyxl.utils.get_column_letter(c + 1)}{r + 1}:{openpyxl.utils.get_column_letter(c + cc)}{r + rc}"
            ]
        for (row, col), (value, style) in want["cells"].items():
            cell = ws.cell(row=row, column=col)
            if (row, col) in covered:
                continue
            assert cell.value == value and type(cell.value) is type(value)
            if style is not None:
                size, bold, h, color = style
                assert cell.font.sz == size and bool(cell.font.b) is bold
                assert cell.alignment.horizontal == {0: "left", 1: "center", 2: "right"}[h]
                assert cell.fill.fgColor.rgb[2:].lower() == _hex(color)
        for col, px in want["widths"].items():
            assert ws.column_dimensions[openpyxl.utils.get_column_letter(col + 1)].width == column_width(px)
        for row, px in want["heights"].items():
            assert ws.row_dimensions[row + 1].height == round(px * 0.75, 2)


def _hex(color: str) -> str:
    if color.startswith("rgb"):
        return "".join(f"{int(x):02x}" for x in color[color.index("(") + 1 : -1].split(","))
    return color.lstrip("#").lower()


def test_real_public_sample_decodes():
    if not SAMPLE.exists():
        pytest.skip(f"shared sample {SAMPLE.name} absent (../shared/reference/samples)")
    doc = json.loads(SAMPLE.read_text(encoding="utf-8"))
    wb = _load(lakesheet_to_xlsx(doc["data"]["content"]))
    assert wb.sheetnames == ["Sheet1", "Sheet2", "Sheet3"]
    assert _cells(wb["Sheet1"]) == {"A1": 1, "D2": "GSSSAPPAP", "B4": 12, "D5": 123, "G13": 234, "I14": 32423}
    second = _cells(wb["Sheet2"])
    # a checkbox is a boolean cell, not the text "TRUE"
    assert second["A1"] == "s" and second["D1"] is True and second["E1"] == "1"
    assert second["D2"] == "baidu" and second["E2"] == "13, 21321" and second["D3"] == "2x-00037-3212833155.png"
    # image cells keep their name as text and their src as the hyperlink
    ws = wb["Sheet2"]
    for coord in ("D3", "D4"):
        assert ws[coord].value == "2x-00037-3212833155.png"
        assert ws[coord].hyperlink.target.startswith("https://cdn.nlark.com/yuque/0/2024/png/222293/1708363936708-")
    assert wb["Sheet2"]["D2"].hyperlink.target == "https://www.baidu.com"
    assert _cells(wb["Sheet3"]) == {}


def test_wrapper_from_body_draft_when_body_is_empty():
    sheets = [{"name": "草稿", "index": 0, "data": {"0": {"0": {"v": "只在草稿里"}}}}]
    wb = _load(lakesheet_to_xlsx("", encode_lakesheet(sheets)))
    assert _cells(wb["草稿"]) == {"A1": "只在草稿里"}
    # body wins over body_draft when both hold a wrapper
    other = [{"name": "正文", "index": 0, "data": {"0": {"0": {"v": "正文"}}}}]
    assert _load(lakesheet_to_xlsx(encode_lakesheet(other), encode_lakesheet(sheets))).sheetnames == ["正文"]


def test_body_sheet_fallback_without_wrapper():
    body_sheet = body_sheet_of(GOLDEN)
    wb = _load(lakesheet_to_xlsx("", "", body_sheet))
    assert wb.sheetnames == GOLDEN_TITLES
    ws = wb["明细_2026_Q1"]
    assert (ws["A2"].value, ws["B2"].value, ws["D2"].value, ws["D3"].value) == ("苹果", 12, 42, "多")
    # the plain form carried in body itself is recognised too
    assert _load(lakesheet_to_xlsx(body_sheet)).sheetnames == GOLDEN_TITLES
    with pytest.raises(LakesheetError) as err:
        lakesheet_to_xlsx("", "", "")
    assert err.value.code == "empty"
    with pytest.raises(LakesheetError) as err:
        lakesheet_to_xlsx("# a markdown body", "", "")
    assert err.value.code == "empty"


def test_zlib_bomb_rejected_within_cap():
    bomb = zlib.compress(b"\x00" * (64 * 1024 * 1024), 9)  # 64 MiB of zeros in ~64 KiB
    assert len(bomb) < 100_000
    body = json.dumps({"format": "lakesheet", "sheet": bomb.decode("latin-1")})
    with pytest.raises(LakesheetError) as err:
        lakesheet_to_xlsx(body, max_bytes=1024 * 1024)
    assert err.value.code == "bomb"
    with pytest.raises(LakesheetError) as err:
        inflate_bounded(bomb, 4096)
    assert err.value.code == "bomb"
    # the same stream under a big enough cap inflates completely
    assert len(inflate_bounded(zlib.compress(b"x" * 5000), 5000)) == 5000


def test_truncated_and_garbage_streams_are_corrupt():
    good = zlib.compress(json.dumps([{"name": "a", "data": {}}]).encode())
    for bad in (good[:-6], b"x\x9cnot zlib at all"):
        with pytest.raises(LakesheetError) as err:
            decode_sheets({"sheet": bad.decode("latin-1")})
        assert err.value.code == "corrupt"


def test_single_sheet_object_and_find_wrapper():
    single = {"name": "唯一", "index": 0, "data": {"0": {"0": {"v": "x"}}}}
    wrapper = find_wrapper(None, "not json", encode_lakesheet(single))
    assert wrapper is not None and decode_sheets(wrapper)[0]["name"] == "唯一"
    # a laketable body ("sheet" is a list) is not a lakesheet wrapper
    assert find_wrapper(json.dumps({"format": "laketable", "sheet": [{"columns": []}]})) is None


def test_sheet_names_sanitised_and_deduplicated():
    names = sanitize_sheet_names(["a[1]:b*?/\\", "'quoted'", "", "History", "DATA", "data", "x" * 40, "x" * 40])
    assert names == ["a_1__b____", "quoted", "Sheet3", "History_", "DATA", "data (2)", "x" * 31, "x" * 27 + " (2)"]
    assert all(len(n) <= 31 for n in names)


def test_formula_sheet_references_follow_renames():
    rename = _renamer(["Data", "History", "a:b", "it's"], ["Data", "History_", "a_b", "it's"])
    assert rename("History!A1+Data!B1+MyHistory!C1+'History'!D1") == "'History_'!A1+Data!B1+MyHistory!C1+'History_'!D1"
    assert rename("SUM('a:b'!A1:A3)") == "SUM('a_b'!A1:A3)"
