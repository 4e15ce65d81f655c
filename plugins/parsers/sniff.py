"""Content sniffers: tell formats apart by their bytes, not their names.

Magic sniffers (PDF, OOXML by main part, OLE compound files by stream names) always run first.
Text sniffers (HTML, JSON, JSON Lines, Markdown, CSV/TSV, plain text) run only when neither the
declared type nor the extension names a parser.
"""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile

from plugins.parsers.registry import BINARY_TYPES, register_sniffer

__all__ = ["DOCX", "OLE_ENCRYPTED", "PPTX", "XLSX", "sniff_binary", "sniff_text"]

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
DOC = "application/msword"
XLS = "application/vnd.ms-excel"
PPT = "application/vnd.ms-powerpoint"
# An OOXML file with a password is an OLE container holding "EncryptedPackage".
OLE_ENCRYPTED = "application/x-ole-encrypted"
OLE_OTHER = "application/x-ole-storage"

BINARY_TYPES.update({PDF, DOCX, XLSX, PPTX, DOC, XLS, PPT})

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_MAIN_PARTS = (
    ("word/document.xml", DOCX),
    ("xl/workbook.xml", XLSX),
    ("ppt/presentation.xml", PPTX),
)
_CT_MAIN = (
    ("wordprocessingml.document.main", DOCX),
    ("wordprocessingml.template.main", DOCX),
    ("spreadsheetml.sheet.main", XLSX),
    ("spreadsheetml.template.main", XLSX),
    ("ms-excel.sheet.macroEnabled.main", XLSX),
    ("presentationml.presentation.main", PPTX),
    ("presentationml.slideshow.main", PPTX),
)


def _utf16(name: str) -> bytes:
    return name.encode("utf-16-le")


@register_sniffer
def sniff_binary(data: bytes, file_name: str = "") -> str | None:
    head = data[:1024]
    if b"%PDF-" in head:
        return PDF
    if data.startswith(_OLE_MAGIC):
        # Directory entries hold stream names in UTF-16; a substring test is enough to route.
        if _utf16("EncryptedPackage") in data:
            return OLE_ENCRYPTED
        if _utf16("WordDocument") in data:
            return DOC
        if _utf16("Workbook") in data or _utf16("Book") in data:
            return XLS
        if _utf16("PowerPoint Document") in data:
            return PPT
        return OLE_OTHER
    if data.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return _sniff_zip(data, file_name)
    return None


_OOXML_EXT = {"docx": DOCX, "docm": DOCX, "dotx": DOCX, "xlsx": XLSX, "xlsm": XLSX, "pptx": PPTX, "ppsx": PPTX}


def _sniff_zip(data: bytes, file_name: str) -> str:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            names = set(zf.namelist())
            for part, media in _MAIN_PARTS:
                if part in names:
                    return media
            if "[Content_Types].xml" in names:
                ct = zf.read("[Content_Types].xml")[:65536].decode("utf-8", "ignore")
                for marker, media in _CT_MAIN:
                    if marker in ct:
                        return media
    except (zipfile.BadZipFile, OSError, ValueError, KeyError, EOFError):
        # Truncated archive: local file headers still name the parts, so route by them and
        # let the format's parser report the damage precisely.
        for part, media in _MAIN_PARTS:
            if part.encode() in data:
                return media
        # too damaged to tell: believe the name, and the parser reports the damage
        ext = file_name.rsplit(".", 1)[-1].lower() if "." in file_name else ""
        if ext in _OOXML_EXT:
            return _OOXML_EXT[ext]
    return "application/zip"


# --------------------------------------------------------------------------- text

_HTML_START = re.compile(
    rb"^\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)\b", re.I | re.S
)
_HTML_ANY = re.compile(rb"<(?:html|head|body|div|p|table|meta|title|script)\b[^>]*>", re.I)
_MD_LINE = re.compile(r"^(?:#{1,6}\s+\S|```|~~~|\s*[-*+]\s+\S|\s*\d+\.\s+\S|>\s|\|.*\|\s*$|---\s*$)", re.M)
_MD_INLINE = re.compile(r"\[[^\]]+\]\([^)]+\)|\*\*[^*]+\*\*|`[^`]+`")


def _is_binary(sample: bytes) -> bool:
    if sample.startswith((b"\xff\xfe", b"\xfe\xff")):
        return False
    return b"\x00" in sample


@register_sniffer(text=True)
def sniff_text(data: bytes, file_name: str = "") -> str | None:
    sample = data[:65536]
    if not sample.strip() or _is_binary(sample[:8192]):
        return None
    if _HTML_START.match(sample) or len(_HTML_ANY.findall(sample[:4096])) >= 3:
        return "text/html"
    text = sample.decode("utf-8", errors="replace").lstrip("\ufeff")
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        kind = _json_kind(data, text)
        if kind:
            return kind
    if len(_MD_LINE.findall(text)) + len(_MD_INLINE.findall(text)) >= 3 and _MD_LINE.search(text):
        return "text/markdown"
    delim = _csv_delimiter(text)
    if delim:
        return "text/tab-separated-values" if delim == "\t" else "text/csv"
    return "text/plain"


def _json_kind(data: bytes, text: str) -> str | None:
    if len(data) <= 65536:
        try:
            json.loads(data.decode("utf-8", errors="replace").lstrip("\ufeff"))
            return "application/json"
        except (ValueError, RecursionError):
            pass
    lines = [line for line in text.splitlines()[:50] if line.strip()]
    if len(data) > 65536:
        lines = lines[:-1]  # the sample may cut the last line in half
    if len(lines) >= 2 or (len(data) > 65536 and lines):
        try:
            if all(isinstance(json.loads(line), dict | list) for line in lines):
                return "application/x-ndjson"
        except (ValueError, RecursionError):
            pass
    if len(data) > 65536 and text.lstrip()[:1] in ("{", "["):
        return "application/json"  # too big to prove here; the JSON parser reports if it is not
    return None


def _csv_delimiter(text: str) -> str | None:
    lines = [line for line in text.splitlines()[:30] if line.strip()]
    if len(lines) < 2:
        return None
    try:
        dialect = csv.Sniffer().sniff("\n".join(lines), delimiters=",\t;|")
    except csv.Error:
        return None
    rows = list(csv.reader(io.StringIO("\n".join(lines)), dialect))
    widths = {len(r) for r in rows}
    # every line with the same number (>= 2) of fields: tabular, not prose with commas
    if len(widths) == 1 and widths.pop() >= 2:
        return dialect.delimiter
    return None
