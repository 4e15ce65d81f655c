"""Fuzzing campaign over every built-in parser and the lakesheet decoder (issue 10, item 3).

Seeds are real documents built the way the parser tests build them (python-docx, openpyxl,
python-pptx, ``tests/parsers/pdfgen.py``, the lakesheet golden model); hypothesis mutates them by
byte flips, truncation, inserted garbage and corruption of single zip entries (the entry's XML is
mutated and the archive rebuilt, so the damage reaches the XML layer, not only the zip CRC).

Properties: ``parse_document`` raises nothing but :class:`ParseError` and returns within the
per-document budget (plus the isolation grace); ``lakesheet_to_xlsx`` raises nothing but
:class:`LakesheetError`. Cases run are printed per parser (``pytest -s`` shows them); scale the
campaign with ``TRIBUTARY_FUZZ_SCALE`` (default 1).

Legacy Office (``.doc/.xls/.ppt``) is not fuzzed here: every case is a LibreOffice conversion
(seconds each); its hostile cases live in tests/parsers/test_hostile.py.
"""

from __future__ import annotations

import io
import json
import os
import resource
import time
import zipfile
import zlib
from collections import Counter
from pathlib import Path

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
def test_parser_fuzz_raises_only_parse_error_within_budget(parser: str):
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
        try:
            doc = parse_document(RawDocument("fuzz", data, file_name, media_type=media_type), OPTIONS)
            outcomes["parsed"] += 1
            assert isinstance(doc.blocks, list)
        except ParseError as exc:
            outcomes[exc.code.value] += 1
        # a hang would be bounded by the budget (cooperative or the forked child's hard kill)
        assert time.monotonic() - started < BUDGET_S + _GRACE_S

    run()
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nfuzz {parser}: {CASES[parser]} cases, outcomes {dict(outcomes)}, process peak RSS {peak_mib:.0f} MiB")
    assert CASES[parser] >= 5


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


def test_lakesheet_fuzz_raises_only_lakesheet_error():
    assert lakesheet_to_xlsx(_wrapper(GOLDEN))[:2] == b"PK"
    outcomes: Counter[str] = Counter()

    @settings(max_examples=max(10, int(200 * SCALE)), deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
    @given(body=lakesheet_bodies())
    def run(body: str) -> None:
        CASES["lakesheet"] += 1
        try:
            out = lakesheet_to_xlsx(body, max_bytes=8 << 20)
            outcomes["xlsx"] += 1
            assert out[:2] == b"PK"
        except LakesheetError as exc:
            outcomes[exc.code] += 1

    run()
    print(f"\nfuzz lakesheet: {CASES['lakesheet']} cases, outcomes {dict(outcomes)}")
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
    assert written.parent == (area.root / "raw").resolve()


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
