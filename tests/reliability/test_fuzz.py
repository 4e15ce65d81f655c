"""Fuzzing campaign over every built-in parser and the lakesheet decoder (issue 10, item 3).

Seeds are real documents built the way the parser tests build them (python-docx, openpyxl,
python-pptx, ``tests/parsers/pdfgen.py``, the lakesheet golden model); hypothesis mutates them by
byte flips, truncation, inserted garbage and corruption of single zip entries (the entry's XML is
mutated and the archive rebuilt, so the damage reaches the XML layer, not only the zip CRC).

Properties: ``parse_document`` raises nothing but :class:`ParseError` and returns within the
per-document budget (plus the isolation grace); ``lakesheet_to_xlsx`` raises nothing but
:class:`LakesheetError`. Cases run are printed per parser (``pytest -s`` shows them); scale the
campaign with ``TRIBUTARY_FUZZ_SCALE`` (default 1).

Peak memory is bounded per document (``MEMORY_BOUND``), measured two ways around every call:
the peak of Python allocations during the call (``tracemalloc``, exact whatever the process held
before, but blind to C libraries' own buffers: libxml2, pdfium), and the growth of the resident
set's high-water mark (``VmHWM`` reset to the current RSS through ``/proc/self/clear_refs`` before
the call — every allocation, C included, but only beyond memory the process already had). For the
forked PDF parser both are taken inside the child (its own tracemalloc peak, its RSS high-water
mark reset right after the fork) and reported before it exits.

Legacy Office (``.doc/.xls/.ppt``) is not fuzzed here: every case is a LibreOffice conversion
(seconds each); its hostile cases live in tests/parsers/test_hostile.py.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import io
import json
import os
import resource
import time
import tracemalloc
import zipfile
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from include.contract import ParseError, RawDocument
from include.staging import StagingArea
from plugins.connectors.feishu.client import filename_from_disposition
from plugins.connectors.yuque.lakesheet import LakesheetError, lakesheet_to_xlsx
from plugins.parsers import parse_document
from tests.parsers.conftest import FIXTURES
from tests.parsers.ooxml import build_docx, p
from tests.parsers.pdfgen import build_pdf
from tests.yuque.sheet_models import GOLDEN

SCALE = float(os.environ.get("TRIBUTARY_FUZZ_SCALE", "1"))
# Small budget so a hang shows quickly; the isolated (forked) parsers get 2 s of grace on top.
BUDGET_S = 5.0
OPTIONS = {"time_budget_s": BUDGET_S, "max_bytes": 4 << 20, "zip_max_uncompressed": 64 << 20}
_GRACE_S = 15.0  # generous: this bounds a hang, it does not measure speed

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"

CASES: Counter[str] = Counter()
OUTCOMES: dict[str, Counter[str]] = {}
# parser -> (input bytes, Python peak bytes, RSS high-water growth bytes) per case
MEMORY: dict[str, list[tuple[int, int, int]]] = {}
MIB = 1 << 20


def memory_bound(size: int) -> int:
    """Most memory one parse of ``size`` content bytes may take: a fixed allowance for the parser's
    working set plus 256 bytes per input byte (the Markdown parser's token stream and blocks were
    measured at ~80x its input in a fresh process, ~170x with tracemalloc's bookkeeping; the other
    parsers stay under ~35x), and never more than 256 MiB for one document."""
    return min(64 * MIB + 256 * size, 256 * MIB)


# --------------------------------------------------------------------------- seeds


def _docx_seeds() -> list[bytes]:
    import docx

    d = docx.Document()
    d.add_heading("模糊测试 Fuzz", level=1)
    d.add_paragraph("A paragraph with text. 第二句。")
    table = d.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(1, 1).text = "a", "b"
    buf = io.BytesIO()
    d.save(buf)
    return [buf.getvalue(), build_docx(p("Title", "Heading1") + p("body")), (FIXTURES / "test.docx").read_bytes()]


def _xlsx_seed() -> bytes:
    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    ws.title = "数据"
    ws.append(["产品", "数量", "单价"])
    ws.append(["苹果", 12, 3.5])
    ws["D2"] = "=B2*C2"
    ws.merge_cells("A4:C4")
    ws["A4"] = "备注"
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def _pptx_seed() -> bytes:
    from pptx import Presentation

    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "幻灯片标题"
    slide.placeholders[1].text = "Bullet one\nBullet two"
    buf = io.BytesIO()
    prs.save(buf)
    return buf.getvalue()


def _pdf_seed() -> bytes:
    return build_pdf(
        [[(20, 30, 14, "Heading"), (20, 60, 10, "Body text on page one.")], [(20, 30, 10, "Page two.")]],
        outline=[("Heading", 0)],
    )


_HTML = (
    "<!doctype html><html><head><meta charset=utf-8><title>T</title></head><body><h1>标题</h1>"
    "<p>Para <a href='/x'>link</a></p><table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>"
    "<ul><li>one</li><li>two</li></ul><pre><code>x = 1</code></pre></body></html>"
).encode()
_MD = "# 标题\n\nPara with *emphasis* and [link][r].\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```py\nx = 1\n```\n\n[r]: /x\n".encode()
_CSV = 'name,qty,price\n苹果,12,3.5\n"quoted, comma",1,2\n'.encode()
_JSON = json.dumps(
    {"title": "t", "items": [{"a": 1, "b": ["x", {"c": None}]}], "中文": "值"}, ensure_ascii=False
).encode()
_JSONL = b'{"a": 1}\n{"b": "two"}\n{"c": [3]}\n'
_TEXT = "Plain text line one.\n第二行。\n\nThird paragraph.\n".encode()

# parser -> (media type, file name, seeds)
SEEDS: dict[str, tuple[str, str, list[bytes]]] = {
    "docx": (DOCX, "f.docx", _docx_seeds()),
    "xlsx": (XLSX, "f.xlsx", [_xlsx_seed()]),
    "pptx": (PPTX, "f.pptx", [_pptx_seed()]),
    "pdf": ("application/pdf", "f.pdf", [_pdf_seed()]),
    "html": ("text/html; charset=utf-8", "f.html", [_HTML]),
    "markdown": ("text/markdown", "f.md", [_MD]),
    "csv": ("text/csv", "f.csv", [_CSV]),
    "json": ("application/json", "f.json", [_JSON]),
    "jsonl": ("application/x-ndjson", "f.jsonl", [_JSONL]),
    "text": ("text/plain", "f.txt", [_TEXT]),
}
# examples per parser: the forked PDF parser and the zip formats cost more per case
EXAMPLES = {"pdf": 60, "docx": 120, "xlsx": 100, "pptx": 80}


# --------------------------------------------------------------------------- mutations


def _flip(data: bytes, draw: st.DrawFn) -> bytes:
    if not data:
        return data
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 8))):
        i = draw(st.integers(0, len(buf) - 1))
        buf[i] = draw(st.integers(0, 255))
    return bytes(buf)


def _truncate(data: bytes, draw: st.DrawFn) -> bytes:
    return data[: draw(st.integers(0, max(0, len(data) - 1)))]


def _insert(data: bytes, draw: st.DrawFn) -> bytes:
    i = draw(st.integers(0, len(data)))
    junk = draw(st.sampled_from([b"\x00", b"<", b"<!ENTITY x SYSTEM 'file:///etc/passwd'>", b"\xff\xfe", b"{[", b"%"]))
    return data[:i] + junk * draw(st.integers(1, 200)) + data[i:]


def _corrupt_zip_entry(data: bytes, draw: st.DrawFn) -> bytes:
    """Rebuild the archive with one member's content mutated (or the member renamed away)."""
    try:
        zin = zipfile.ZipFile(io.BytesIO(data))
        members = [(i, zin.read(i)) for i in zin.infolist()]
    except Exception:  # the input is already broken beyond reading: fall back to a byte flip
        return _flip(data, draw)
    target = draw(st.integers(0, len(members) - 1))
    action = draw(st.sampled_from(["flip", "truncate", "insert", "drop", "rename"]))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
        for n, (info, content) in enumerate(members):
            name = info.filename
            if n == target:
                if action == "drop":
                    continue
                if action == "rename":
                    name = draw(st.sampled_from(["../../evil.xml", "/abs/evil.xml", "word/../../x.xml", name.upper()]))
                else:
                    content = {"flip": _flip, "truncate": _truncate, "insert": _insert}[action](content, draw)
            zout.writestr(name, content)
    return out.getvalue()


@st.composite
def mutated(draw: st.DrawFn, parser: str, is_zip: bool) -> bytes:
    seeds = SEEDS[parser][2]  # by name, so a failure report does not print whole documents
    data = seeds[draw(st.integers(0, len(seeds) - 1))]
    ops = [_flip, _truncate, _insert] + ([_corrupt_zip_entry] * 3 if is_zip else [])
    for _ in range(draw(st.integers(1, 3))):
        data = draw(st.sampled_from(ops))(data, draw)
    return data


# --------------------------------------------------------------------------- memory


def _status_kib(field_name: str) -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise LookupError(field_name)


_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def _reset_rss_peak() -> None:
    """Reset VmHWM to the current RSS (Linux >= 4.0: "5" to clear_refs), after handing free heap
    memory back to the system: a parse reusing memory the process already held would not raise
    the high-water mark, and would be under-counted."""
    _LIBC.malloc_trim(0)
    with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
        fh.write("5")


# The isolated (forked) parsers run in a child: the fixture wraps os.fork/os._exit so the child
# resets its own high-water mark after the fork and reports its figures in a file before exiting.
_REAL_FORK, _REAL_EXIT = os.fork, os._exit
_CHILD: dict[str, Any] = {}
_CHILD_REPORTS: list[Path] = []
CHILDREN_MEASURED: Counter[str] = Counter()


def _fork_measured() -> int:
    pid = _REAL_FORK()
    if pid == 0:
        _reset_rss_peak()
        tracemalloc.reset_peak()
        _CHILD.update(in_child=True, rss=_status_kib("VmRSS"), traced=tracemalloc.get_traced_memory()[0])
    return pid


def _exit_reporting(status: int) -> None:
    if _CHILD.get("in_child") and _CHILD_REPORTS:
        py_peak = tracemalloc.get_traced_memory()[1] - _CHILD["traced"]
        growth = (_status_kib("VmHWM") - _CHILD["rss"]) * 1024
        (_CHILD_REPORTS[0] / str(os.getpid())).write_text(f"{py_peak} {growth}")
    _REAL_EXIT(status)


@contextmanager
def _measured(parser: str, size: int) -> Iterator[None]:
    _reset_rss_peak()
    rss_before = _status_kib("VmRSS")
    tracemalloc.reset_peak()
    traced_before = tracemalloc.get_traced_memory()[0]
    yield
    py_peak = tracemalloc.get_traced_memory()[1] - traced_before
    rss_growth = (_status_kib("VmHWM") - rss_before) * 1024
    if _CHILD_REPORTS:
        for report in _CHILD_REPORTS[0].iterdir():
            child_py, child_rss = (int(v) for v in report.read_text().split())
            py_peak, rss_growth = max(py_peak, child_py), max(rss_growth, child_rss)
            CHILDREN_MEASURED[parser] += 1
            report.unlink()
    MEMORY.setdefault(parser, []).append((size, max(py_peak, 0), max(rss_growth, 0)))


@pytest.fixture
def memory_tracing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    _CHILD_REPORTS[:] = [tmp_path]
    monkeypatch.setattr(os, "fork", _fork_measured)
    monkeypatch.setattr(os, "_exit", _exit_reporting)
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()
        _CHILD_REPORTS.clear()


def _memory_line(parser: str) -> str:
    rows = MEMORY.get(parser, [])
    if not rows:
        return f"{parser}: no cases"
    py = max(rows, key=lambda r: r[1])
    rss = max(rows, key=lambda r: r[2])
    return (
        f"{parser}: {len(rows)} cases, max input {max(r[0] for r in rows) / 1024:.0f} KiB, "
        f"max Python peak {py[1] / MIB:.2f} MiB (input {py[0] / 1024:.0f} KiB), "
        f"max RSS growth {rss[2] / MIB:.2f} MiB (input {rss[0] / 1024:.0f} KiB)"
    )


# --------------------------------------------------------------------------- parsers


def _zip_with_version(extract_version: int) -> bytes:
    data = bytearray(SEEDS["xlsx"][2][0])
    central = data.find(b"PK\x01\x02")
    data[central + 6 : central + 8] = extract_version.to_bytes(2, "little")  # "version needed"
    return bytes(data)


def test_unsupported_zip_version_is_a_parse_error():
    with pytest.raises(ParseError):
        parse_document(RawDocument("k", _zip_with_version(64), "f.xlsx", media_type=XLSX), OPTIONS)


@pytest.mark.parametrize("parser", sorted(SEEDS))
def test_parser_fuzz_raises_only_parse_error_within_budget(parser: str, memory_tracing: None):
    media_type, file_name, seeds = SEEDS[parser]
    for seed in seeds:  # the seeds themselves are real, parseable documents
        assert parse_document(RawDocument("seed", seed, file_name, media_type=media_type), OPTIONS).parser == parser
    is_zip = seeds[0][:2] == b"PK"
    outcomes = OUTCOMES.setdefault(parser, Counter())

    @settings(
        max_examples=max(5, int(EXAMPLES.get(parser, 150) * SCALE)),
        deadline=None,
        database=None,
        derandomize=True,  # the same campaign on every CI run; raise SCALE to explore further
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=mutated(parser, is_zip))
    def run(data: bytes) -> None:
        CASES[parser] += 1
        started = time.monotonic()
        with _measured(parser, len(data)):
            try:
                doc = parse_document(RawDocument("fuzz", data, file_name, media_type=media_type), OPTIONS)
                outcomes["parsed"] += 1
                assert isinstance(doc.blocks, list)
            except ParseError as exc:
                outcomes[exc.code.value] += 1
        # a hang would be bounded by the budget (cooperative or the forked child's hard kill)
        assert time.monotonic() - started < BUDGET_S + _GRACE_S
        size, py_peak, rss_growth = MEMORY[parser][-1]
        assert py_peak <= memory_bound(size), f"{py_peak / MIB:.1f} MiB of Python objects for {size} bytes"
        assert rss_growth <= memory_bound(size), f"RSS grew {rss_growth / MIB:.1f} MiB for {size} bytes"

    run()
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nfuzz {parser}: {CASES[parser]} cases, outcomes {dict(outcomes)}, process peak RSS {peak_mib:.0f} MiB")
    print(f"fuzz memory per document: {_memory_line(parser)}")
    assert CASES[parser] >= 5
    assert len(MEMORY[parser]) == CASES[parser]  # every case was measured
    if parser == "pdf":  # the forked children's figures really were read
        assert CHILDREN_MEASURED[parser] >= CASES[parser] // 2


# --------------------------------------------------------------------------- large inputs

_LINE = "第{i}段：增量同步把变化的文档重新解析、切块并写入索引。Paragraph {i} of a long document."


def _large(parser: str) -> bytes:
    """A real, parseable document of about 1-2 MiB of content in each format."""
    n = 8000
    if parser == "csv":
        return (
            "id,name,qty,note\n" + "".join(f"{i},产品{i},{i % 97},{_LINE.format(i=i)}\n" for i in range(n))
        ).encode()
    if parser == "text":
        return "\n\n".join(_LINE.format(i=i) for i in range(n)).encode()
    if parser == "markdown":
        return "".join(
            f"## 第{i}节\n\n{_LINE.format(i=i)}\n\n| a | b |\n|---|---|\n| {i} | x |\n\n" for i in range(n // 4)
        ).encode()
    if parser == "html":
        body = "".join(f"<h2>第{i}节</h2><p>{_LINE.format(i=i)}</p><ul><li>{i}</li></ul>" for i in range(n // 2))
        return f"<!doctype html><html><head><meta charset=utf-8><title>大文档</title></head><body>{body}</body></html>".encode()
    if parser == "json":
        return json.dumps(
            {"items": [{"id": i, "text": _LINE.format(i=i)} for i in range(n)]}, ensure_ascii=False
        ).encode()
    if parser == "jsonl":
        return "".join(
            json.dumps({"id": i, "text": _LINE.format(i=i)}, ensure_ascii=False) + "\n" for i in range(n)
        ).encode()
    if parser == "docx":
        return build_docx("".join(p(f"第{i}节", "Heading1") + p(_LINE.format(i=i)) for i in range(n // 2)))
    if parser == "xlsx":
        from openpyxl import Workbook

        wb = Workbook(write_only=True)
        ws = wb.create_sheet("数据")
        ws.append(["id", "name", "qty", "note"])
        for i in range(n):
            ws.append([i, f"产品{i}", i % 97, _LINE.format(i=i)])
        buf = io.BytesIO()
        wb.save(buf)
        return buf.getvalue()
    if parser == "pptx":
        from pptx import Presentation

        prs = Presentation()
        for i in range(300):
            slide = prs.slides.add_slide(prs.slide_layouts[1])
            slide.shapes.title.text = f"第{i}页"
            slide.placeholders[1].text = "\n".join(_LINE.format(i=i * 10 + k) for k in range(10))
        buf = io.BytesIO()
        prs.save(buf)
        return buf.getvalue()
    if parser == "pdf":
        text = "line {k} of page {pg}: incremental sync re-parses changed documents only."
        return build_pdf([[(20, 30 + 12 * k, 9, text.format(k=k, pg=pg)) for k in range(60)] for pg in range(300)])
    raise AssertionError(parser)


def _content_size(data: bytes) -> int:
    """What a parser has to hold: the bytes, or for a zip package its members inflated."""
    if data[:2] != b"PK":
        return len(data)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return max(len(data), sum(i.file_size for i in zf.infolist()))


@pytest.mark.parametrize("parser", sorted(SEEDS))
def test_peak_memory_of_a_large_document_is_bounded(parser: str, memory_tracing: None):
    """The fuzz cases are small; this measures one real document of ~1-2 MiB of content per format
    (budget raised so the whole parse runs) against the same per-document bound."""
    media_type, file_name, _ = SEEDS[parser]
    data = _large(parser)
    size = _content_size(data)
    options = {**OPTIONS, "time_budget_s": 120.0}
    with _measured(f"large {parser}", size):
        doc = parse_document(RawDocument("large", data, file_name, media_type=media_type), options)
    assert doc.parser == parser and len(doc.text) > 100_000  # the whole document was read
    _, py_peak, rss_growth = MEMORY[f"large {parser}"][-1]
    print(f"\nfuzz memory per document: {_memory_line(f'large {parser}')}, file {len(data) / 1024:.0f} KiB")
    assert py_peak <= memory_bound(size) and rss_growth <= memory_bound(size)


# --------------------------------------------------------------------------- lakesheet


def _wrapper(sheets: object) -> str:
    raw = zlib.compress(json.dumps(sheets, ensure_ascii=False).encode("utf-8"))
    return json.dumps({"format": "lakesheet", "version": "3.3.2", "sheet": raw.decode("latin-1")})


@st.composite
def lakesheet_bodies(draw: st.DrawFn) -> str:
    """Mutations at three layers: the wrapper JSON text, the zlib stream, the inflated models."""
    layer = draw(st.sampled_from(["wrapper", "stream", "models"]))
    if layer == "models":
        text = json.dumps(GOLDEN, ensure_ascii=False).encode("utf-8")
        mutatedjs = draw(st.sampled_from([_flip, _truncate, _insert]))(text, draw)
        try:
            models = json.loads(mutatedjs)  # keep structurally valid JSON with odd values
        except ValueError:
            models = mutatedjs.decode("utf-8", "replace")
        raw = zlib.compress(json.dumps(models).encode() if not isinstance(models, str) else models.encode())
        return json.dumps({"format": "lakesheet", "sheet": raw.decode("latin-1")})
    if layer == "stream":
        raw = zlib.compress(json.dumps(GOLDEN, ensure_ascii=False).encode("utf-8"))
        raw = draw(st.sampled_from([_flip, _truncate, _insert]))(raw, draw)
        return json.dumps({"format": "lakesheet", "sheet": raw.decode("latin-1")})
    body = _wrapper(GOLDEN).encode("utf-8")
    return draw(st.sampled_from([_flip, _truncate, _insert]))(body, draw).decode("utf-8", "replace")


def test_lakesheet_fuzz_raises_only_lakesheet_error(memory_tracing: None):
    assert lakesheet_to_xlsx(_wrapper(GOLDEN))[:2] == b"PK"
    outcomes: Counter[str] = Counter()

    @settings(max_examples=max(10, int(200 * SCALE)), deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
    @given(body=lakesheet_bodies())
    def run(body: str) -> None:
        CASES["lakesheet"] += 1
        with _measured("lakesheet", len(body)):
            try:
                out = lakesheet_to_xlsx(body, max_bytes=8 << 20)
                outcomes["xlsx"] += 1
                assert out[:2] == b"PK"
            except LakesheetError as exc:
                outcomes[exc.code] += 1
        _, py_peak, rss_growth = MEMORY["lakesheet"][-1]
        # the bound follows the inflate cap (8 MiB), not the compressed input
        assert max(py_peak, rss_growth) <= memory_bound(8 << 20)

    run()
    print(f"\nfuzz lakesheet: {CASES['lakesheet']} cases, outcomes {dict(outcomes)}")
    print(f"fuzz memory per document: {_memory_line('lakesheet')}")
    assert CASES["lakesheet"] >= 10


# --------------------------------------------------------------------------- path traversal


_HOSTILE_NAMES = [
    'attachment; filename="../../../etc/passwd"',
    "attachment; filename*=UTF-8''..%2F..%2F..%2Froot%2F.ssh%2Fauthorized_keys",
    'attachment; filename="..\\\\..\\\\windows\\\\system32\\\\x.dll"',
    'attachment; filename="/etc/cron.d/job.docx"',
    "attachment; filename*=UTF-8''%2E%2E%2F%2E%2E%2Fx%00.pdf",
    'attachment; filename="report.docx/../../../../tmp/owned.docx"',
]


@pytest.mark.parametrize("header", _HOSTILE_NAMES)
def test_content_disposition_names_never_escape_staging(tmp_path: Path, header: str):
    """The Feishu client passes the header's name through (it is metadata, kept for the title and
    the extension); staging names raw files by a hash of the item key, so the name cannot steer
    the path. Only a short ``[a-z0-9]`` extension survives."""
    name = filename_from_disposition(header)
    assert name  # the hostile name really reaches the staging call
    area = StagingArea("dag", "run", root=tmp_path / "staging")
    written = Path(area.stage_raw("feishu:docx:doxcnX", b"bytes", name)).resolve()
    assert written.is_relative_to((tmp_path / "staging" / "dag" / "run" / "raw").resolve())
    assert written.parent.name == "raw" and ".." not in written.name and "/" not in written.name
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [written.name]


@settings(max_examples=int(200 * SCALE), deadline=None, database=None, derandomize=True)
@given(key=st.text(max_size=60), name=st.text(max_size=60), run_id=st.text(min_size=1, max_size=40))
def test_arbitrary_keys_names_and_run_ids_stay_inside_staging(tmp_path_factory: pytest.TempPathFactory,
                                                                key: str, name: str, run_id: str):  # fmt: skip
    root = tmp_path_factory.mktemp("st")
    area = StagingArea("sync_web_x", run_id, root=root)
    written = Path(area.stage_raw(key, b"x", name)).resolve()
    assert written.is_relative_to(root.resolve())
    assert written.parent == (Path(area.root) / "raw").resolve()


@pytest.mark.parametrize("fmt", ["docx", "xlsx", "pptx"])
def test_zip_slip_entry_names_are_never_extracted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str):
    """Parsers read members in memory; a member named ``../../evil`` must not become a file."""
    media_type, file_name, seeds = SEEDS[fmt]
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(seeds[0])) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info))
        for evil in ("../../evil-slip.xml", "/tmp/evil-abs.xml", "..\\..\\evil-win.xml"):
            zout.writestr(evil, b"<owned/>")
    work = tmp_path / "a" / "b" / "cwd"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    try:
        doc = parse_document(RawDocument("k", out.getvalue(), file_name, media_type=media_type), OPTIONS)
        assert doc.blocks  # extra members are ignored, the document still parses
    except ParseError:
        pass  # refusing the archive is also safe
    assert not any("evil" in p.name for p in tmp_path.rglob("*"))
    assert not Path("/tmp/evil-abs.xml").exists()
