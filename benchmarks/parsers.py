"""Parser fidelity and speed against markitdown, per format, on real documents.

Corpus (built once, cached under ``benchmarks/.cache/parsers/``):

* HTML: pages of Python's library reference from Debian's ``python3-doc``; ground truth is the
  text of the page's main content (``div[role=main]``, minus the "¶" permalinks);
* DOCX and PDF: the same main content, converted by LibreOffice (``soffice``);
* CSV and XLSX: every table of those pages with 4+ rows (real tables), XLSX converted by
  LibreOffice; ground truth is the cell text;
* Markdown: Node.js API docs (Debian ``nodejs``, ``/usr/share/doc/nodejs/api/*.md``); ground
  truth is the CommonMark rendering's text;
* text: the reStructuredText sources of the same Python pages (``_sources/*.rst.txt``).

Metrics per format and tool: non-whitespace character recall and word-token recall (bag
counts, micro-averaged: sum of min(truth, output) / sum of truth), the worst document's
character recall, and documents per second parsing sequentially in one process, the two tools
taking turns document by document (so a shared machine's load hits both alike; the ratio is
ours over markitdown's, goal :data:`SPEED_GOAL`). markitdown's
Markdown escapes (``\\_``) are undone before scoring, in its favour. markitdown runs in this
interpreter when importable, else in ``.venv-bench`` (where ``benchmarks/requirements.txt``
installs it) through a worker subprocess that times each document itself.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = HERE / ".cache" / "parsers"
PY_DOCS = Path("/usr/share/doc/python3.11/html")
NODE_DOCS = Path("/usr/share/doc/nodejs/api")
FORMATS = ("html", "docx", "pdf", "xlsx", "csv", "markdown", "text")
_EXT = {"html": "html", "docx": "docx", "pdf": "pdf", "xlsx": "xlsx", "csv": "csv", "markdown": "md", "text": "txt"}
_MD_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|<>~])")
_TOKEN = re.compile(r"\w+")
SPEED_GOAL = 5.0  # docs/s against markitdown's, issue 36


# --------------------------------------------------------------------------- corpus


def _main_content(path: Path) -> tuple[str, str, list[list[list[str]]]] | None:
    """(title, clean HTML of the main content, tables) of a Sphinx page."""
    from lxml import etree, html

    root = html.fromstring(path.read_bytes())
    main = root.find(".//div[@role='main']")
    if main is None:
        return None
    for bad in main.xpath(".//a[contains(@class,'headerlink')]|.//script|.//style"):
        bad.drop_tree()
    tables = []
    for table in main.iter("table"):
        rows = [
            [" ".join("".join(c.itertext()).split()) for c in tr if c.tag in ("td", "th")] for tr in table.iter("tr")
        ]
        rows = [r for r in rows if any(r)]
        if len(rows) >= 4 and max(len(r) for r in rows) >= 2:
            tables.append(rows)
    title = (root.findtext(".//title") or path.stem).strip()
    body = etree.tostring(main, encoding="unicode", method="html")
    clean = f"<html><head><meta charset='utf-8'><title>{title}</title></head><body>{body}</body></html>"
    return title, clean, tables


def _text_of_html(markup: str) -> str:
    """The visible body text (the <title> is metadata, not content)."""
    from lxml import html

    root = html.fromstring(markup)
    body = root.find(".//body")
    # text_content, not "\n".join(itertext()): inline markup must not split words ("`await`ed")
    return (body if body is not None else root).text_content()


def _soffice(files: list[Path], target: str, outdir: Path) -> None:
    soffice = shutil.which("soffice")
    if soffice is None:
        raise RuntimeError("LibreOffice (soffice) is required to build the DOCX/PDF/XLSX corpus")
    outdir.mkdir(parents=True, exist_ok=True)
    profile = (CACHE / "lo-profile").as_uri()
    for start in range(0, len(files), 20):  # batches keep one soffice start per 20 files
        batch = [str(f) for f in files[start : start + 20]]
        subprocess.run(
            [
                soffice,
                "--headless",
                "--norestore",
                f"-env:UserInstallation={profile}",
                "--convert-to",
                target,
                "--outdir",
                str(outdir),
                *batch,
            ],
            check=True,
            capture_output=True,
            timeout=900,
        )


def _build_corpus(quick: bool) -> dict[str, list[dict[str, str]]]:
    name = "quick" if quick else "full"
    manifest = CACHE / f"manifest-{name}.json"
    if manifest.exists():
        return json.loads(manifest.read_text(encoding="utf-8"))
    if not PY_DOCS.exists():
        raise RuntimeError("Debian python3-doc is required: apt-get install python3-doc")
    from markdown_it import MarkdownIt

    work = CACHE / name
    for sub in ("html", "clean", "csv", "md", "txt"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    pages = sorted(p for p in (PY_DOCS / "library").glob("*.html") if 8_000 < p.stat().st_size < 150_000)
    n_pages = 8 if quick else 36
    step = max(1, len(pages) // n_pages)
    chosen = pages[::step][:n_pages]
    corpus: dict[str, list[dict[str, str]]] = {f: [] for f in FORMATS}
    clean_files: list[Path] = []
    tables: list[list[list[str]]] = []
    for page in chosen:
        found = _main_content(page)
        if found is None:
            continue
        _, clean, page_tables = found
        truth = _text_of_html(clean)
        dst = work / "html" / page.name
        shutil.copyfile(page, dst)
        corpus["html"].append({"path": str(dst), "truth": truth})
        clean_path = work / "clean" / page.name
        clean_path.write_text(clean, encoding="utf-8")
        clean_files.append(clean_path)
        corpus["docx"].append({"path": str(work / "docx" / f"{page.stem}.docx"), "truth": truth})
        corpus["pdf"].append({"path": str(work / "pdf" / f"{page.stem}.pdf"), "truth": truth})
        src = PY_DOCS / "_sources" / "library" / f"{page.stem}.rst.txt"
        if src.exists():
            txt = work / "txt" / f"{page.stem}.txt"
            shutil.copyfile(src, txt)
            corpus["text"].append({"path": str(txt), "truth": src.read_text(encoding="utf-8")})
        tables.extend(page_tables)
    if len(tables) < (6 if quick else 20):  # few tables in the sample: take more from other pages
        for page in pages:
            found = _main_content(page)
            if found:
                tables.extend(found[2])
            if len(tables) >= (6 if quick else 30):
                break
    csv_files = []
    for i, rows in enumerate(tables[: 6 if quick else 30]):
        path = work / "csv" / f"table{i:03d}.csv"
        with path.open("w", encoding="utf-8", newline="") as fh:
            csv.writer(fh).writerows(rows)
        csv_files.append(path)
        truth = "\n".join(" ".join(r) for r in rows)
        corpus["csv"].append({"path": str(path), "truth": truth})
        corpus["xlsx"].append({"path": str(work / "xlsx" / f"table{i:03d}.xlsx"), "truth": truth})
    md_files = sorted(NODE_DOCS.glob("*.md")) if NODE_DOCS.exists() else []
    md_files = [p for p in md_files if 4_000 < p.stat().st_size < 200_000]
    md_step = max(1, len(md_files) // (8 if quick else 30))
    renderer = MarkdownIt("commonmark").enable("table").enable("strikethrough")
    for src in md_files[::md_step][: 8 if quick else 30]:
        dst = work / "md" / src.name
        shutil.copyfile(src, dst)
        corpus["markdown"].append(
            {"path": str(dst), "truth": _text_of_html(renderer.render(src.read_text("utf-8")) or "<p></p>")}
        )
    _soffice(clean_files, "docx:MS Word 2007 XML", work / "docx")
    # PDF from the DOCX (Writer's PDF export keeps headings as bookmarks; the web export drops some)
    _soffice(sorted((work / "docx").glob("*.docx")), "pdf:writer_pdf_Export", work / "pdf")
    _soffice(csv_files, "xlsx:Calc MS Excel 2007 XML", work / "xlsx")
    for fmt in ("docx", "pdf", "xlsx"):
        corpus[fmt] = [d for d in corpus[fmt] if Path(d["path"]).exists()]
    manifest.write_text(json.dumps(corpus), encoding="utf-8")
    return corpus


# --------------------------------------------------------------------------- tools


def _ours_one(path: str) -> dict[str, Any]:
    from include.contract import ParseError, RawDocument
    from plugins.parsers import parse_document

    started = time.perf_counter()
    try:
        data = Path(path).read_bytes()
        text, error = parse_document(RawDocument(path, data, Path(path).name)).text, None
    except ParseError as exc:
        text, error = "", str(exc)
    return {"text": text, "seconds": time.perf_counter() - started, "error": error}


def _ours(paths: list[str]) -> list[dict[str, Any]]:
    if paths:  # warm-up, untimed: lazy imports (python-docx, pypdfium2 ...) are not parsing
        _ours_one(paths[0])
    return [_ours_one(path) for path in paths]


def _peer_one(converter: Any, path: str) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        text, error = converter.convert(path).text_content, None
    except Exception as exc:  # the peer's failures are counted, not fatal
        text, error = "", f"{type(exc).__name__}: {exc}"[:300]
    return {"text": text, "seconds": time.perf_counter() - started, "error": error}


def _markitdown_inline(paths: list[str]) -> list[dict[str, Any]]:
    from markitdown import MarkItDown

    converter = MarkItDown(enable_plugins=False)
    if paths:  # warm-up, untimed, as for ours
        _peer_one(converter, paths[0])
    return [_peer_one(converter, path) for path in paths]


def _interleaved(paths: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """Both tools on each document in turn (ours, then markitdown): a load that comes and goes
    on a shared machine hits both alike. None when markitdown is not importable here."""
    try:
        from markitdown import MarkItDown
    except ImportError:
        return None
    converter = MarkItDown(enable_plugins=False)
    if paths:  # warm-up, untimed
        _ours_one(paths[0])
        _peer_one(converter, paths[0])
    ours, peer = [], []
    for path in paths:
        ours.append(_ours_one(path))
        peer.append(_peer_one(converter, path))
    return ours, peer


def _markitdown(paths: list[str]) -> list[dict[str, Any]]:
    try:
        import markitdown  # noqa: F401
    except ImportError:
        python = ROOT / ".venv-bench" / "bin" / "python"
        if not python.exists():
            raise RuntimeError(
                "markitdown not installed: create .venv-bench (see benchmarks/requirements.txt)"
            ) from None
        job = CACHE / "markitdown-job.json"
        job.write_text(json.dumps(paths), encoding="utf-8")
        proc = subprocess.run(
            [str(python), "-m", "benchmarks.parsers", "--markitdown-worker", str(job)],
            cwd=ROOT,
            check=True,
            capture_output=True,
            timeout=3600,
        )
        return json.loads(proc.stdout)
    return _markitdown_inline(paths)


# --------------------------------------------------------------------------- scoring


def _recall(truth: Counter, got: Counter) -> tuple[int, int]:
    return sum(min(n, got[k]) for k, n in truth.items()), sum(truth.values())


def _chars(text: str) -> Counter:
    return Counter(c for c in text if not c.isspace())


def _tokens(text: str) -> Counter:
    return Counter(t.lower() for t in _TOKEN.findall(text))


def _score(docs: list[dict[str, str]], results: list[dict[str, Any]], unescape: bool) -> dict[str, Any]:
    hit_c = tot_c = hit_t = tot_t = 0
    worst = 1.0
    for doc, res in zip(docs, results, strict=True):
        text = _MD_ESCAPE.sub(r"\1", res["text"]) if unescape else res["text"]
        hc, tc = _recall(_chars(doc["truth"]), _chars(text))
        ht, tt = _recall(_tokens(doc["truth"]), _tokens(text))
        hit_c, tot_c, hit_t, tot_t = hit_c + hc, tot_c + tc, hit_t + ht, tot_t + tt
        worst = min(worst, hc / tc if tc else 1.0)
    seconds = sum(r["seconds"] for r in results)
    return {
        "docs": len(results),
        "errors": sum(1 for r in results if r["error"]),
        "char_recall": round(hit_c / tot_c, 5) if tot_c else None,
        "token_recall": round(hit_t / tot_t, 5) if tot_t else None,
        "worst_doc_char_recall": round(worst, 4),
        "docs_per_s": round(len(results) / seconds, 2) if seconds else None,
    }


def run(quick: bool = False, real: bool = False) -> dict[str, Any]:
    if real:  # ``--real``: third-party files from ../shared/realdocs, not the curated corpus
        from benchmarks import parsers_real

        return parsers_real.run(quick)
    corpus = _build_corpus(quick)
    rows: list[dict[str, Any]] = []
    verdicts = []
    goals = {"html": 0.999, "docx": 0.999, "xlsx": 0.999, "markdown": 0.999, "pdf": 0.99}
    for fmt in FORMATS:
        docs = corpus.get(fmt) or []
        if not docs:
            continue
        paths = [d["path"] for d in docs]
        both = _interleaved(paths)
        ours_runs, peer_runs = both if both is not None else (_ours(paths), _markitdown(paths))
        ours = _score(docs, ours_runs, unescape=False)
        peer = _score(docs, peer_runs, unescape=True)
        ratio = round((ours["docs_per_s"] or 0) / (peer["docs_per_s"] or 1e-9), 2)
        rows.append({"format": fmt, "tool": "tributary", **ours, "x markitdown": ratio})
        rows.append({"format": fmt, "tool": "markitdown 0.1.9", **peer})
        goal = goals.get(fmt)
        met = goal is None or (ours["char_recall"] or 0) >= goal
        verdicts.append(
            f"{fmt}: recall {'meets' if met else 'MISSES'} goal{f' {goal}' if goal else ''}, "
            f"{ratio}x markitdown's docs/s ({ours['docs_per_s']} vs {peer['docs_per_s']}; "
            f"goal {SPEED_GOAL}x {'met' if ratio >= SPEED_GOAL else 'NOT met'})"
        )
    mode = "interleaved per document" if both is not None else "one tool after the other"
    summary = (
        f"Corpus: {', '.join(f'{k} {len(v)}' for k, v in corpus.items() if v)} documents; timing {mode}, "
        f"load average {' / '.join(f'{v:.2f}' for v in os.getloadavg())} at the end. " + "; ".join(verdicts) + "."
    )
    return {
        "title": "Parsers: fidelity and speed vs markitdown",
        "peer": "markitdown 0.1.9",
        "rows": rows,
        "summary": summary,
    }


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--markitdown-worker":
        job_paths = json.loads(Path(sys.argv[2]).read_text(encoding="utf-8"))
        json.dump(_markitdown_inline(job_paths), sys.stdout)
    else:
        print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
