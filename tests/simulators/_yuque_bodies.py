"""Pure builders of the bodies the Yuque simulator serves: lakesheet wrappers, ``body_sheet``,
laketable ``body`` / ``body_table`` pages, the flat TOC, and oversized answers.

Nothing here holds state: :mod:`._yuque_space` calls these with its model objects.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.simulators._yuque_space import SimDoc, SimRepo

__all__ = ["EPOCH", "body_sheet_of", "encode_lakesheet", "iso", "laketable_bodies", "oversized_json", "toc_nodes"]

EPOCH = datetime(2026, 1, 5, 8, 0, 0, tzinfo=UTC)


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def encode_lakesheet(sheets: Any, **wrapper_extra: Any) -> str:
    """The ``body`` string of a lakesheet doc holding ``sheets`` (the wrapper real docs carry)."""
    packed = zlib.compress(json.dumps(sheets, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    wrapper = {
        "format": "lakesheet",
        "version": "3.5.5",
        "larkJson": True,
        "sheet": packed.decode("latin-1"),
        "calcChain": [],
        "vessels": {},
        "useUTC": True,
        "useIndex": True,
        "customColors": [],
        "meta": {"sort": 0, "shareFilter": 0},
        "formulaCalclated": True,
        "versionId": "SimVersion0001",
        **wrapper_extra,
    }
    return json.dumps(wrapper, ensure_ascii=False)


def _plain(v: Any) -> str:
    if isinstance(v, dict):
        if v.get("class") == "formula":
            return "" if v.get("value") is None else str(v.get("value"))
        return str(v.get("text") or v.get("name") or v.get("value") or "")
    return "" if v is None else str(v)


def body_sheet_of(sheets: list[dict[str, Any]]) -> str:
    """The simplified, uncompressed ``body_sheet`` Yuque sends beside the wrapper (strings only)."""
    out = []
    for sheet in sheets:
        data = sheet.get("data") or {}
        cells = {(int(r), int(c)): _plain(cell.get("v")) for r, row in data.items() for c, cell in row.items() if cell}
        rows = max((r for r, _ in cells), default=-1) + 1
        cols = max((c for _, c in cells), default=-1) + 1
        table = [[cells.get((r, c), "") for c in range(cols)] for r in range(rows)]
        out.append(
            {"name": sheet.get("name"), "index": sheet.get("index", 0), "rowCount": 200, "colCount": 26, "table": table}
        )
    return json.dumps({"version": "1.0", "data": out}, ensure_ascii=False)


def laketable_bodies(doc: SimDoc, page: int, page_size: int) -> tuple[str, str]:
    """(``body``, ``body_table``) of a data table: the schema, and one page of its rows."""
    schema = doc.columns if doc.columns_in in ("body", "both") else []
    body = json.dumps(
        {"format": "laketable", "type": "Table", "version": "1.0", "sheet": [{"columns": schema}]},
        ensure_ascii=False,
    )
    start = (page - 1) * page_size
    records = [
        {"values": [{"value": v} for v in row], "createdAt": doc.created_at, "updatedAt": doc.updated_at}
        for row in doc.records[start : start + page_size]
    ]
    table: dict[str, Any] = {"totalCount": len(doc.records), "records": records, "pageSize": page_size}
    table["page"] = page
    if doc.columns_in in ("meta", "both"):
        table["meta"] = {"columns": doc.columns}
    return body, json.dumps(table, ensure_ascii=False)


def toc_nodes(repo: SimRepo) -> list[dict[str, Any]]:
    """The flat TOC: a TITLE node (``""`` ids) for each heading path, then the DOC nodes."""
    nodes: list[dict[str, Any]] = []
    titles: dict[tuple[str, ...], str] = {}
    for doc in sorted(repo.docs.values(), key=lambda d: d.id):
        if doc.deleted_at is not None or doc.toc_path is None:
            continue
        parent = None
        for depth in range(1, len(doc.toc_path) + 1):
            path = tuple(doc.toc_path[:depth])
            if path not in titles:
                titles[path] = f"title-{repo.id}-{len(titles)}"
                nodes.append(
                    {"uuid": titles[path], "type": "TITLE", "title": path[-1], "url": "", "doc_id": "",
                     "level": "", "parent_uuid": parent or "", "visible": 1, "open_window": 0}
                )  # fmt: skip
            parent = titles[path]
        nodes.append(
            {"uuid": f"doc-{doc.id}", "type": "DOC", "title": doc.title, "url": doc.slug, "doc_id": doc.id,
             "id": doc.id, "level": len(doc.toc_path), "parent_uuid": parent or "", "visible": 1,
             "open_window": 0}
        )  # fmt: skip
    return nodes


def oversized_json(answer: dict[str, Any], size: int, step: int = 64 * 1024) -> Iterator[bytes]:
    """``answer`` as JSON of at least ``size`` bytes, produced ``step`` bytes at a time (a
    ``"padding"`` string member goes first), so serving it never holds the whole body."""
    yield b'{"padding":"'
    for sent in range(0, size, step):
        yield b"x" * min(step, size - sent)
    yield b'",' + json.dumps(answer, ensure_ascii=False).encode("utf-8")[1:]
