"""Parsers on real third-party documents, against markitdown: ``python -m benchmarks parsers --real``.

Corpus: ``../shared/realdocs/`` beside the repository (670 files from other projects' public test
suites; ``manifest.json`` there names each file's format and origin). It is never copied into
the repository; without it the benchmark stops with that reason.

Per file, each tool gets one outcome:

* ``ok``: text came back (possibly empty for ours: a typed ``empty`` error is the norm);
* ``typed``: ours raised a :class:`ParseError` whose message is about the file (encrypted, bomb,
  unsupported, corrupt because the bytes are damaged); for markitdown, any exception it raised;
* ``untyped``: ours let something other than ``ParseError`` escape, or raised ``corrupt`` with
  a message naming a Python exception that signals a bug rather than a bad file
  (:data:`BUG_EXCEPTIONS`: ``KeyError: ...``, ``AttributeError: ...``); the registry wraps any
  escaped exception as ``corrupt: <parser>: <ExceptionName>: <text>``, so the name is what
  tells a handled damage report from an unhandled one. ``ValueError``/``UnicodeError``/
  ``struct.error`` are left out: libraries raise them for damaged bytes, which is what
  ``corrupt`` means;
* ``crash``: the isolated parser process died (a signal, not our kill);
* ``timeout``: no result within the time budget.

Text measures: non-whitespace characters, and "word characters" (``\\w``: letters, digits, CJK)
that leave Markdown syntax out (markitdown's ``|---|`` table rules and ``#`` would otherwise
count as text). A file is "less than markitdown" when markitdown extracted text and ours has
fewer word characters, or covers under :data:`COVERAGE_GOAL` of markitdown's word tokens:
coverage = sum over lower-cased ``\\w+`` tokens t of min(ours[t], md[t]) / sum md[t] (a bag
recall: how much of what markitdown found we found too). Before counting, markitdown's Markdown
escapes are undone and link/image targets dropped (an ``href`` is not document text).
markitdown hands an RTF file (or a WordML ``.doc``) back as its markup: that counts as no text.
It hands JSON back as written: its string escapes are decoded before counting.
Encrypted files are reported aside (neither tool can read them without a password).
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REALDOCS = ROOT.parent / "shared" / "realdocs"
TIME_BUDGET_S = 30.0
PEER_TIMEOUT_S = 60.0
COVERAGE_GOAL = 0.9
# exceptions whose name in a ``corrupt`` message means the parser met a case it never handled
BUG_EXCEPTIONS = (
    "KeyError",
    "AttributeError",
    "TypeError",
    "IndexError",
    "NameError",
    "UnboundLocalError",
    "AssertionError",
    "ZeroDivisionError",
    "NotImplementedError",
    "StopIteration",
    "RuntimeError",
    "OverflowError",
    "ImportError",
    "ModuleNotFoundError",
)
_BUG_RE = re.compile(r"\b(" + "|".join(BUG_EXCEPTIONS) + r")\b")
_MD_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|<>~])")
# a link's target and optional title, escaped quotes inside the title included
_MD_TARGET = re.compile(r'\]\([^)\s]*(?:\s+"(?:[^"\\]|\\.)*")?\)')
# raw HTML markitdown passes through: script/style bodies (never shown) and the tags themselves
_RAW_SCRIPT = re.compile(r"<(script|style)\b.*?</\1\s*>", re.S | re.I)
_RAW_TAG = re.compile(r"</?[A-Za-z][\w:-]*(?:\s[^<>\n]*)?/?>")
_JSON_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|[nrtbf\"/\\])")
_MARKUP_FORMATS = frozenset({"md", "html"})  # where a tag in markitdown's output is markup, not text
# a fenced code block's info string (```bash): ours keeps it as the block's language, not text
_FENCE_INFO = re.compile(r"^(\s*(?:```|~~~))[^\n`]*$", re.M)
_MD_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
# emphasis markers not preceded by a backslash (markitdown writes F**oob**a**r** for bold runs)
_MD_EMPHASIS = re.compile(r"(?<!\\)(\*\*|\*|~~)")
# pandas' fillers in markitdown's spreadsheet tables: an empty cell, an unnamed header
_PANDAS_FILLER = re.compile(r"(?<=\| )(NaN|Unnamed: \d+)(?= \|)")
_MD_HEADING = re.compile(r"^#{1,6} .*$", re.M)
_SPREADSHEETS = frozenset({"xlsx", "xls", "ods"})
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
# a CJK character is a token of its own (no spaces between words); other words are \w+ runs
_TOKEN = re.compile(f"[{_CJK}]|[^\\W{_CJK}]+")
_WORD_CHAR = re.compile(r"\w")
Result = dict[str, Any]
Triple = tuple[Result, Result, Result]  # manifest entry, ours, markitdown


def load_manifest(root: Path = REALDOCS) -> list[dict[str, Any]]:
    return list(json.loads((root / "manifest.json").read_text(encoding="utf-8")))


def classify(code: str, message: str) -> str:
    """Outcome of a ``ParseError`` of ``code``: ``typed``, ``untyped``, ``crash`` or ``timeout``."""
    if code == "timeout":
        return "timeout"
    if code == "corrupt" and "parser process died" in message:
        return "crash"
    if code == "corrupt" and _BUG_RE.search(message):
        return "untyped"
    return "typed"


def load_present_parsers() -> list[str]:
    """Load the built-in parsers whose modules exist; return the dotted paths that do not.

    For the benchmark only, on a tree being worked on: a parser module named in
    ``BUILTIN_PARSERS`` before its file lands would otherwise fail every file's sniffing and
    hide what the other parsers do. The regression test loads the registry as it is.
    """
    import importlib.util

    from plugins.parsers import registry

    missing = [m for m in registry.BUILTIN_PARSERS if importlib.util.find_spec(m) is None]
    if missing and not registry._loaded:
        for path in registry.BUILTIN_PARSERS:
            if path not in missing:
                importlib.import_module(path)
        registry._loaded = True
    return missing


def parse_one(path: str, budget: float = TIME_BUDGET_S) -> dict[str, Any]:
    """Parse one file through the registry in a forked child under default limits + ``budget``."""
    from include.contract import ParseError, RawDocument
    from plugins.parsers.registry import parse_document

    started = time.perf_counter()
    out: dict[str, Any] = {"status": "ok", "code": None, "message": None, "text": ""}
    try:
        data = Path(path).read_bytes()
        doc = parse_document(RawDocument(path, data, Path(path).name), {"isolate": True, "time_budget_s": budget})
        out["text"] = doc.text
    except ParseError as exc:
        out.update(status=classify(exc.code.value, exc.message), code=exc.code.value, message=exc.message[:300])
    except Exception as exc:  # anything else escaping parse_document is the bug this suite hunts
        out.update(status="untyped", code=type(exc).__name__, message=f"{type(exc).__name__}: {exc}"[:300])
    out["seconds"] = time.perf_counter() - started
    return out


def parse_many(paths: list[str], workers: int = 2, budget: float = TIME_BUDGET_S) -> list[dict[str, Any]]:
    """:func:`parse_one` over ``paths`` in a small process pool (each parse forks its own child)."""
    if workers <= 1:
        return [parse_one(p, budget) for p in paths]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(parse_one, paths, [budget] * len(paths), chunksize=1))


# --------------------------------------------------------------------------- markitdown


class _PeerWorker:
    """markitdown in ``.venv-bench``, one file per line over a pipe, killed and restarted on a hang."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        python = ROOT / ".venv-bench" / "bin" / "python"
        exe = str(python) if python.exists() else sys.executable
        return subprocess.Popen(
            [exe, "-m", "benchmarks.parsers_real", "--markitdown-worker"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )

    def convert(self, path: str) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        started = time.perf_counter()
        self.proc.stdin.write(path.encode() + b"\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], PEER_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            self.close()
            status = "timeout" if not ready else "crash"
            return {"status": status, "message": None, "text": "", "seconds": time.perf_counter() - started}
        return dict(json.loads(line))

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def _markitdown_serve() -> None:
    from markitdown import MarkItDown

    converter = MarkItDown(enable_plugins=False)
    for line in sys.stdin:
        path = line.rstrip("\n")
        started = time.perf_counter()
        try:
            res = {"status": "ok", "message": None, "text": converter.convert(path).text_content or ""}
        except Exception as exc:  # the peer's failures are counted, not fatal
            res = {"status": "typed", "message": f"{type(exc).__name__}: {exc}"[:300], "text": ""}
        res["seconds"] = time.perf_counter() - started
        sys.stdout.write(json.dumps(res) + "\n")
        sys.stdout.flush()


def markitdown_many(paths: Iterable[str]) -> list[dict[str, Any]]:
    worker = _PeerWorker()
    try:
        return [worker.convert(p) for p in paths]
    finally:
        worker.close()


# --------------------------------------------------------------------------- scoring


def _unescape_json(match: re.Match[str]) -> str:
    code = match.group(1)
    return chr(int(code[1:], 16)) if code[0] == "u" else (" " if code in "nrtbf" else code)


def peer_text(text: str, fmt: str = "") -> str:
    """markitdown's Markdown as text: what it adds that is not in the document taken out.

    Its HTML comments (``<!-- Slide number: 3 -->``), images (alt text is a shape's name such
    as "Picture 3"), link targets, emphasis markers, pandas' ``NaN``/``Unnamed: 2`` table
    fillers; for JSON, string escapes (``\\u062f``, ``\\n``); for Markdown and HTML, raw tags, script/style bodies and fenced code's info string; for a spreadsheet, its ``## Sheet1`` headings (a sheet's name is not its content);
    then its Markdown escapes are undone.
    """
    if fmt in _SPREADSHEETS:
        text = _MD_HEADING.sub("", text)
    text = _MD_IMAGE.sub(" ", _HTML_COMMENT.sub(" ", text))
    if fmt == "json":  # markitdown hands JSON back as written: its string escapes are not text
        text = _JSON_ESCAPE.sub(_unescape_json, text)
    if fmt in _MARKUP_FORMATS:
        text = _FENCE_INFO.sub(r"\1", _RAW_TAG.sub(" ", _RAW_SCRIPT.sub(" ", text)))
    text = _MD_EMPHASIS.sub("", _PANDAS_FILLER.sub("", _MD_TARGET.sub("]", text)))
    return _MD_ESCAPE.sub(r"\1", text)


def nonws(text: str) -> int:
    return sum(1 for c in text if not c.isspace())


def word_chars(text: str) -> int:
    return len(_WORD_CHAR.findall(text))


def coverage(ours: str, peer: str) -> float | None:
    """Share of the peer's word tokens (bag, lower case) found in ours; None if it has none."""
    want = Counter(t.lower() for t in _TOKEN.findall(peer))
    if not want:
        return None
    got = Counter(t.lower() for t in _TOKEN.findall(ours))
    return sum(min(n, got[t]) for t, n in want.items()) / sum(want.values())


# formats whose file is text to a reader: markitdown's copy of them is their text
_TEXT_FORMATS = frozenset({"txt", "md", "csv", "json", "html"})


def is_markup_echo(entry: Result, peer_raw: str, root: Path = REALDOCS) -> bool:
    """markitdown handed a markup file back as written (RTF, WordML named .doc): no text read."""
    if entry["format"] in _TEXT_FORMATS:
        return False
    if "{\\rtf" in peer_raw[:1000] or "\\pard" in peer_raw[:1000]:
        return True
    head = (root / entry["file"]).read_bytes()[:200].decode("utf-8", "replace").strip()
    return bool(head) and peer_raw.strip().startswith(head[:100])


def compare(entry: dict[str, Any], ours: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any] | None:
    """The file's problem record, or None when ours is fine next to markitdown."""
    md = (
        ""
        if peer["status"] != "ok" or is_markup_echo(entry, peer["text"])
        else peer_text(peer["text"], entry["format"])
    )
    cov = coverage(ours["text"], md)
    less = bool(word_chars(md)) and (
        word_chars(ours["text"]) < word_chars(md) or (cov is not None and cov < COVERAGE_GOAL)
    )
    if ours["status"] == "ok" and not less:
        return None
    if ours["status"] == "typed" and not less:
        return None
    return {
        "file": entry["file"],
        "format": entry["format"],
        "origin": f"{entry['origin']['repository']}:{entry['origin']['path']}",
        "ours": ours["status"] if ours["status"] != "typed" else f"typed {ours['code']}",
        "error": ours["message"],
        "ours_chars": nonws(ours["text"]),
        "md_chars": nonws(md),
        "ours_word_chars": word_chars(ours["text"]),
        "md_word_chars": word_chars(md),
        "coverage": None if cov is None else round(cov, 3),
        "encrypted": ours.get("code") == "encrypted",
    }


# --------------------------------------------------------------------------- run


def _peer_cached(entries: list[dict[str, Any]], root: Path) -> list[dict[str, Any]]:
    """markitdown's results, cached by file hash: the peer does not change between our runs."""
    cache_file = HERE / ".cache" / "parsers" / "realdocs-markitdown.json"
    cache: dict[str, Any] = json.loads(cache_file.read_text("utf-8")) if cache_file.exists() else {}
    todo = [e for e in entries if e["sha256"] not in cache]
    for entry, res in zip(todo, markitdown_many(str(root / e["file"]) for e in todo), strict=True):
        cache[entry["sha256"]] = res
    if todo:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        cache_file.write_text(json.dumps(cache), encoding="utf-8")
    return [cache[e["sha256"]] for e in entries]


def _format_row(fmt: str, pairs: list[Triple], problems: list[Result]) -> Result:
    ours = Counter(o["status"] for _, o, _ in pairs)
    peer = Counter(p["status"] for _, _, p in pairs)
    less = [p for p in problems if p["md_word_chars"] and not p["encrypted"] and p["format"] == fmt]
    less = [p for p in less if p["ours_word_chars"] < p["md_word_chars"] or (p["coverage"] or 1) < COVERAGE_GOAL]
    return {
        "format": fmt,
        "files": len(pairs),
        "ours ok/typed/untyped/timeout/crash": "/".join(
            str(ours[k]) for k in ("ok", "typed", "untyped", "timeout", "crash")
        ),
        "md ok/error/timeout": f"{peer['ok']}/{peer['typed'] + peer['crash']}/{peer['timeout']}",
        "ours chars": sum(nonws(o["text"]) for _, o, _ in pairs),
        "md chars": sum(nonws(peer_text(p["text"], fmt)) for e, _, p in pairs if not is_markup_echo(e, p["text"])),
        "files less than md": len(less),
        "ours s": round(sum(o["seconds"] for _, o, _ in pairs), 1),
        "md s": round(sum(p["seconds"] for _, _, p in pairs), 1),
    }


OURS_CACHE = HERE / ".cache" / "parsers" / "realdocs-ours.json"


def run(quick: bool = False, root: Path = REALDOCS) -> dict[str, Any]:
    if not (root / "manifest.json").exists():
        raise RuntimeError(f"no real-document corpus at {root} (see its README: ../shared/realdocs)")
    entries = load_manifest(root)
    if quick:  # a smoke run: the first three files of each format
        seen: Counter[str] = Counter()
        entries = [e for e in entries if (seen.update([e["format"]]) or seen[e["format"]] <= 3)]
    missing = load_present_parsers()  # before the pool forks, so its workers inherit the registry
    started = time.perf_counter()
    ours = parse_many([str(root / e["file"]) for e in entries], workers=min(2, os.cpu_count() or 1))
    run_info = {"wall_s": time.perf_counter() - started, "missing": missing}
    # kept so that a change of the scoring rules can be re-applied without parsing again (--rescore)
    OURS_CACHE.parent.mkdir(parents=True, exist_ok=True)
    OURS_CACHE.write_text(json.dumps({"run": run_info, "ours": ours, "quick": quick}), encoding="utf-8")
    return score(entries, ours, _peer_cached(entries, root), run_info)


def score(entries: list[Result], ours: list[Result], peer: list[Result], run_info: Result) -> Result:
    """The per-format rows, the summary and the per-file problems of one run."""
    problems = [p for e, o, m in zip(entries, ours, peer, strict=True) if (p := compare(e, o, m))]
    by_format: dict[str, list[Triple]] = {}
    for triple in zip(entries, ours, peer, strict=True):
        by_format.setdefault(triple[0]["format"], []).append(triple)
    rows = [_format_row(fmt, by_format[fmt], problems) for fmt in sorted(by_format)]
    bad = sum(1 for o in ours if o["status"] in ("untyped", "timeout", "crash"))
    less = sum(r["files less than md"] for r in rows)
    missing = run_info["missing"]
    summary = (
        f"{len(entries)} real files, ours in {run_info['wall_s']:.0f}s wall (2 processes, forked parses, "
        f"{TIME_BUDGET_S:g}s budget): {bad} untyped errors/timeouts/crashes (goal 0); {less} files where "
        f"markitdown extracted text and ours has fewer word characters or < {COVERAGE_GOAL:g} of its word tokens "
        "(goal 0; encrypted files aside)."
        + (f" Parser modules registered but absent (not measured): {', '.join(missing)}." if missing else "")
    )
    return {
        "title": "Parsers on real third-party documents vs markitdown",
        "peer": "markitdown 0.1.9",
        "rows": rows,
        "summary": summary,
        "problems": problems,
    }


def rescore(root: Path = REALDOCS) -> Result:
    """Score the last run's saved outcomes again (after a change of the scoring rules)."""
    saved = json.loads(OURS_CACHE.read_text("utf-8"))
    entries = load_manifest(root)
    if saved["quick"]:
        seen: Counter[str] = Counter()
        entries = [e for e in entries if (seen.update([e["format"]]) or seen[e["format"]] <= 3)]
    return score(entries, saved["ours"], _peer_cached(entries, root), saved["run"])


def report_markdown(result: dict[str, Any]) -> str:
    """The per-format table and per-file problem list, for engineers fixing parsers."""
    cols = list(result["rows"][0]) if result["rows"] else []
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in result["rows"]]
    lines += ["", result["summary"], ""]
    for kind, keep in (
        ("Untyped errors, timeouts, crashes", lambda p: p["ours"] in ("untyped", "timeout", "crash")),
        (
            "Less text than markitdown",
            lambda p: p["ours"] not in ("untyped", "timeout", "crash") and not p["encrypted"],
        ),
        ("Encrypted (aside)", lambda p: p["encrypted"]),
    ):
        chosen = sorted((p for p in result["problems"] if keep(p)), key=lambda p: p["file"])
        lines += [f"### {kind} ({len(chosen)})", ""]
        for p in chosen:
            cov = "n/a" if p["coverage"] is None else p["coverage"]
            lines.append(
                f"- `{p['file']}` ({p['origin']}): ours {p['ours']}, word chars {p['ours_word_chars']} vs md "
                f"{p['md_word_chars']}, token coverage {cov}" + (f"; error: {p['error']}" if p["error"] else "")
            )
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--markitdown-worker"]:
        _markitdown_serve()
    elif len(sys.argv) == 3 and sys.argv[1] in ("--report", "--rescore"):
        # --report: the last saved result as Markdown; --rescore: the last run scored again first
        out = HERE / "results" / "parsers_real.json"
        if sys.argv[1] == "--rescore":
            out.write_text(json.dumps(rescore(), indent=2), encoding="utf-8")
        Path(sys.argv[2]).write_text(report_markdown(json.loads(out.read_text("utf-8"))), encoding="utf-8")
    else:
        print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
