"""Every real third-party document in ``../shared/realdocs`` parses without a bug showing.

670 files from other projects' public test suites (``manifest.json`` there names each one's
format and origin; never copied into this repository). Each is parsed through the registry's
single entry point in a forked child (``isolate``), under the default :class:`Limits` (its
time budget and the isolated parser's memory cap, as a worker runs them), in a pool of two
processes. The benchmark uses a 30 s budget to flag slow files; here a timeout means a hang.

The property, per file: the outcome is a document or a *typed* ``ParseError``. It fails on

* an exception other than ``ParseError`` escaping ``parse_document``;
* ``corrupt`` whose message names a Python exception that signals a bug rather than a bad
  file (``KeyError``, ``AttributeError``, ``TypeError``, ``IndexError`` ... the list and the
  reasons are :data:`benchmarks.parsers_real.BUG_EXCEPTIONS`): the registry turns anything a
  parser let escape into ``corrupt: <parser>: <ExceptionName>: ...``;
* a crash of the parser process, or a timeout.

Files known to be unreadable are listed in :data:`EXPECTED` with the typed code(s) they must
give and why, rather than being skipped. How much text each file yields next to markitdown is
the benchmark's business (``python -m benchmarks parsers --real``), not this test's.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from benchmarks.parsers_real import BUG_EXCEPTIONS, classify, load_manifest, parse_many
from plugins.parsers._common import Limits

REALDOCS = Path(__file__).resolve().parents[2].parent / "shared" / "realdocs"
pytestmark = pytest.mark.skipif(
    not (REALDOCS / "manifest.json").exists(),
    reason=f"no real-document corpus at {REALDOCS} (a checkout beside ../shared/realdocs has one)",
)
FORMATS = (
    "csv",
    "doc",
    "docx",
    "epub",
    "html",
    "json",
    "md",
    "odp",
    "ods",
    "odt",
    "pdf",
    "ppt",
    "pptx",
    "rtf",
    "txt",
    "xls",
    "xlsx",
)
# read through LibreOffice: without soffice they can only be refused, which says nothing
NEEDS_SOFFICE = frozenset({"doc", "xls", "ppt"})
_PASSWORD = "password-protected: no reader opens it without the password"
_LEGACY_PASSWORD = (
    "password-protected legacy Office file: `encrypted` is right; LibreOffice's conversion fails on it, "
    "so the legacy reader reports `corrupt` until it detects the FILEPASS/encryption record itself"
)
# file -> (the typed codes it may give, why); anything not listed only has to avoid bugs
EXPECTED: dict[str, tuple[tuple[str, ...], str]] = {
    "pdf/0497_rc4-128.pdf": (("encrypted",), _PASSWORD + " (RC4-128, user password set)"),
    "pdf/0511_encrypted-file.pdf": (("encrypted",), _PASSWORD),
    "pdf/0570_r4-aes-user-password.pdf": (("encrypted",), _PASSWORD + " (R4 AES, user password set)"),
    "pdf/0589_r4-user-password.pdf": (("encrypted",), _PASSWORD + " (R4 RC4, user password set)"),
    "pdf/0599_password-example.pdf": (("encrypted",), _PASSWORD),
    "xlsx/0834_protect.xlsx": (("encrypted",), _PASSWORD + " (an OLE EncryptedPackage, not a zip)"),
    "xlsx/0840_password_protected.xlsx": (("encrypted",), _PASSWORD + " (an OLE EncryptedPackage)"),
    "xlsx/0864_testEXCEL_protected_passtika.xlsx": (("encrypted",), _PASSWORD + " (an OLE EncryptedPackage)"),
    "xlsx/0876_testEXCEL_protected_passtika_2.xlsx": (("encrypted",), _PASSWORD + " (an OLE EncryptedPackage)"),
    "xls/0814_password.xls": (("encrypted", "corrupt"), _LEGACY_PASSWORD),
    "xls/0823_testEXCEL_protected_passtika.xls": (("encrypted", "corrupt"), _LEGACY_PASSWORD),
    "ppt/0642_testPPT_protected_passtika.ppt": (("encrypted", "corrupt"), _LEGACY_PASSWORD),
    "doc/0068_testWordPerfect_42.doc": (
        ("unsupported",),
        "a WordPerfect 4.2 file named .doc: no parser reads WordPerfect (markitdown neither)",
    ),
}


@pytest.fixture(scope="module")
def manifest() -> list[dict[str, Any]]:
    return load_manifest(REALDOCS)


def _problem(entry: dict[str, Any], result: dict[str, Any]) -> str | None:
    where = f"{entry['file']} (from {entry['origin']['repository']}:{entry['origin']['path']})"
    if result["status"] in ("untyped", "timeout", "crash"):
        return f"{where}: {result['status']}: {result['code']}: {result['message']}"
    expected = EXPECTED.get(entry["file"])
    if expected is not None and result["code"] not in expected[0]:
        got = "parsed" if result["status"] == "ok" else f"typed {result['code']}: {result['message']}"
        return f"{where}: expected {'/'.join(expected[0])} ({expected[1]}), got {got}"
    return None


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_real_file_parses_or_fails_typed(fmt: str, manifest: list[dict[str, Any]]) -> None:
    if fmt in NEEDS_SOFFICE and shutil.which("soffice") is None:
        pytest.skip(f".{fmt} is read through LibreOffice and soffice is not installed")
    entries = [e for e in manifest if e["format"] == fmt]
    assert entries, f"the manifest lists no {fmt} file"
    budget = Limits().time_budget_s
    results = parse_many([str(REALDOCS / e["file"]) for e in entries], workers=2, budget=budget)
    problems = [p for e, r in zip(entries, results, strict=True) if (p := _problem(e, r))]
    assert not problems, f"{len(problems)} of {len(entries)} {fmt} files:\n" + "\n".join(problems)


def test_expected_failures_name_files_in_the_manifest(manifest: list[dict[str, Any]]) -> None:
    listed = {e["file"]: e["format"] for e in manifest}
    assert sorted(set(EXPECTED) - set(listed)) == []
    assert {listed[f] for f in EXPECTED} <= set(FORMATS)
    assert sorted({e["format"] for e in manifest}) == sorted(FORMATS)


@pytest.mark.parametrize(
    ("code", "message", "outcome"),
    [
        ("encrypted", "pdf: password required", "typed"),
        ("corrupt", "xlsx: File is not a zip file", "typed"),
        ("corrupt", "docx: KeyError: \"no relationship of type '…/officeDocument'\"", "untyped"),
        ("corrupt", "pptx: AttributeError: 'NoneType' object has no attribute 'text'", "untyped"),
        ("corrupt", "cannot identify 'a.csv': ModuleNotFoundError: No module named 'x'", "untyped"),
        ("corrupt", "pdf: parser process died (signal SIGSEGV)", "crash"),
        ("timeout", "pdf: no result within the 30s time budget", "timeout"),
        ("bomb", "xlsx: needs more than its memory limit of 1024 MiB", "typed"),
    ],
)
def test_the_rule_that_tells_a_bug_from_a_bad_file(code: str, message: str, outcome: str) -> None:
    assert classify(code, message) == outcome


def test_bug_exceptions_are_exception_names() -> None:
    import builtins

    assert all(issubclass(getattr(builtins, name), BaseException) for name in BUG_EXCEPTIONS)
