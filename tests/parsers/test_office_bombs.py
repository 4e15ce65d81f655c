"""Tiny office files that used to take gigabytes (issue 19, point 2): each ends in blocks or a
typed ParseError, bounded by the document's budgets.

Every hostile parse runs in a forked child under an address-space limit (``RLIMIT_AS``) and a
generous wall-clock bound, so a regression fails fast instead of eating the shared machine:
the child reports its outcome through a pipe, or the test sees it die or get killed.
"""

from __future__ import annotations

import io
import json
import os
import resource
import select
import signal
import time
import zipfile
from typing import Any

import pytest

from include.contract import ParseError
from plugins.parsers._tabular import column_letter
from tests.parsers.conftest import parse_bytes
from tests.parsers.ooxml import NUMBERING, W_NS, build_docx, p

# 1.5 GiB of address space for the child *on top of what it inherits*: in a full test run the
# pytest process already maps over a GiB (Airflow, pdfium, numpy), so an absolute cap would fail
# bounded parses for lack of room rather than for what they allocate.
AS_EXTRA = 1536 * 1024 * 1024
WALL_S = 90.0  # far above any bounded parse here; the old merge loop ran for 339 s

# --------------------------------------------------------------------------- child runner


def _address_space() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _child(data: bytes, name: str, options: dict[str, Any], fd: int) -> None:
    limit = _address_space() + AS_EXTRA
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        doc = parse_bytes(data, name, **options)
        out: dict[str, Any] = {
            "outcome": "blocks",
            "blocks": len(doc.blocks),
            "chars": sum(len(b.text) for b in doc.blocks),
            "texts": [b.text[:200] for b in doc.blocks[:20]],
            "widest_row": max((len(r) for b in doc.blocks for r in b.rows or ()), default=0),
        }
    except ParseError as exc:
        out = {"outcome": str(exc.code.value), "message": str(exc)[:500]}
    except MemoryError:
        out = {"outcome": "MemoryError"}
    os.write(fd, json.dumps(out).encode())


def run_capped(data: bytes, name: str, **options: Any) -> dict[str, Any]:
    """Parse in a forked child capped at its own size plus ``AS_EXTRA`` bytes and ``WALL_S`` seconds."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_fd)
        code = 0
        try:
            _child(data, name, options, write_fd)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks: list[bytes] = []
    deadline = time.monotonic() + WALL_S
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                return {"outcome": "killed after the wall-clock bound"}
            ready, _, _ = select.select([read_fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(read_fd, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
    if not chunks:
        return {"outcome": f"child died (wait status {status})"}
    return json.loads(b"".join(chunks))


# --------------------------------------------------------------------------- hostile files

_HEADER_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.header+xml"
_HEADER_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/header"


def docx_deep_ilvl() -> bytes:
    """``w:ilvl=1000000000``: the indentation was ``'  ' * ilvl``, two billion characters."""
    numpr = '<w:numPr><w:ilvl w:val="1000000000"/><w:numId w:val="2"/></w:numPr>'
    return build_docx(
        p("first", ppr='<w:numPr><w:ilvl w:val="0"/><w:numId w:val="2"/></w:numPr>') + p("deep", ppr=numpr)
    )


def docx_numbering_start(start: str, fmt: str) -> bytes:
    """A list level starting at ``start`` in format ``fmt``: markers of unbounded length."""
    numbering = NUMBERING.replace(
        '<w:lvl w:ilvl="0"><w:start w:val="1"/><w:numFmt w:val="decimal"/>',
        f'<w:lvl w:ilvl="0"><w:start w:val="{start}"/><w:numFmt w:val="{fmt}"/>',
    )
    assert numbering != NUMBERING
    numpr = '<w:numPr><w:ilvl w:val="0"/><w:numId w:val="2"/></w:numPr>'
    return build_docx(p("one", ppr=numpr) + p("two", ppr=numpr), numbering=numbering)


def docx_many_headers(count: int = 60, size: int = 8 * 1024 * 1024 - 4096) -> bytes:
    """``count`` header parts just under the 8 MiB below which the per-part ratio test is off."""
    para = b"<w:p><w:r><w:t>x</w:t></w:r></w:p>"
    head = f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:hdr xmlns:w="{W_NS}">'.encode()
    header = head + para * ((size - len(head) - 8) // len(para)) + b"</w:hdr>"
    rels = "".join(f'<Relationship Id="rIdH{i}" Type="{_HEADER_REL}" Target="header{i}.xml"/>' for i in range(count))
    types = "".join(f'<Override PartName="/word/header{i}.xml" ContentType="{_HEADER_TYPE}"/>' for i in range(count))
    parts = {f"word/header{i}.xml": header for i in range(count)}
    return build_docx(p("body text"), extra_rels=rels, extra_parts=parts, extra_types=types)


def docx_vmerge_copies(rows: int = 20_000, cell_chars: int = 1 << 20) -> bytes:
    """One 1 MiB cell continued down ``rows`` rows by ``w:vMerge``: a copy per row."""
    first = f'<w:tr><w:tc><w:tcPr><w:vMerge w:val="restart"/></w:tcPr>{p("a" * cell_chars)}</w:tc></w:tr>'
    cont = "<w:tr><w:tc><w:tcPr><w:vMerge/></w:tcPr><w:p/></w:tc></w:tr>"
    return build_docx(p("before") + "<w:tbl>" + first + cont * rows + "</w:tbl>")


def _xlsx_with_sheet(sheet_data: str, tail: str = "") -> bytes:
    """An openpyxl-written workbook whose first sheet's XML is replaced by ``sheet_data``."""
    import openpyxl

    wb = openpyxl.Workbook()
    wb.active["A1"] = "placeholder"
    buf = io.BytesIO()
    wb.save(buf)
    sheet = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
        f"<sheetData>{sheet_data}</sheetData>{tail}</worksheet>"
    )
    src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = sheet.encode() if info.filename == "xl/worksheets/sheet1.xml" else src.read(info)
            dst.writestr(info.filename, body)
    return out.getvalue()


def _inline(ref: str, text: str) -> str:
    return f'<c r="{ref}" t="inlineStr"><is><t>{text}</t></is></c>'


def xlsx_cells_at_xfd(rows: int = 60_000, also_in_a: bool = False) -> bytes:
    """``rows`` rows of one cell in column XFD: padded, each row was 16,384 cells.

    ``also_in_a`` puts one more cell in column A, so that the columns between are really
    inside the sheet and the rows really are 16,384 wide.
    """
    body = "".join(f'<row r="{i}">{_inline(f"XFD{i}", "x")}</row>' for i in range(2, rows + 1))
    first = _inline("A1", "a") if also_in_a else ""
    return _xlsx_with_sheet(f'<row r="1">{first}{_inline("XFD1", "x")}</row>{body}')


def xlsx_merges(ranges: list[str], data_rows: int = 3) -> bytes:
    data = "".join(
        f'<row r="{i}">{_inline(f"A{i}", f"v{i}")}{_inline(f"B{i}", "b")}</row>' for i in range(1, data_rows + 1)
    )
    merges = "".join(f'<mergeCell ref="{ref}"/>' for ref in ranges)
    return _xlsx_with_sheet(data, f'<mergeCells count="{len(ranges)}">{merges}</mergeCells>')


def xlsx_many_big_merges(count: int = 2_000) -> bytes:
    """``count`` disjoint ranges of 99,999 cells each (one column each, rows 1-99,999): the
    per-cell map of the old fill had 200 million entries."""
    return xlsx_merges([f"{column_letter(i)}1:{column_letter(i)}99999" for i in range(count)])


def xlsx_one_merge_repeated(times: int = 20_000) -> bytes:
    """One 99,999-cell range listed ``times`` times: the fill loop ran ``times`` x 99,999."""
    return xlsx_merges(["A1:A99999"] * times)


def pptx_many_big_parts(count: int = 60, size: int = 8 * 1024 * 1024 - 4096) -> bytes:
    """A python-pptx deck plus ``count`` related slide parts just under 8 MiB each."""
    from pptx import Presentation

    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "Title"
    buf = io.BytesIO()
    prs.save(buf)
    ns = 'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
    ns += 'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main"'
    head = f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><p:sld {ns}><p:cSld><p:spTree>'.encode()
    filler = b"<p:grpSpPr/>"
    tail = b"</p:spTree></p:cSld></p:sld>"
    part = head + filler * ((size - len(head) - len(tail)) // len(filler)) + tail
    slide_type = "application/vnd.openxmlformats-officedocument.presentationml.slide+xml"
    slide_rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/slide"
    src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = src.read(info)
            if info.filename == "[Content_Types].xml":
                extra = "".join(
                    f'<Override PartName="/ppt/slides/big{i}.xml" ContentType="{slide_type}"/>' for i in range(count)
                )
                body = body.replace(b"</Types>", extra.encode() + b"</Types>")
            elif info.filename == "ppt/_rels/presentation.xml.rels":
                extra = "".join(
                    f'<Relationship Id="rIdBig{i}" Type="{slide_rel}" Target="slides/big{i}.xml"/>'
                    for i in range(count)
                )
                body = body.replace(b"</Relationships>", extra.encode() + b"</Relationships>")
            dst.writestr(info.filename, body)
        for i in range(count):
            dst.writestr(f"ppt/slides/big{i}.xml", part)
    return out.getvalue()


# --------------------------------------------------------------------------- the cases


def test_list_level_beyond_ooxml_range_is_clamped():
    data = docx_deep_ilvl()
    assert len(data) < 8_000
    result = run_capped(data, "ilvl.docx")
    assert result["outcome"] == "blocks", result
    # ilvl is clamped to 8, the deepest level Word has: sixteen spaces, not two billion
    assert result["chars"] < 200, result
    assert any("deep" in t for t in result["texts"]), result


@pytest.mark.parametrize(("start", "fmt"), [("4000000000", "lowerLetter"), ("100000000000", "lowerRoman")])
def test_huge_numbering_start_gives_short_markers(start: str, fmt: str):
    result = run_capped(docx_numbering_start(start, fmt), "start.docx")
    assert result["outcome"] == "blocks", result
    # start is capped at Word's 32767; letter markers past 8 letters and roman numerals past
    # 3999 are written as the number itself
    assert result["chars"] < 200, result
    assert any("one" in t and "two" in t for t in result["texts"]), result


def test_header_parts_count_together_against_the_xml_budget():
    data = docx_many_headers()
    assert len(data) < 3_000_000
    # the package's overall ratio gives it away first ...
    result = run_capped(data, "headers.docx")
    assert result["outcome"] == "bomb", result
    assert "together" in result["message"], result
    # ... and with the ratio test off, the XML parts' total does
    result = run_capped(data, "headers.docx", zip_max_ratio=1e9)
    assert result["outcome"] == "bomb", result
    assert "xml_max_total" in result["message"], result
    # the budget is on the parts together: two such headers are well within it
    result = run_capped(docx_many_headers(count=2), "two-headers.docx", zip_max_ratio=1e9)
    assert result["outcome"] == "blocks", result


def test_vertical_merge_copies_count_against_max_chars():
    data = docx_vmerge_copies()
    assert len(data) < 200_000
    result = run_capped(data, "vmerge.docx")
    assert result["outcome"] == "too_large", result
    assert "characters" in result["message"], result


def test_pptx_related_parts_count_together_against_the_xml_budget():
    data = pptx_many_big_parts()
    assert len(data) < 3_000_000
    result = run_capped(data, "parts.pptx")
    assert result["outcome"] == "bomb", result
    assert "together" in result["message"], result
    result = run_capped(data, "parts.pptx", zip_max_ratio=1e9)
    assert result["outcome"] == "bomb", result
    assert "xml_max_total" in result["message"], result


def test_xlsx_cell_in_column_xfd_is_not_padded():
    data = xlsx_cells_at_xfd()
    assert len(data) < 600_000
    result = run_capped(data, "xfd.xlsx")
    # the empty columns A..XFC are in no row: each row is the one cell it has
    assert result["outcome"] == "blocks", result
    assert result["blocks"] == 60_001 and result["widest_row"] == 1, result
    # with a cell in column A too, 60,000 rows of 16,384 cells are 983 million cells: beyond
    # max_cells, refused early
    result = run_capped(xlsx_cells_at_xfd(also_in_a=True), "xfd-a.xlsx")
    assert result["outcome"] == "too_large", result
    assert "max_cells" in result["message"], result


def test_xlsx_many_large_merge_ranges_are_not_expanded_per_cell():
    data = xlsx_many_big_merges()
    assert len(data) < 50_000
    result = run_capped(data, "merges.xlsx")
    assert result["outcome"] == "blocks", result
    assert any(t.startswith("v1") for t in result["texts"]), result


def test_xlsx_repeated_merge_range_is_one_range():
    data = xlsx_one_merge_repeated()
    assert len(data) < 50_000
    result = run_capped(data, "dup-merges.xlsx", time_budget_s=30)
    assert result["outcome"] == "blocks", result


def test_xlsx_merge_fill_checks_the_deadline():
    # 2,000 distinct ranges all spanning 5,000 present rows: ten million range visits, with the
    # cell budget raised so that only the deadline can stop it
    ranges = [f"C{i}:C{i + 99_998}" for i in range(1, 2_001)]
    data = xlsx_merges(ranges, data_rows=5_000)
    result = run_capped(data, "slow-merges.xlsx", time_budget_s=0.5, max_cells=10**12)
    assert result["outcome"] == "timeout", result


def test_xlsx_merge_fill_counts_against_max_cells():
    ranges = [f"C{i}:C{i + 99_998}" for i in range(1, 2_001)]
    result = run_capped(xlsx_merges(ranges, data_rows=5_000), "fill.xlsx", max_cells=1_000_000)
    assert result["outcome"] == "too_large", result
    assert "max_cells" in result["message"], result


def test_csv_padding_to_a_wide_header_counts_against_max_cells():
    # a header of 200,000 fields and 100,000 one-field records: twenty billion padded cells
    data = ",".join(f"h{i}" for i in range(200_000)).encode() + b"\n" + b"1\n" * 100_000
    result = run_capped(data, "wide.csv", first_row_as_header=True)
    assert result["outcome"] == "too_large", result
    assert "max_cells" in result["message"], result


def xlsx_long_number_format(cells: int = 20_000, zeros: int = 100_000) -> bytes:
    """Numbers formatted with ``zeros`` decimals: each cell rendered ``zeros`` characters long."""
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    fmt = "0." + "0" * zeros
    for i in range(1, cells + 1):
        ws.cell(row=i, column=1, value=i + 0.5).number_format = fmt
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def test_xlsx_number_format_longer_than_excel_allows_renders_general():
    data = xlsx_long_number_format()
    assert len(data) < 300_000
    result = run_capped(data, "numfmt.xlsx")
    assert result["outcome"] == "blocks", result
    # Excel caps format codes at 255 characters: a longer one renders as General ("1.5")
    assert result["chars"] < 20_000 * 12, result


def pptx_deep_level() -> bytes:
    """A text frame whose second paragraph has ``lvl="1000000000"`` (python-pptx reads it as is)."""
    from pptx import Presentation
    from pptx.util import Inches

    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[6])
    frame = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(2)).text_frame
    frame.text = "top"
    para = frame.add_paragraph()
    para.text, para.level = "deep", 1
    buf = io.BytesIO()
    prs.save(buf)
    src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = src.read(info)
            if info.filename == "ppt/slides/slide1.xml":
                assert b'lvl="1"' in body
                body = body.replace(b'lvl="1"', b'lvl="1000000000"')
            dst.writestr(info.filename, body)
    return out.getvalue()


def test_pptx_paragraph_level_is_clamped():
    result = run_capped(pptx_deep_level(), "level.pptx")
    assert result["outcome"] == "blocks", result
    assert result["chars"] < 200, result
    assert any("deep" in t for t in result["texts"]), result
