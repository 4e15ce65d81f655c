"""Lakesheet fidelity on the cell classes real payloads carry (issue 20, point 5).

The public sources: yuque-dl's real compressed mock (``test/mocks/data/sheetData.json``) and the
shared styled model (``yuque-lakesheet-styled-model.json``, a real decoded sheet: a ``b0`` fill on
nine cells and three custom column widths). Both are read from ``../shared`` relative to the repo
root and the tests skip when it is absent.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import openpyxl
import pytest

from plugins.connectors.yuque.lakesheet import column_width, lakesheet_to_xlsx
from tests.simulators.yuque import encode_lakesheet

SAMPLES = Path(__file__).resolve().parents[2] / ".." / "shared" / "reference" / "samples"
STYLED = SAMPLES / "yuque-lakesheet-styled-model.json"


def _rebuild(sheets: list[dict]) -> openpyxl.Workbook:
    return openpyxl.load_workbook(io.BytesIO(lakesheet_to_xlsx(encode_lakesheet(sheets))))


def _one(v: object) -> openpyxl.cell.Cell:
    return _rebuild([{"name": "S", "index": 0, "data": {"0": {"0": {"v": v}}}}])["S"]["A1"]


def test_checkbox_cells_are_booleans():
    assert _one({"class": "checkbox", "value": True}).value is True
    assert _one({"class": "checkbox", "value": False}).value is False


@pytest.mark.parametrize("cls", ["image", "file"])
def test_image_and_file_cells_keep_name_and_link_their_src(cls):
    src = "https://cdn.nlark.com/yuque/0/2024/png/1/a.png"
    cell = _one({"class": cls, "src": src, "name": "a.png", "size": 10})
    assert cell.value == "a.png" and cell.hyperlink.target == src
    # a non-web src (javascript:, data:) never becomes a link
    assert _one({"class": cls, "src": "javascript:alert(1)", "name": "x"}).hyperlink is None


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("1234567890.123456789", "1234567890.123456789"),  # 19 digits: a double would change them
        ("0.1234567890123456", "0.1234567890123456"),  # 16 significant digits
        ("123456789.012345", 123456789.012345),  # exactly 15: exact as a double
        ("-0.000123", -0.000123),  # leading zeros are not significant
    ],
)
def test_numeric_strings_beyond_15_significant_digits_stay_text(typed, expected):
    cell = _one(typed)
    assert cell.value == expected and type(cell.value) is type(expected)


def test_column_width_is_excels_pixel_rule():
    # ECMA-376 18.3.1.13: trunc((px - 5) / 7 * 100 + 0.5) / 100; px / 7 is ~5 px too wide
    assert [column_width(px) for px in (240, 211, 209, 82)] == [33.57, 29.43, 29.14, 11.0]


def test_styled_real_model_rebuilds_cell_exact():
    if not STYLED.exists():
        pytest.skip(f"shared sample {STYLED.name} absent (../shared/reference/samples)")
    model = json.loads(STYLED.read_text(encoding="utf-8"))
    ws = _rebuild(model)["Sheet1"]
    expected = {
        f"{openpyxl.utils.get_column_letter(int(c) + 1)}{int(r) + 1}": cell
        for r, row in model[0]["data"].items()
        for c, cell in row.items()
    }
    got = {c.coordinate: c for row in ws.iter_rows() for c in row if c.value is not None}
    assert set(got) == set(expected) and len(got) == 18
    filled = []
    for coord, cell in expected.items():
        assert got[coord].value == cell["v"]
        if "s" in cell:
            filled.append(coord)
            assert got[coord].fill.fill_type == "solid" and got[coord].fill.fgColor.rgb == "FFF8B881"
        else:
            assert got[coord].fill.fill_type is None
    assert len(filled) == 9
    widths = {k: ws.column_dimensions[k].width for k in "EFG"}
    assert widths == {"E": 33.57, "F": 29.43, "G": 29.14}
    assert ws.column_dimensions["D"].width != widths["E"]  # only the three customised columns
