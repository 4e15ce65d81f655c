"""Strict OOXML (ISO/IEC 29500 Strict) packages read as Transitional ones.

python-docx, openpyxl and python-pptx know only the Transitional namespaces
(``http://schemas.openxmlformats.org/...``): a Strict package's main part hangs off a
relationship of type ``http://purl.oclc.org/ooxml/officeDocument/relationships/officeDocument``,
which python-docx reports as ``KeyError: no relationship of type ...`` and openpyxl as a
workbook with no sheets. ISO/IEC 29500-1:2016 Annex A lists the Strict namespaces; each is its
Transitional twin under another root (``purl.oclc.org/ooxml/<family>/<name>`` for
``schemas.openxmlformats.org/<family>/2006/<name>``), with two names spelled differently
(``extendedProperties`` / ``extended-properties`` and ``customProperties`` /
``custom-properties``), and the relationship types follow the same rule (Part 1, 15.2). The
OPC namespaces (content types, package relationships, core properties) are the same in both.

So a Strict package is rewritten, part by part, into a copy whose XML parts carry the
Transitional URIs; the element vocabulary the parsers read (paragraphs, runs, cells, shapes) is
the same in both conformance classes. Only XML parts are rewritten, streamed in chunks (a
worksheet is never held whole), and only packages whose relationships say they are Strict.
"""

from __future__ import annotations

import io
import re
import zipfile

from include.contract import ParseError, ParseErrorCode
from plugins.parsers._common import Deadline, Limits
from plugins.parsers._ooxml import is_xml_part, xml_content_types

__all__ = ["is_strict", "to_transitional"]

_STRICT_ROOT = b"http://purl.oclc.org/ooxml/"
# purl.oclc.org/ooxml/<family>/<name>[/<relationship type>]
_STRICT_URI = re.compile(rb"http://purl\.oclc\.org/ooxml/([A-Za-z]+)/([A-Za-z]+)(/[A-Za-z]+)?")
# Annex A names that differ beyond the root (namespaces and relationship types alike)
_RENAMED = {b"extendedProperties": b"extended-properties", b"customProperties": b"custom-properties"}
_CHUNK = 1 << 20


def _transitional(match: re.Match[bytes]) -> bytes:
    family, name, tail = match.group(1), match.group(2), match.group(3) or b""
    if tail:
        tail = b"/" + _RENAMED.get(tail[1:], tail[1:])
    return b"http://schemas.openxmlformats.org/" + family + b"/2006/" + _RENAMED.get(name, name) + tail


def is_strict(zf: zipfile.ZipFile) -> bool:
    """Whether the package's root relationships use the Strict relationship types."""
    try:
        info = zf.getinfo("_rels/.rels")
    except KeyError:
        return False
    if info.file_size > 1 << 20:  # a root .rels lists a handful of parts
        return False
    try:
        return _STRICT_ROOT in zf.read(info)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return False


def _rewrite_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dst: zipfile.ZipFile, deadline: Deadline) -> None:
    """Copy one XML part with its Strict URIs replaced, a megabyte at a time.

    A namespace URI sits inside a tag, so cutting each chunk after its last ``<`` never splits
    one; the bytes after that ``<`` wait for the next chunk.
    """
    with zf.open(info) as src, dst.open(_copy_info(info), "w") as out:
        carry = b""
        while chunk := src.read(_CHUNK):
            deadline.check("strict ooxml")
            buf = carry + chunk
            cut = buf.rfind(b"<")
            if cut <= 0 or len(buf) - cut > _CHUNK:  # no tag start to cut at: an odd part, as is
                cut = len(buf)
            out.write(_STRICT_URI.sub(_transitional, buf[:cut]))
            carry = buf[cut:]
        out.write(_STRICT_URI.sub(_transitional, carry))


def _copy_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dst: zipfile.ZipFile, deadline: Deadline) -> None:
    with zf.open(info) as src, dst.open(_copy_info(info), "w") as out:
        while chunk := src.read(_CHUNK):
            deadline.check("strict ooxml")
            out.write(chunk)


def _copy_info(info: zipfile.ZipInfo) -> zipfile.ZipInfo:
    copy = zipfile.ZipInfo(info.filename, date_time=info.date_time)
    copy.compress_type = zipfile.ZIP_DEFLATED
    copy.external_attr = info.external_attr
    return copy


def to_transitional(
    data: bytes, zf: zipfile.ZipFile, limits: Limits, deadline: Deadline, what: str
) -> tuple[bytes, zipfile.ZipFile]:
    """``(data, zf)`` unchanged for a Transitional package, else a Transitional copy of it.

    The package has passed :func:`._ooxml.check_zip` (entry count, sizes, ratios) before this
    runs, so copying it costs at most what those caps allow.
    """
    if not is_strict(zf):
        return data, zf
    defaults, overrides = xml_content_types(zf, limits)
    out = io.BytesIO()
    try:
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                if is_xml_part(info.filename, defaults, overrides) or info.filename == "[Content_Types].xml":
                    _rewrite_member(zf, info, dst, deadline)
                else:
                    _copy_member(zf, info, dst, deadline)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"{what}: damaged zip member ({exc})") from exc
    converted = out.getvalue()
    return converted, zipfile.ZipFile(io.BytesIO(converted))
