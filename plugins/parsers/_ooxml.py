"""Shared OOXML (docx/xlsx/pptx) package handling: safe zip opening and relationship repair."""

from __future__ import annotations

import io
import posixpath
import zipfile
from collections.abc import Callable

from lxml import etree

from include.contract import ParseError, ParseErrorCode
from plugins.parsers._common import Limits, safe_xml_parser
from plugins.parsers._zip import refuse_crowded_directory

__all__ = [
    "charge_xml_parts",
    "check_zip",
    "content_types",
    "is_xml_part",
    "part_content_type",
    "repair_relationships",
    "xml_content_types",
    "xml_error",
]

_RELS_NS = "http://schemas.openxmlformats.org/package/2006/relationships"
_MIN_BOMB_MEMBER = 8 * 1024 * 1024


def check_zip(data: bytes, limits: Limits, what: str) -> zipfile.ZipFile:
    """Open the package, refusing damaged archives and bombs before any library reads it.

    Declared sizes are enough: :mod:`zipfile` never inflates a member past its declared size,
    so a member that lies about it fails its CRC check instead of filling memory. The entry
    count is checked from the archive's own end record and directory headers first
    (:mod:`plugins.parsers._zip`): :mod:`zipfile` builds an object per entry as it opens one.
    """
    refuse_crowded_directory(data, limits.zip_max_entries, what)
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
    # the ratio over the whole package too: many members each just under the per-member
    # threshold (sixty 8 MiB headers) are one bomb, even where the libraries read them as blobs
    packed = sum(info.compress_size for info in infos)
    if total > _MIN_BOMB_MEMBER and total > limits.zip_max_ratio * max(packed, 1):
        raise ParseError(
            ParseErrorCode.BOMB, f"{what}: {len(infos)} members expand {total / max(packed, 1):.0f}x together"
        )
    return zf


_CT_NS = "{http://schemas.openxmlformats.org/package/2006/content-types}"


def content_types(zf: zipfile.ZipFile, limits: Limits) -> tuple[dict[str, str], dict[str, str]]:
    """``(content type by extension, content type by part name)`` from ``[Content_Types].xml``.

    Keys are lower case, part names without the leading ``/`` (OPC, ECMA-376 Part 2, 10.1.2).
    """
    try:
        info = zf.getinfo("[Content_Types].xml")
    except KeyError:
        return {}, {}
    if info.file_size > limits.xml_max_total:
        raise ParseError(ParseErrorCode.BOMB, f"[Content_Types].xml of {info.file_size} bytes")
    try:
        root = etree.fromstring(zf.read(info), safe_xml_parser())
    except (etree.XMLSyntaxError, zipfile.BadZipFile, OSError, ValueError, EOFError):
        return {}, {}
    defaults: dict[str, str] = {}
    overrides: dict[str, str] = {}
    for el in root:
        content_type = (el.get("ContentType") or "").strip()
        if el.tag == f"{_CT_NS}Default":
            defaults[(el.get("Extension") or "").lower()] = content_type
        elif el.tag == f"{_CT_NS}Override":
            overrides[(el.get("PartName") or "").lstrip("/").lower()] = content_type
    return defaults, overrides


def part_content_type(name: str, defaults: dict[str, str], overrides: dict[str, str]) -> str | None:
    """The content type a part has: its override, else its extension's default."""
    key = name.lower().lstrip("/")
    if key in overrides:
        return overrides[key]
    ext = key.rsplit(".", 1)[-1] if "." in key.rsplit("/", 1)[-1] else ""
    return defaults.get(ext)


def xml_content_types(zf: zipfile.ZipFile, limits: Limits) -> tuple[dict[str, bool], dict[str, bool]]:
    """``(defaults by extension, overrides by part name)``: is that part's content type XML?

    The libraries choose a part's parser by content type, not by name, so an XML header stored
    as ``header1.png`` (with an override saying so) is still parsed as XML.
    """
    defaults, overrides = content_types(zf, limits)
    return (
        {k: v.lower().endswith("xml") for k, v in defaults.items()},
        {k: v.lower().endswith("xml") for k, v in overrides.items()},
    )


def is_xml_part(name: str, defaults: dict[str, bool], overrides: dict[str, bool]) -> bool:
    key = name.lower()
    if key in overrides:
        return overrides[key]
    ext = key.rsplit(".", 1)[-1] if "." in key.rsplit("/", 1)[-1] else ""
    return defaults.get(ext, ext in ("xml", "rels"))


def charge_xml_parts(
    zf: zipfile.ZipFile, limits: Limits, what: str, skip: Callable[[str], bool] = lambda name: False
) -> int:
    """Sum the decompressed size of every XML part the package library will parse into a tree.

    python-docx and python-pptx parse each XML part when they open a package, so the parts
    count *together* against ``xml_max_total``: sixty 8 MiB headers pass a per-part ratio test
    one by one and still make gigabytes of lxml nodes. ``skip`` names parts read as streams
    (worksheets). Returns the total charged.
    """
    defaults, overrides = xml_content_types(zf, limits)
    total = 0
    for info in zf.infolist():
        if not is_xml_part(info.filename, defaults, overrides) or skip(info.filename):
            continue
        total += info.file_size
        if total > limits.xml_max_total:
            raise ParseError(
                ParseErrorCode.BOMB,
                f"{what}: XML parts expand beyond {limits.xml_max_total} bytes together "
                f"(limit xml_max_total; at {info.filename})",
            )
    return total


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
