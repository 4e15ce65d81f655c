"""OCR character recall and speed, Chinese and English, against tesseract's CLI and RapidOCR.

Corpus (built once, cached under ``benchmarks/.cache/ocr/``): real text made into PDF pages by
LibreOffice (``soffice``), then rendered to page images, so the truth of every image is known:

* English: pages of the Python tutorial from Debian's ``python3-doc``
  (``/usr/share/doc/python3.11/html/tutorial``);
* Chinese: the Debian FAQ in Simplified Chinese (``debian-faq-zh-cn``,
  ``/usr/share/doc/debian/FAQ/zh-cn``), which also holds English names and commands.

The truth of a page is its PDF text layer (pdfium). Metrics per language and tool: bag-of-
characters recall over non-whitespace characters (sum over pages of min(truth, output) counts /
truth characters, as benchmarks/parsers.py scores), the same as precision (output characters
that are in the truth), and pages per second, OCR only (images rendered beforehand), one page at
a time in one process on this machine's cores (tesseract uses its OpenMP threads).

Tools: Tributary's ``_ocr.ocr_image`` (image_to_data, lines rebuilt, CJK spaces removed,
low-confidence lines dropped, one OpenMP thread) at 150, 200 and 300 dpi; the ``tesseract`` CLI
run as its manual says (``tesseract page.png out -l chi_sim+eng``, OpenMP threads as installed)
and again with ``OMP_THREAD_LIMIT=1``, on the 300 dpi images; these five run page by page in turn,
so the load of other processes weighs on each alike. RapidOCR (``rapidocr_onnxruntime``, its
PP-OCR models ship in the wheel) runs in ``.venv-bench`` on the 200 dpi images (it resizes its
input itself), when installed there.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = HERE / ".cache" / "ocr"
EN_DOCS = Path("/usr/share/doc/python3.11/html/tutorial")
ZH_DOCS = Path("/usr/share/doc/debian/FAQ/zh-cn")
EN_FILES = ("introduction.html", "controlflow.html", "datastructures.html", "classes.html")
ZH_FILES = ("basic-defs.zh-cn.html", "choosing.zh-cn.html", "software.zh-cn.html", "pkg-basics.zh-cn.html")
DPIS = (150, 200, 300)
LANGUAGES = "chi_sim+eng"
# before _ocr sets its OpenMP default in this process
_ENV_AT_START = dict(os.environ)
# RapidOCR runs in .venv-bench and times each page itself
_RAPID_WORKER = """
import json, sys, time
from rapidocr_onnxruntime import RapidOCR
engine = RapidOCR()
out = []
for path in sys.argv[1:]:
    t = time.perf_counter()
    result, _ = engine(path)
    out.append({"text": "\\n".join(r[1] for r in (result or [])), "seconds": time.perf_counter() - t})
print(json.dumps(out))
"""


# --------------------------------------------------------------------------- corpus


def _pdfs(lang: str, quick: bool) -> list[Path]:
    """LibreOffice PDFs of the corpus's HTML pages (cached)."""
    src_dir, files = (EN_DOCS, EN_FILES) if lang == "en" else (ZH_DOCS, ZH_FILES)
    names: tuple[str, ...] = files[:2] if quick else files
    out = CACHE / lang
    out.mkdir(parents=True, exist_ok=True)
    todo = [src_dir / n for n in names if (src_dir / n).exists() and not (out / n.replace(".html", ".pdf")).exists()]
    if todo:
        soffice = shutil.which("soffice")
        if soffice is None:
            raise RuntimeError("soffice (LibreOffice) is needed to build the OCR corpus")
        with tempfile.TemporaryDirectory() as profile:
            subprocess.run(
                [
                    soffice,
                    "--headless",
                    f"-env:UserInstallation=file://{profile}",
                    "--infilter=HTML (StarWriter)",
                    "--convert-to",
                    "pdf:writer_pdf_Export",
                    "--outdir",
                    str(out),
                    *map(str, todo),
                ],
                check=True,
                capture_output=True,
                timeout=600,
            )
    return [out / n.replace(".html", ".pdf") for n in names if (out / n.replace(".html", ".pdf")).exists()]


def _pages(lang: str, quick: bool) -> list[dict[str, Any]]:
    """Pages with a fair amount of text: {truth, png: {dpi: path}}."""
    import pypdfium2 as pdfium

    per_file = 1 if quick else 2
    pages: list[dict[str, Any]] = []
    for pdf_path in _pdfs(lang, quick):
        pdf = pdfium.PdfDocument(str(pdf_path))
        taken = 0
        for index in range(len(pdf)):
            page = pdf[index]
            truth = page.get_textpage().get_text_range()
            if len("".join(truth.split())) < 400:  # a title page or a short tail
                continue
            pngs = {}
            for dpi in DPIS:
                png = CACHE / lang / f"{pdf_path.stem}-p{index + 1}-{dpi}.png"
                if not png.exists():
                    page.render(scale=dpi / 72, grayscale=True).to_pil().save(png)
                pngs[dpi] = png
            pages.append({"name": f"{pdf_path.stem} p{index + 1}", "truth": truth, "png": pngs})
            taken += 1
            if taken == per_file:
                break
        pdf.close()
    return pages


# --------------------------------------------------------------------------- scoring


def _chars(text: str) -> Counter[str]:
    return Counter(ch for ch in text if not ch.isspace())


def _score(pairs: list[tuple[str, str]]) -> tuple[float, float]:
    """Micro-averaged bag-of-characters (recall, precision) over (truth, output) pairs."""
    hit = truth_n = out_n = 0
    for truth, output in pairs:
        t, o = _chars(truth), _chars(output)
        hit += sum((t & o).values())
        truth_n += sum(t.values())
        out_n += sum(o.values())
    return hit / max(truth_n, 1), hit / max(out_n, 1)


# --------------------------------------------------------------------------- tools


def _tributary_page(png: Path, dpi: int) -> tuple[str, float]:
    from PIL import Image

    from plugins.parsers._common import Deadline
    from plugins.parsers._ocr import OcrSettings, join_lines, ocr_image

    with Image.open(png) as image:
        image.load()
        start = time.perf_counter()
        lines = ocr_image(image, OcrSettings(languages=LANGUAGES, dpi=dpi), Deadline(600))
        return join_lines(lines), time.perf_counter() - start


def _cli_page(png: Path, env: dict[str, str]) -> tuple[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "out"
        start = time.perf_counter()
        subprocess.run(["tesseract", str(png), str(base), "-l", LANGUAGES], check=True, capture_output=True, env=env)
        seconds = time.perf_counter() - start
        return base.with_suffix(".txt").read_text(encoding="utf-8"), seconds


def _interleaved(pages: list[dict[str, Any]]) -> dict[tuple[str, int], tuple[list[str], float]]:
    """Every tesseract configuration on page 1, then on page 2, ...: the load other processes put
    on the machine changes over minutes, and this way it weighs on each configuration alike."""
    documented = {k: v for k, v in os.environ.items() if k != "OMP_THREAD_LIMIT"}  # the CLI as installed
    if "OMP_THREAD_LIMIT" in _ENV_AT_START:
        documented["OMP_THREAD_LIMIT"] = _ENV_AT_START["OMP_THREAD_LIMIT"]
    one_thread = {**documented, "OMP_THREAD_LIMIT": "1"}
    configs: dict[tuple[str, int], Any] = {
        ("tributary", dpi): functools.partial(_tributary_page, dpi=dpi) for dpi in DPIS
    }
    configs[("tesseract CLI", 300)] = functools.partial(_cli_page, env=documented)
    configs[("tesseract CLI, OMP_THREAD_LIMIT=1", 300)] = functools.partial(_cli_page, env=one_thread)
    out: dict[tuple[str, int], tuple[list[str], float]] = {key: ([], 0.0) for key in configs}
    for page in pages:
        for key, fn in configs.items():
            text, seconds = fn(page["png"][key[1]])
            texts, total = out[key]
            texts.append(text)
            out[key] = (texts, total + seconds)
    return out


def _rapidocr(pages: list[dict[str, Any]], dpi: int) -> tuple[list[str], float] | str:
    python = ROOT / ".venv-bench" / "bin" / "python"
    if not python.exists():
        return "no .venv-bench (bash scripts/bench_env.sh)"
    check = subprocess.run([str(python), "-c", "import rapidocr_onnxruntime"], capture_output=True)
    if check.returncode != 0:
        return "rapidocr_onnxruntime not installed in .venv-bench"
    done = subprocess.run(
        [str(python), "-c", _RAPID_WORKER, *(str(p["png"][dpi]) for p in pages)],
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
    )
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return [r["text"] for r in results], sum(r["seconds"] for r in results)


def _rapid_version() -> str:
    python = ROOT / ".venv-bench" / "bin" / "python"
    got = subprocess.run(
        [str(python), "-m", "pip", "show", "rapidocr_onnxruntime"], capture_output=True, text=True, check=False
    )
    return next((line.split(":", 1)[1].strip() for line in got.stdout.splitlines() if line.startswith("Version")), "?")


def _tesseract_version() -> str:
    got = subprocess.run(["tesseract", "--version"], capture_output=True, text=True, check=False)
    return (got.stdout or got.stderr).split("\n", 1)[0].strip()


# --------------------------------------------------------------------------- run


def _row(
    tool: str, lang: str, dpi: int, pages: list[dict[str, Any]], texts: list[str], seconds: float
) -> dict[str, Any]:
    recall, precision = _score([(p["truth"], t) for p, t in zip(pages, texts, strict=True)])
    return {
        "tool": tool,
        "language": lang,
        "dpi": dpi,
        "pages": len(pages),
        "char_recall": round(recall, 4),
        "char_precision": round(precision, 4),
        "pages_per_s": round(len(pages) / max(seconds, 1e-9), 3),
    }


def run(quick: bool = False) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for lang in ("en", "zh"):
        pages = _pages(lang, quick)
        if not pages:
            notes.append(f"{lang}: no corpus pages (documentation packages missing)")
            continue
        for (tool, dpi), (texts, seconds) in _interleaved(pages).items():
            rows.append(_row(tool, lang, dpi, pages, texts, seconds))
        rapid = _rapidocr(pages, 200)
        if isinstance(rapid, str):
            notes.append(f"RapidOCR not run: {rapid}")
        else:
            rows.append(_row(f"RapidOCR {_rapid_version()}", lang, 200, pages, *rapid))
    peers = f"{_tesseract_version()} CLI (-l {LANGUAGES}); RapidOCR (rapidocr_onnxruntime, .venv-bench)"
    summary = (
        "Character recall/precision: bag of non-whitespace characters against the PDF text layer of "
        "LibreOffice pages (en: Python tutorial; zh: Debian FAQ zh-cn). pages/s: OCR only, sequential."
    )
    return {
        "title": "OCR: character recall and pages/s",
        "peer": peers,
        "rows": rows,
        "summary": " ".join([summary, *notes]),
    }
