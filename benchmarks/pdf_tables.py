"""PDF tables: cells recovered at the right row and column, detection precision, pages/s.

Corpus (built once, cached under ``benchmarks/.cache/pdf_tables/``):

* LibreOffice-made PDFs (``soffice``, HTML read by Writer, exported with ``writer_pdf_Export``)
  of generated pages whose cells are known: ruled and unruled tables, header rows, merged
  cells (colspan/rowspan), multi-line cells, CJK text, one to three tables per page between
  paragraphs. Truth: each table's grid with a merged cell's text in its top-left slot;
* real PDFs from ``../shared/realdocs/pdf`` (camelot's and pdfplumber's test files among them)
  with hand-checked expectations written below: how many tables a file has, and a few cells
  each must contain. Scored separately (``real`` rows).

Metrics per tool: cell recall (truth cells, non-empty, whose text the matched predicted table
has at the same row and column; text compared without whitespace), detection precision
(predicted tables matched to a truth table / predicted tables; a match needs a quarter of the
truth table's cells right), pages/s (sequential, one process). Tools: Tributary's PDF parser
(in process), pdfplumber's ``page.extract_tables()``, markitdown (pdfminer; its Markdown
tables, if any, parsed). Run in ``.venv-bench`` (``bash scripts/bench_env.sh``).
"""

from __future__ import annotations

import html
import json
import random
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache" / "pdf_tables"
REAL = HERE.parent.parent / "shared" / "realdocs" / "pdf"
_WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "omega",
    "river",
    "stone",
    "cloud",
    "north",
    "amber",
    "cedar",
    "maple",
    "orbit",
    "pixel",
    "quartz",
]
_CJK = ["北京", "上海", "数据", "表格", "合计", "销售额", "研究", "东南", "季度", "产品"]

# real files: (tables the file has, cells they must hold somewhere), from the files' own text:
# their "Table n" captions (naacl06: Tables 1-7), a known single table (camelot's
# spanning_cells: "Table A4-12"; Tika's testPDFVarious: its "Row r Col c" table), and text-only
# files (LaTeX, multi-column prose) that have none; surplus detections count as false
REAL_EXPECTED: dict[str, tuple[int, list[str]]] = {
    "0605_testPDFVarious.pdf": (1, ["Row 1 Col 1", "Row 2 Col 3"]),
    "0488_spanning_cells.pdf": (1, ["Server closets", "1,505"]),
    "0569_us-012.pdf": (1, ["NC", "~100"]),
    "0465_frx_2012_disclosure.pdf": (1, ["AALAEI, BEHZAD", "$51.24"]),
    "0539_naacl06-shinyama.pdf": (7, ["Katrina", "28,009", "Total"]),
    "0546_multicolumn.pdf": (0, []),
    "0602_multi-column-2p.pdf": (0, []),
    "0526_crazyones-pdfa.pdf": (0, []),
    "0555_pdflatex-4-pages.pdf": (0, []),
}


# --------------------------------------------------------------------------- corpus


def _cell(rng: random.Random, cjk: bool, long: bool) -> str:
    if cjk:
        return "".join(rng.sample(_CJK, 2)) + str(rng.randint(1, 99))
    if long:
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(9, 14))) + f" {rng.randint(100, 999)}"
    if rng.random() < 0.4:
        return f"{rng.randint(1, 9999)}.{rng.randint(0, 99):02d}"
    return f"{rng.choice(_WORDS)} {rng.randint(1, 99)}"


def _table(rng: random.Random, n: int) -> tuple[str, list[list[str]], str]:
    """(HTML, truth grid, kind) of one generated table."""
    ruled = rng.random() < 0.65
    cjk = rng.random() < 0.25
    merged = ruled and rng.random() < 0.4
    multiline = ruled and rng.random() < 0.35
    n_rows, n_cols = rng.randint(3, 7), rng.randint(2, 5)
    grid = [["" for _ in range(n_cols)] for _ in range(n_rows)]
    body = []
    header = [f"{'列' if cjk else 'Col'} {n}.{c + 1}" for c in range(n_cols)]
    body.append("<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
    grid[0] = list(header)
    for r in range(1, n_rows):
        cells, c = [], 0
        while c < n_cols:
            span = 2 if merged and r == 2 and c == 0 and n_cols >= 3 else 1
            text = _cell(rng, cjk, multiline and c == n_cols - 1 and r % 2 == 1)
            grid[r][c] = text
            cells.append(
                f"<td colspan='{span}'>{html.escape(text)}</td>" if span > 1 else f"<td>{html.escape(text)}</td>"
            )
            c += span
        body.append("<tr>" + "".join(cells) + "</tr>")
    attrs = "border='1' cellspacing='0' cellpadding='4'" if ruled else "cellpadding='6'"
    width = " width='60%'" if multiline else ""
    kind = ("ruled" if ruled else "unruled") + ("+cjk" if cjk else "") + ("+merged" if merged else "")
    return f"<table {attrs}{width}>{''.join(body)}</table>", grid, kind + ("+multiline" if multiline else "")


def _page_html(seed: int) -> tuple[str, list[dict[str, Any]]]:
    rng = random.Random(seed)
    parts = [f"<h1>Report {seed}</h1>"]
    truth = []
    for n in range(rng.randint(1, 3)):
        parts.append(f"<p>{' '.join(rng.choice(_WORDS) for _ in range(rng.randint(8, 30)))}.</p>")
        markup, grid, kind = _table(rng, n + 1)
        parts.append(markup)
        truth.append({"grid": grid, "kind": kind})
    parts.append("<p>Closing words of the page.</p>")
    return "<html><head><meta charset='utf-8'></head><body>" + "".join(parts) + "</body></html>", truth


def _corpus(n_docs: int) -> list[tuple[Path, list[dict[str, Any]]]]:
    CACHE.mkdir(parents=True, exist_ok=True)
    todo = []
    for seed in range(n_docs):
        page, truth = _page_html(seed)
        src = CACHE / f"doc{seed:03d}.html"
        (CACHE / f"doc{seed:03d}.json").write_text(json.dumps(truth, ensure_ascii=False), encoding="utf-8")
        if not (CACHE / f"doc{seed:03d}.pdf").exists():
            src.write_text(page, encoding="utf-8")
            todo.append(str(src))
    if todo:
        soffice = shutil.which("soffice")
        if soffice is None:
            raise SystemExit("soffice (LibreOffice) is needed to build the PDF-table corpus")
        subprocess.run(
            [soffice, "--headless", "--norestore", f"-env:UserInstallation={(CACHE / 'profile').as_uri()}",
             "--infilter=HTML (StarWriter)", "--convert-to", "pdf:writer_pdf_Export", "--outdir", str(CACHE), *todo],
            check=True, capture_output=True, timeout=900,
        )  # fmt: skip
    out = []
    for seed in range(n_docs):
        pdf = CACHE / f"doc{seed:03d}.pdf"
        if pdf.exists():
            out.append((pdf, json.loads((CACHE / f"doc{seed:03d}.json").read_text(encoding="utf-8"))))
    return out


# --------------------------------------------------------------------------- tools


def _ours(path: Path) -> tuple[list[list[list[str]]], int]:
    from include.contract import BlockKind, ParseError, RawDocument
    from plugins.parsers import parse_document

    try:
        doc = parse_document(RawDocument("k", path.read_bytes(), path.name), {"isolate": False})
    except ParseError:
        return [], 0
    tables = [[*([b.header] if b.header else []), *(b.rows or [])] for b in doc.blocks if b.kind == BlockKind.TABLE]
    return tables, int(doc.metadata.get("pages", 1))


def _pdfplumber(path: Path) -> tuple[list[list[list[str]]], int]:
    import pdfplumber

    tables = []
    with pdfplumber.open(path) as pdf:
        for page in pdf.pages:
            for table in page.extract_tables():
                tables.append([[c or "" for c in row] for row in table])
        return tables, len(pdf.pages)


def _markitdown(path: Path) -> tuple[list[list[list[str]]], int]:
    from markitdown import MarkItDown

    text = MarkItDown().convert(str(path)).text_content
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        stripped = line.strip()
        if stripped.startswith("|") and stripped.endswith("|"):
            cells = [c.strip() for c in stripped[1:-1].split("|")]
            if not all(set(c) <= set("-: ") for c in cells):
                current.append(cells)
            continue
        if current:
            tables.append(current)
        current = []
    return tables, 0


TOOLS = {"tributary": _ours, "pdfplumber": _pdfplumber, "markitdown (pdfminer)": _markitdown}


# --------------------------------------------------------------------------- scoring


def _key(text: str) -> str:
    return "".join(str(text).split()).lower()


def _hits(truth: list[list[str]], pred: list[list[str]]) -> int:
    return sum(
        1
        for r, row in enumerate(truth)
        for c, cell in enumerate(row)
        if cell and r < len(pred) and c < len(pred[r]) and _key(pred[r][c]) == _key(cell)
    )


def _score(truths: list[list[list[str]]], preds: list[list[list[str]]]) -> tuple[int, int, int, int]:
    """(cells right, truth cells, predicted tables matched, predicted tables): greedy best match."""
    pairs = sorted(((_hits(t, p), ti, pi) for ti, t in enumerate(truths) for pi, p in enumerate(preds)), reverse=True)
    used_t: set[int] = set()
    used_p: set[int] = set()
    right = matched = 0
    for hits, ti, pi in pairs:
        if ti in used_t or pi in used_p or hits == 0:
            continue
        used_t.add(ti)
        used_p.add(pi)
        right += hits
        if hits * 4 >= sum(1 for row in truths[ti] for c in row if c):
            matched += 1
    total = sum(1 for t in truths for row in t for c in row if c)
    return right, total, matched, len(preds)


def _real_score(tables: list[list[list[str]]], expected: tuple[int, list[str]]) -> tuple[int, int, int]:
    """(detections counted right, detections, expected cells found)."""
    n_expected, cells = expected
    found = {_key(c) for t in tables for row in t for c in row}
    return min(len(tables), n_expected), len(tables), sum(_key(c) in found for c in cells)


def run(quick: bool) -> dict[str, Any]:
    docs = _corpus(12 if quick else 60)
    real = [(REAL / name, exp) for name, exp in REAL_EXPECTED.items() if (REAL / name).exists()]
    rows = []
    for tool, fn in TOOLS.items():
        right = total = matched = predicted = pages = 0
        by_kind: dict[str, list[int]] = {}
        started = time.perf_counter()
        for path, truth in docs:
            tables, n_pages = fn(path)
            pages += n_pages or 1
            a, b, c, d = _score([t["grid"] for t in truth], tables)
            right, total, matched, predicted = right + a, total + b, matched + c, predicted + d
            for t in truth:
                acc = by_kind.setdefault(t["kind"].split("+")[0], [0, 0])
                hits, cells = _score([t["grid"]], tables)[:2]
                acc[0], acc[1] = acc[0] + hits, acc[1] + cells
        elapsed = time.perf_counter() - started
        ok = det = cells_found = cells_expected = 0
        for path, exp in real:
            tables, _ = fn(path)
            a, b, c = _real_score(tables, exp)
            ok, det, cells_found, cells_expected = ok + a, det + b, cells_found + c, cells_expected + len(exp[1])
        rows.append(
            {
                "tool": tool,
                "cell recall": round(right / max(total, 1), 3),
                **{f"recall {k}": round(v[0] / max(v[1], 1), 3) for k, v in sorted(by_kind.items())},
                "detection precision": round(matched / max(predicted, 1), 3),
                "tables found / truth": f"{predicted}/{sum(len(t) for _, t in docs)}",
                "pages/s": round(pages / elapsed, 1),
                "real: precision": round(ok / max(det, 1), 3),
                "real: expected cells": f"{cells_found}/{cells_expected}",
            }
        )
    return {
        "title": "PDF tables (LibreOffice-made pages with known cells; real files with hand-checked expectations)",
        "peer": "pdfplumber extract_tables, markitdown (pdfminer)",
        "rows": rows,
        "summary": (
            f"{len(docs)} generated PDFs, {sum(len(t) for _, t in docs)} tables; "
            f"{len(real)} real PDFs. Cell recall counts truth cells at the right row and column."
        ),
    }
