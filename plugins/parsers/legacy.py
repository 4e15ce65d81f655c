"""Legacy Office formats (.doc / .xls / .ppt): converted to OOXML by LibreOffice, then parsed.

OLE compound files, and BIFF2-4 worksheets, which are bare BIFF record streams (Excel 2-4
wrote no OLE container; the sniffer routes their BOF record here as ``.xls``). Without
``soffice`` on the machine the document fails with ``unsupported`` and a reason that says so.
Password-protected OOXML files are OLE containers too ("EncryptedPackage") and fail with
``encrypted``; so do password-protected binary files, found before LibreOffice is started
(which only says it could not convert them): an ``.xls`` whose workbook globals hold a FilePass
record ([MS-XLS] 2.4.117), a ``.ppt`` with an "EncryptedSummary" stream ([MS-PPT] 2.1.3), a
``.doc`` whose FIB has fEncrypted set ([MS-DOC] 2.5.2). The conversion runs in its own process group under the document's time
budget and is killed whole when it overruns.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import struct
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import olefile

from include.contract import ParsedDocument, ParseError, ParseErrorCode
from plugins.parsers._common import Deadline, Limits
from plugins.parsers.registry import ParseContext, get_parser, register_parser
from plugins.parsers.sniff import DOC, DOCX, OLE_ENCRYPTED, OLE_OTHER, PPT, PPTX, XLS, XLSX

__all__ = ["convert_with_libreoffice", "parse_legacy"]

_TARGETS = {DOC: ("docx", DOCX), XLS: ("xlsx", XLSX), PPT: ("pptx", PPTX)}
_EXT = {DOC: "doc", XLS: "xls", PPT: "ppt"}
# LibreOffice locks its profile, and its first start in a new profile is the slow one (seconds).
# Profiles are slots shared by every process of this user: a conversion takes the first slot
# whose lock is free (flock, released by the kernel when a process dies), so there are as many
# warm profiles as conversions ever ran at once, forked parser children included (a profile per
# pid gave each child a cold one, and a child leaving by os._exit never removed it).
_MAX_PROFILE_SLOTS = 64


@contextlib.contextmanager
def _profile_slot() -> Iterator[Path]:
    base = Path(tempfile.gettempdir())
    for slot in range(_MAX_PROFILE_SLOTS):
        lock = open(base / f"tributary-lo-profile-{os.getuid()}-{slot}.lock", "a")  # noqa: SIM115 - held while converting
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        try:
            yield base / f"tributary-lo-profile-{os.getuid()}-{slot}"
        finally:
            lock.close()  # closing the descriptor releases the lock
        return
    raise ParseError(ParseErrorCode.TIMEOUT, f"all {_MAX_PROFILE_SLOTS} LibreOffice profiles are busy")


def convert_with_libreoffice(data: bytes, src_ext: str, target_ext: str, timeout: float) -> bytes:
    """Convert ``data`` with headless LibreOffice; raises ParseError on failure or timeout."""
    if timeout <= 0:  # an embedded file met after its document's budget is spent starts no converter
        raise ParseError(ParseErrorCode.TIMEOUT, f"no time left of the budget to convert the .{src_ext} file")
    soffice = shutil.which("soffice") or shutil.which("libreoffice")
    if soffice is None:
        raise ParseError(
            ParseErrorCode.UNSUPPORTED, f"legacy format .{src_ext}: LibreOffice (soffice) is not installed"
        )
    with _profile_slot() as profile, tempfile.TemporaryDirectory(prefix="tributary-conv-") as tmp:
        src = Path(tmp) / f"input.{src_ext}"
        src.write_bytes(data)
        cmd = [
            soffice,
            "--headless",
            "--norestore",
            "--nologo",
            "--nolockcheck",
            f"-env:UserInstallation={profile.as_uri()}",
            "--convert-to",
            target_ext,
            "--outdir",
            tmp,
            str(src),
        ]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(timeout=timeout)  # what is left of the document's one budget, no more
        except subprocess.TimeoutExpired as exc:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise ParseError(ParseErrorCode.TIMEOUT, f"LibreOffice conversion exceeded {timeout:.0f}s") from exc
        out = Path(tmp) / f"input.{target_ext}"
        if not out.exists() or out.stat().st_size == 0:
            raise ParseError(ParseErrorCode.CORRUPT, f"LibreOffice could not convert the .{src_ext} file")
        return out.read_bytes()


@register_parser(
    "legacy-office", "1.0", (DOC, XLS, PPT, OLE_ENCRYPTED, OLE_OTHER), ("doc", "xls", "ppt", "dot", "xlt", "pot")
)
def parse_legacy(data: bytes, ctx: ParseContext) -> ParsedDocument:
    media = ctx.media_type or ""
    if media == OLE_ENCRYPTED:
        raise ParseError(ParseErrorCode.ENCRYPTED, "password-protected Office document")
    if media not in _TARGETS:
        raise ParseError(ParseErrorCode.UNSUPPORTED, "OLE compound file of an unknown kind")
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    if _password_protected(data, media):
        raise ParseError(ParseErrorCode.ENCRYPTED, f"password-protected {_EXT[media]} document")
    deadline = Deadline(limits.time_budget_s)
    target_ext, target_type = _TARGETS[media]
    converted = convert_with_libreoffice(data, _EXT[media], target_ext, deadline.remaining)
    spec = get_parser(target_type)
    if spec is None:  # pragma: no cover - the OOXML parsers are built in
        raise ParseError(ParseErrorCode.UNSUPPORTED, f"no parser for {target_type}")
    options = dict(ctx.options)
    options["time_budget_s"] = max(deadline.remaining, 1.0)
    doc = spec.fn(converted, ParseContext(ctx.file_name, target_type, ctx.declared_type, ctx.url, options))
    doc.metadata["converted_from"] = media
    return doc


_FILEPASS = 0x002F
_BIFF_EOF = 0x000A
# records looked at in the workbook globals: FilePass follows BOF at once when present
_GLOBALS_RECORDS = 64
_FIB_FLAGS = 0x0A
_FIB_ENCRYPTED = 0x0100


def _password_protected(data: bytes, media: str) -> bool:
    """Whether an OLE ``.doc``/``.xls``/``.ppt`` says it is encrypted (a damaged one: not known, False)."""
    if not data.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
        return False  # a BIFF2-4 file: its FilePass would be in the bare record stream
    with contextlib.suppress(Exception), olefile.OleFileIO(data) as ole:  # a damaged directory
        names = {entry[0].lower(): entry[0] for entry in ole.listdir(streams=True) if len(entry) == 1}
        if media == PPT:
            return "encryptedsummary" in names
        if media == XLS:
            stream = names.get("workbook") or names.get("book")
            return stream is not None and _has_filepass(ole.openstream(stream).read(1 << 16))
        if media == DOC and "worddocument" in names:
            fib = ole.openstream(names["worddocument"]).read(_FIB_FLAGS + 2)
            return len(fib) == _FIB_FLAGS + 2 and bool(struct.unpack_from("<H", fib, _FIB_FLAGS)[0] & _FIB_ENCRYPTED)
    return False


def _has_filepass(stream: bytes) -> bool:
    pos = 0
    for _ in range(_GLOBALS_RECORDS):
        if pos + 4 > len(stream):
            return False
        record, length = struct.unpack_from("<HH", stream, pos)
        if record == _FILEPASS:
            return True
        if record == _BIFF_EOF:
            return False
        pos += 4 + length
    return False
