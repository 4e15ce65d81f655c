"""Exported files of the Feishu simulator: real .docx/.xlsx/.csv/.pptx built from an item."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.simulators.feishu import FeishuSimulator, SimItem

__all__ = ["render"]


def render(sim: FeishuSimulator, item: SimItem, ext: str, sub_id: str | None = None) -> bytes:
    if ext == "docx":
        import docx

        document = docx.Document()
        document.core_properties.title = item.name
        for line in str(item.content or "").splitlines():
            if line.startswith("# "):
                document.add_heading(line[2:], level=1)
            elif line.strip():
                document.add_paragraph(line)
        buf = io.BytesIO()
        document.save(buf)
        return buf.getvalue()
    if ext == "xlsx":
        import openpyxl

        wb = openpyxl.Workbook()
        wb.remove(wb.active)
        for title, rows in sim.sheets_of(item):
            ws = wb.create_sheet(title)
            for row in rows:
                ws.append(list(row))
        buf = io.BytesIO()
        wb.save(buf)
        return buf.getvalue()
    if ext == "csv":
        import csv

        pairs = zip(sim.sheets_of(item), sim.sheet_ids(item), strict=True)
        rows = next((r for (_title, r), sid in pairs if sid == sub_id), [])
        out = io.StringIO()
        csv.writer(out).writerows(rows)
        return out.getvalue().encode("utf-8")
    if ext == "pptx":
        import pptx

        deck = pptx.Presentation()
        for line in str(item.content or "").splitlines():
            slide = deck.slides.add_slide(deck.slide_layouts[1])
            slide.shapes.title.text = line
        buf = io.BytesIO()
        deck.save(buf)
        return buf.getvalue()
    return str(item.content).encode("utf-8")
