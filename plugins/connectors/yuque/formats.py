"""Turn a Yuque doc detail into the bytes the parsers read, by the doc's ``format``.

markdown / lake  -> the raw ``body`` (Markdown; Yuque renders Lake docs to Markdown in ``body``)
html             -> ``body_html`` (or ``body``)
lakesheet        -> a rebuilt .xlsx (:mod:`.lakesheet`)
laketable        -> an .xlsx with a header row from the column schema and one row per record
anything else    -> :class:`UnsupportedFormat`
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from openpyxl import Workbook
from openpyxl.styles import Font

from plugins.connectors.yuque.lakesheet import (
    DEFAULT_MAX_SHEET_BYTES,
    XLSX_MEDIA_TYPE,
    LakesheetError,
    decode_sheets,
    lakesheet_to_xlsx,
)
from plugins.connectors.yuque.models import DocDetail, parse_time

__all__ = ["Rendered", "UnsupportedFormat", "render_doc", "table_columns", "table_to_xlsx"]

# Yuque has also been seen answering "sheet" / "table" as the format of those doc kinds
_ALIASES = {"sheet": "lakesheet", "table": "laketable", "lakeboard": "board"}


class UnsupportedFormat(Exception):
    def __init__(self, fmt: str) -> None:
        super().__init__(f"unsupported format {fmt}")
        self.format = fmt


@dataclass(slots=True)
class Rendered:
    data: bytes
    media_type: str
    extension: str
    format: str


def table_columns(body: str) -> list[dict[str, Any]]:
    """Column schema of a data table from its ``body`` (``{"sheet": [{"columns": [...]}]}``)."""
    try:
        parsed = json.loads(body) if body else {}
    except ValueError:
        return []
    sheet = parsed.get("sheet") if isinstance(parsed, dict) else None
    if isinstance(sheet, str):
        try:
            sheet = decode_sheets(parsed)
        except LakesheetError:
            return []
    if isinstance(sheet, dict):
        sheet = [sheet]
    for entry in sheet or []:
        if isinstance(entry, dict) and isinstance(entry.get("columns"), list):
            return [c for c in entry["columns"] if isinstance(c, dict)]
    return []


def _meta_columns(first_page: dict[str, Any]) -> list[dict[str, Any]]:
    """The schema ``body_table`` carries itself (``meta.columns``), for tables whose ``body`` has
    none (yuque/yuque-mcp-server PR #88 reads both places)."""
    meta = first_page.get("meta")
    columns = meta.get("columns") if isinstance(meta, dict) else None
    return [c for c in columns if isinstance(c, dict)] if isinstance(columns, list) else []


def _option_labels(column: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for opt in column.get("options") or []:
        if isinstance(opt, dict) and opt.get("id") is not None:
            labels[str(opt["id"])] = str(opt.get("value") or opt.get("name") or opt.get("label") or opt["id"])
    return labels


def _table_value(value: Any, labels: dict[str, str]) -> Any:
    if value is None:
        return None
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return labels.get(value, value)
    if isinstance(value, dict):  # dates: {seconds, text, time}
        return str(value.get("text") or value.get("name") or value.get("time") or "")
    if isinstance(value, list):
        parts = []
        for item in value:
            if isinstance(item, dict):  # users, files, images
                parts.append(str(item.get("name") or item.get("login") or item.get("src") or ""))
            else:
                parts.append(labels.get(str(item), str(item)))
        return ", ".join(p for p in parts if p)
    return str(value)


def table_to_xlsx(title: str, columns: list[dict[str, Any]], records: Iterable[Any]) -> bytes:
    wb = Workbook()
    ws = wb.active
    ws.title = "Table"
    labels = [_option_labels(c) for c in columns]
    if columns:
        ws.append([str(c.get("name") or c.get("id") or "") for c in columns])
        for cell in ws[1]:
            cell.font = Font(bold=True)
    for record in records:
        values = record.get("values") if isinstance(record, dict) else None
        if not isinstance(values, list):
            continue
        row = []
        for i, item in enumerate(values):
            raw = item.get("value") if isinstance(item, dict) else item
            row.append(_table_value(raw, labels[i] if i < len(labels) else {}))
        ws.append(row)
    wb.properties.title = title[:255] if title else None
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def render_doc(
    detail: DocDetail,
    *,
    table_records: Callable[[dict[str, Any]], Iterable[Any]] | None = None,
    max_sheet_bytes: int = DEFAULT_MAX_SHEET_BYTES,
    use_draft: bool = False,
) -> Rendered:
    """Bytes for one doc. ``table_records(first_page)`` pages a data table's rows. ``use_draft``:
    a never-published doc, whose text is only in ``body_draft`` (indexed with ``include_drafts``).

    Raises :class:`UnsupportedFormat` and :class:`LakesheetError`.
    """
    fmt = _ALIASES.get(detail.format.lower(), detail.format.lower())
    if fmt in ("markdown", "lake"):
        if use_draft and not detail.body and detail.body_draft:
            return Rendered(detail.body_draft.encode("utf-8"), "text/markdown", ".md", fmt)
        if not detail.body and detail.body_html:
            return Rendered(detail.body_html.encode("utf-8"), "text/html", ".html", fmt)
        return Rendered(detail.body.encode("utf-8"), "text/markdown", ".md", fmt)
    if fmt == "html":
        return Rendered((detail.body_html or detail.body).encode("utf-8"), "text/html", ".html", fmt)
    if fmt == "lakesheet":
        modified = parse_time(detail.content_updated_at or detail.updated_at)
        data = lakesheet_to_xlsx(
            detail.body, detail.body_draft, detail.body_sheet, max_bytes=max_sheet_bytes, modified=modified
        )
        return Rendered(data, XLSX_MEDIA_TYPE, ".xlsx", fmt)
    if fmt == "laketable":
        try:
            first = json.loads(detail.body_table) if detail.body_table else {}
        except ValueError:
            first = {}
        first = first if isinstance(first, dict) else {}
        records = table_records(first) if table_records is not None else (first.get("records") or [])
        data = table_to_xlsx(detail.title, table_columns(detail.body) or _meta_columns(first), records)
        return Rendered(data, XLSX_MEDIA_TYPE, ".xlsx", fmt)
    raise UnsupportedFormat(detail.format or "(none)")
