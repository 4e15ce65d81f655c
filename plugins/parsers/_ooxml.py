"""Shared OOXML (docx/xlsx/pptx) package handling: safe zip opening and relationship repair."""

from __future__ import annotations

import io
import posixpath
import zipfile

from lxml import etree

from include.contract import ParseError, ParseErrorCode
from plugins.parsers._common import Limits, safe_xml_parser

__all__ = ["check_zip", "repair_relationships", "xml_error"]

_RELS_NS = "http://schemas.openxmlformats.org/package/2006/relationships"
_MIN_BOMB_MEMBER = 8 * 1024 * 1024


def check_zip(data: bytes, limits: Limits, what: str) -> zipfile.ZipFile:
    """Open the package, refusing damaged archives and bombs before any library reads it.

    Declared sizes are enough: :mod:`zipfile` never inflates a member past its declared size,
    so a member that lies about it fails its CRC check instead of filling memory.
    """
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        infos = zf.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"{what}: damaged or truncated zip ({exc})") from exc
    if len(infos) > limits.zip_max_entries:
        raise ParseError(ParseErrorCode.BOMB, f"{what}: {len(infos)} zip entries (limit {limits.zip_max_entries})")
    total = 0
    for info in infos:
        total += info.file_size
        if total > limits.zip_max_uncompressed:
            raise ParseError(
                ParseErrorCode.BOMB, f"{what}: uncompressed size exceeds {limits.zip_max_uncompressed} bytes"
            )
        if info.file_size > _MIN_BOMB_MEMBER and info.file_size > limits.zip_max_ratio * max(info.compress_size, 1):
            raise ParseError(
                ParseErrorCode.BOMB,
                f"{what}: member {info.filename} expands {info.file_size / max(info.compress_size, 1):.0f}x",
            )
        if info.flag_bits & 0x1:
            raise ParseError(ParseErrorCode.ENCRYPTED, f"{what}: encrypted zip member {info.filename}")
    return zf


def repair_relationships(data: bytes, zf: zipfile.ZipFile) -> bytes:
    """Drop internal relationships whose target part is missing (``NULL``, ``../NULL`` ...).

    Some generators write such relationships; python-docx and openpyxl then refuse the whole
    file. Removing the dangling relationship loses nothing, since the target never existed.
    Returns the original bytes when nothing needed repair.
    """
    names = set(zf.namelist())
    fixed: dict[str, bytes] = {}
    for name in names:
        if not name.endswith(".rels"):
            continue
        try:
            root = etree.fromstring(zf.read(name), safe_xml_parser())
        except (etree.XMLSyntaxError, zipfile.BadZipFile, OSError, ValueError):
            continue
        # "word/_rels/document.xml.rels" describes "word/document.xml": targets are relative to "word/"
        base = posixpath.dirname(posixpath.dirname(name))
        changed = False
        for rel in list(root):
            if rel.get("TargetMode") == "External":
                continue
            target = rel.get("Target") or ""
            resolved = (
                target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(base, target))
            )
            if target.upper().endswith("NULL") or resolved not in names:
                root.remove(rel)
                changed = True
        if changed:
            fixed[name] = etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)
    if not fixed:
        return data
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in zf.infolist():
            dst.writestr(info, fixed.get(info.filename) or zf.read(info.filename))
    return out.getvalue()


def xml_error(exc: Exception, what: str) -> ParseError:
    """Map an XML failure inside a package to a typed error (deep nesting is a bomb)."""
    msg = str(exc)
    low = msg.lower()
    code = ParseErrorCode.BOMB if ("depth" in low or "nest" in low or "huge" in low) else ParseErrorCode.CORRUPT
    return ParseError(code, f"{what}: {msg}")
