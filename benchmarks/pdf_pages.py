"""PDF text engine pages/s on the real corpus's PDFs without tables: ``python -m benchmarks pdf_pages``.

Files: ``../shared/realdocs/pdf`` where our parser (engine ``text``) finds pages and no table,
those with attachments aside (an attached image is OCR'd: not the PDF text engine's time).
Per file, in turn, each timed in this process (warm, no fork): ours as shipped; ours with every
page sent through every character's box (``_pdf_page._has_candidates`` forced true: the path
all pages took before the pre-check); markitdown (pdfminer). Rounds repeat the whole list.
Goal (issue 36): >= 250 pages/s as shipped; the forced path is the before, measured alongside.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REAL = HERE.parent.parent / "shared" / "realdocs" / "pdf"
GOAL_PAGES_S = 250.0
ROUNDS = 3
OPTIONS = {"isolate": False, "engines": {"pdf": "text"}}


def _ours(path: Path, data: bytes) -> dict[str, Any]:
    from include.contract import ParseError, RawDocument
    from plugins.parsers.registry import parse_document

    try:
        doc = parse_document(RawDocument(str(path), data, path.name), OPTIONS)
    except ParseError:
        return {"pages": 0, "tables": 0, "attachments": 0}
    meta = doc.metadata
    return {
        "pages": meta.get("pages", 0),
        "tables": meta.get("tables", 0),
        "attachments": len(meta.get("embedded") or []) + len(meta.get("embedded_failed") or []),
    }


def _always(*args: Any) -> bool:
    return True


def _forced(real_check: Any, path: Path, data: bytes) -> None:
    from plugins.parsers import _pdf_page

    setattr(_pdf_page, "_has_candidates", _always)  # noqa: B010 (a function swapped for one run)
    try:
        _ours(path, data)
    finally:
        setattr(_pdf_page, "_has_candidates", real_check)  # noqa: B010


def _peer(converter: Any, path: Path) -> None:
    try:
        converter.convert(str(path))
    except Exception:  # the peer's failures take the time they took, as ours do
        return


def _files() -> list[tuple[Path, bytes, int]]:
    out = []
    for path in sorted(REAL.glob("*.pdf")):
        data = path.read_bytes()
        facts = _ours(path, data)
        if facts["pages"] and not facts["tables"] and not facts["attachments"]:
            out.append((path, data, int(facts["pages"])))
    return out


def run(quick: bool = False) -> dict[str, Any]:
    if not REAL.exists():
        return {"title": "PDF pages/s", "rows": [], "summary": "skipped: ../shared/realdocs/pdf absent"}
    from markitdown import MarkItDown

    from plugins.parsers import _pdf_page

    converter = MarkItDown(enable_plugins=False)
    files = _files()
    real_check = _pdf_page._has_candidates
    tools: dict[str, Callable[[Path, bytes], Any]] = {
        "tributary": _ours,
        "tributary, every page per character": lambda p, d: _forced(real_check, p, d),
        "markitdown 0.1.9": lambda p, d: _peer(converter, p),
    }
    seconds = dict.fromkeys(tools, 0.0)
    order = list(tools)
    for _ in range(1 if quick else ROUNDS):
        for path, data, _pages in files:
            order = order[1:] + order[:1]  # each tool in turn runs first, after another's file
            for tool in order:
                started = time.perf_counter()
                tools[tool](path, data)
                seconds[tool] += time.perf_counter() - started
    pages = sum(n for *_, n in files) * (1 if quick else ROUNDS)
    rate = {tool: pages / s for tool, s in seconds.items()}
    ours = rate["tributary"]
    rows = [
        {"tool": tool, "pages/s": round(r, 1), "x markitdown": round(r / rate["markitdown 0.1.9"], 2)}
        for tool, r in rate.items()
    ]
    load = " / ".join(f"{v:.2f}" for v in os.getloadavg())
    return {
        "title": "PDF text engine: pages/s on the real corpus's PDFs without tables",
        "peer": "the per-character path (before the pre-check), markitdown 0.1.9, interleaved per file",
        "rows": rows,
        "summary": (
            f"{len(files)} files, {pages // (1 if quick else ROUNDS)} pages, {1 if quick else ROUNDS} rounds. "
            f"Shipped {ours:.1f} pages/s, {ours / rate['tributary, every page per character']:.2f}x the "
            f"per-character path; goal >= {GOAL_PAGES_S:g} pages/s {'met' if ours >= GOAL_PAGES_S else 'NOT met'}. "
            f"Load average at the end {load}."
        ),
    }
