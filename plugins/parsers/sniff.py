"""Content sniffers: tell formats apart by their bytes, not their names.

Magic sniffers (PDF, OOXML by main part, OLE compound files by stream names) always run first.
Text sniffers (HTML, JSON, JSON Lines, Markdown, CSV/TSV, plain text) run only when neither the
declared type nor the extension names a parser.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import struct
import zipfile

import olefile

from plugins.parsers.registry import BINARY_TYPES, get_parser, register_sniffer

__all__ = [
    "DOCX",
    "EPUB",
    "IMAGE_TYPES",
    "MHTML",
    "ODP",
    "ODS",
    "ODT",
    "OLE_ENCRYPTED",
    "PPTX",
    "RTF",
    "XLSX",
    "sniff_binary",
    "sniff_text",
]

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
EPUB = "application/epub+zip"
ODT = "application/vnd.oasis.opendocument.text"
ODS = "application/vnd.oasis.opendocument.spreadsheet"
ODP = "application/vnd.oasis.opendocument.presentation"
RTF = "application/rtf"
# RFC 2557 web archives (.mht / .mhtml): a MIME message whose root is multipart/related
MHTML = "multipart/related"
PNG = "image/png"
JPEG = "image/jpeg"
TIFF = "image/tiff"
GIF = "image/gif"
BMP = "image/bmp"
WEBP = "image/webp"
IMAGE_TYPES = (PNG, JPEG, TIFF, GIF, BMP, WEBP)

BINARY_TYPES.update({PDF, DOCX, XLSX, PPTX, DOC, XLS, PPT, EPUB, ODT, ODS, ODP, *IMAGE_TYPES})

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


_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", PNG),
    (b"\xff\xd8\xff", JPEG),
    (b"II*\x00", TIFF),
    (b"MM\x00*", TIFF),
    (b"GIF87a", GIF),
    (b"GIF89a", GIF),
)
# RFC 2557: the archive's own header block, naming multipart/related, comes before the first
# blank line; MIME-Version or From opens it (what browsers and Word write)
_MHTML_HEAD = re.compile(rb"^(?:[!-9;-~]+:[^\r\n]*\r?\n(?:[ \t][^\r\n]*\r?\n)*)+", re.S)
_MULTIPART_RELATED = re.compile(rb"content-type:\s*multipart/related", re.I)


@register_sniffer
def sniff_binary(data: bytes, file_name: str = "") -> str | None:
    head = data[:1024]
    if b"%PDF-" in head:
        return PDF
    if data.startswith(_OLE_MAGIC):
        return _sniff_ole(data)
    if data.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return _sniff_zip(data, file_name)
    for magic, media in _IMAGE_MAGIC:
        if data.startswith(magic):
            return media
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return WEBP
    if data.lstrip(b"\xef\xbb\xbf \t\r\n")[:5] == b"{\\rtf":
        return RTF
    if _is_biff2_to_4(data):
        return XLS
    return _sniff_mhtml(head)


# Top-level stream names of OLE compound files by kind. Names compare case-insensitively
# ([MS-CFB] 2.6.4: directory names compare without case), and only the root storage's own
# streams count: an .xls with an embedded Word document holds "WordDocument" in a sub-storage.
_OLE_ROOT_STREAMS = (
    ("encryptedpackage", OLE_ENCRYPTED),
    ("worddocument", DOC),
    ("workbook", XLS),
    ("book", XLS),
    ("powerpoint document", PPT),
)


def _sniff_ole(data: bytes) -> str:
    names = _ole_root_names(data)
    for stream, media in _OLE_ROOT_STREAMS:
        if stream in names:
            return media
    return OLE_OTHER


def _ole_root_names(data: bytes) -> set[str]:
    """Lower-cased names of the root storage's entries; from a byte scan when the directory is damaged."""
    with contextlib.suppress(Exception), olefile.OleFileIO(data) as ole:  # a damaged or hostile directory
        return {entry[0].lower() for entry in ole.listdir(streams=True, storages=True) if len(entry) == 1}
    lowered = data.lower()
    return {stream for stream, _ in _OLE_ROOT_STREAMS if _utf16(stream) in lowered}


def _is_biff2_to_4(data: bytes) -> bool:
    """A BIFF2-4 worksheet or workbook: a bare BOF record, not inside an OLE file (pre-Excel 5)."""
    if len(data) < 8:
        return False
    record, length, _version, kind = struct.unpack_from("<HHHH", data)
    return record in (0x0009, 0x0209, 0x0409) and length in (4, 6, 8) and kind in (0x10, 0x20, 0x40, 0x100)


def _sniff_mhtml(head: bytes) -> str | None:
    block = _MHTML_HEAD.match(head)
    if block and _MULTIPART_RELATED.search(block.group(0)):
        return MHTML
    return None


_OOXML_EXT = {"docx": DOCX, "docm": DOCX, "dotx": DOCX, "xlsx": XLSX, "xlsm": XLSX, "pptx": PPTX, "ppsx": PPTX}


# EPUB (OCF 3.0 4.3) and ODF (ODF 1.2 part 3, 3.3) name their kind in a first, stored member
# called "mimetype"; the byte test works on archives too damaged for the directory to be read
_ZIP_MIMETYPES = {
    b"application/epub+zip": EPUB,
    b"application/vnd.oasis.opendocument.text": ODT,
    b"application/vnd.oasis.opendocument.text-template": ODT,
    # Writer/Web (what LibreOffice writes converting HTML to .odt) and master documents
    b"application/vnd.oasis.opendocument.text-web": ODT,
    b"application/vnd.oasis.opendocument.text-master": ODT,
    b"application/vnd.oasis.opendocument.spreadsheet": ODS,
    b"application/vnd.oasis.opendocument.spreadsheet-template": ODS,
    b"application/vnd.oasis.opendocument.presentation": ODP,
    b"application/vnd.oasis.opendocument.presentation-template": ODP,
}


def _zip_mimetype(data: bytes) -> str | None:
    if data[30:38] == b"mimetype":
        declared = data[38 : 38 + 100].split(b"PK", 1)[0].strip()
        return _ZIP_MIMETYPES.get(declared)
    return None


def _sniff_zip(data: bytes, file_name: str) -> str:
    by_mimetype = _zip_mimetype(data)
    if by_mimetype:
        return by_mimetype
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            names = set(zf.namelist())
            if "mimetype" in names:
                declared = zf.read("mimetype")[:100].strip()
                if declared in _ZIP_MIMETYPES:
                    return _ZIP_MIMETYPES[declared]
            if "META-INF/container.xml" in names:  # an EPUB missing its mimetype member
                return EPUB
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

# What may open an HTML page once the prolog is skipped (see _after_prolog: no regular expression
# repeats over the prolog, whose constructs a lazy ``.*?`` could run past, in exponential time)
_HTML_ROOT = re.compile(r"<(?:!doctype\s+html|html|head|body)\b", re.I)
_HTML_ANY = re.compile(rb"<(?:html|head|body|div|p|table|meta|title|script)\b[^>]*>", re.I)
_MD_LINE = re.compile(r"^(?:#{1,6}\s+\S|```|~~~|\s*[-*+]\s+\S|\s*\d+\.\s+\S|>\s|\|.*\|\s*$|---\s*$)", re.M)
# a link's text and target stop at the next bracket or line end: a run of "[" or "](" costs one
# step each instead of a scan to the end of the sample
_MD_INLINE = re.compile(r"\[[^\]\[\n]+\]\([^()\n]+\)|\*\*[^*]+\*\*|`[^`]+`")


def _is_binary(sample: bytes) -> bool:
    if sample.startswith((b"\xff\xfe", b"\xfe\xff")):
        return False
    return b"\x00" in sample


# A notebook is JSON with these keys at the top (nbformat 4: "cells"; 3: "worksheets"); Jupyter
# writes "cells" first and "nbformat" last, so a big one shows them at its two ends
NOTEBOOK = "application/x-ipynb+json"
_NB_CELLS = re.compile(rb'^\s*\{\s*"(?:cells|worksheets|metadata)"\s*:')
_NB_VERSION = re.compile(rb'"nbformat"\s*:\s*\d')
# XML: a declaration, or a root element after comments / processing instructions / a doctype
# (internal subset included); HTML roots and bare HTML fragments are left to the HTML sniffer
_SPACE = re.compile(r"\s*")
_XML_ROOT = re.compile(r"<([A-Za-z_][\w.\-]*(?::[A-Za-z_][\w.\-]*)?)[\s/>]")
_HTML_ELEMENTS = frozenset(
    {
        *("html", "head", "body", "div", "p", "span", "a", "b", "i", "u", "em", "strong", "br", "hr", "img"),
        *("table", "tr", "td", "th", "ul", "ol", "li", "dl", "h1", "h2", "h3", "h4", "h5", "h6", "meta"),
        *("link", "title", "script", "style", "form", "input", "section", "article", "header", "footer"),
        *("nav", "main", "pre", "code", "blockquote"),
    }
)
_FLAT_ODF = re.compile(r'office:mimetype="(application/vnd\.oasis\.opendocument\.[a-z-]+)"')


@register_sniffer(text=True)
def sniff_text(data: bytes, file_name: str = "") -> str | None:
    sample = data[:65536]
    if not sample.strip() or _is_binary(sample[:8192]):
        return None
    text = sample.decode("utf-8", errors="replace").lstrip("\ufeff")
    if _HTML_ROOT.match(text, _after_prolog(text, doctype=False)):
        return "text/html"
    stripped = text.lstrip()  # record separators (RFC 7464) are whitespace to str.lstrip
    # JSON and XML before the count of HTML tags: a notebook's HTML outputs or an RSS feed's
    # <title>s are not an HTML page
    kind = _json_kind(data, text) if stripped[:1] in ("{", "[") else None
    kind = kind or (_xml_kind(text) if stripped[:1] == "<" else None)
    if kind:
        return kind
    if len(_HTML_ANY.findall(sample[:4096])) >= 3:
        return "text/html"
    if len(_MD_LINE.findall(text)) + len(_MD_INLINE.findall(text)) >= 3 and _MD_LINE.search(text):
        return "text/markdown"
    delim = _csv_delimiter(text)
    if delim:
        return "text/tab-separated-values" if delim == "\t" else "text/csv"
    return "text/plain"


def _after_prolog(text: str, *, doctype: bool) -> int:
    """Where the root element may start: past white space, an XML declaration, comments and
    processing instructions (XML 1.0 §2.8, "Prolog") and, with ``doctype``, a document type
    declaration with its internal subset. Each construct's end is found with one ``str.find``, so
    the scan is linear in the sample; an unterminated construct returns the end of the text."""
    pos, end = _skip_space(text, 0), len(text)
    while pos < end:
        if text.startswith("<!--", pos):
            close, width = text.find("-->", pos + 4), 3
        elif text.startswith("<?", pos):
            close, width = text.find("?>", pos + 2), 2
        elif doctype and text[pos : pos + 9].upper() == "<!DOCTYPE":
            close, width = _doctype_end(text, pos + 9), 1
        else:
            return pos
        if close < 0:
            return end
        pos = _skip_space(text, close + width)
    return pos


def _doctype_end(text: str, pos: int) -> int:
    """Index of the ``>`` closing a doctype whose name starts at ``pos`` (``[...]`` skipped), or -1."""
    while True:
        close, subset = text.find(">", pos), text.find("[", pos)
        if subset < 0 or 0 <= close < subset:
            return close
        pos = text.find("]", subset + 1)
        if pos < 0:
            return -1


def _skip_space(text: str, pos: int) -> int:
    return _SPACE.match(text, pos).end()  # type: ignore[union-attr]  # \s* always matches


def _xml_kind(text: str) -> str | None:
    """``application/xml`` for a document that opens like XML and is not HTML (flat ODF: its type)."""
    m = _XML_ROOT.match(text, _after_prolog(text, doctype=True))
    if m is None:
        return None
    root = m.group(1)
    declared = text.lstrip().startswith("<?xml")
    if root.lower() in _HTML_ELEMENTS and not declared:
        return None
    if root == "office:document":
        flat = _FLAT_ODF.search(text[:4096])
        if flat and get_parser(f"{flat.group(1)}-flat-xml") is not None:
            return f"{flat.group(1)}-flat-xml"
    return "application/xml"


def _is_notebook(doc: object) -> bool:
    return isinstance(doc, dict) and "nbformat" in doc and ("cells" in doc or "worksheets" in doc)


def _json_kind(data: bytes, text: str) -> str | None:
    big = len(data) > 65536
    if not big:
        try:
            doc = json.loads(data.decode("utf-8", errors="replace").lstrip("\ufeff"))
            return NOTEBOOK if _is_notebook(doc) else "application/json"
        except (ValueError, RecursionError):
            pass
    elif _NB_CELLS.match(data[:4096].lstrip(b"\xef\xbb\xbf")) and _NB_VERSION.search(data[-4096:] + data[:4096]):
        return NOTEBOOK
    values = _json_values_in(text, big)
    # two values, or in a cut sample one that ended before the file did: JSON Lines, or JSON
    # values back to back (concatenated), which the JSON Lines parser reads as a stream
    if values >= 2 or (big and values == 1):
        return "application/x-ndjson"
    if big and text.lstrip()[:1] in ("{", "["):
        return "application/json"  # too big to prove here; the JSON parser reports if it is not
    return None


_JSON_GAP = re.compile(r"[ \t\r\n\x1e,]*")


def _json_values_in(text: str, cut: bool) -> int:
    """How many objects/arrays open ``text`` back to back (JSON Lines, concatenated JSON).

    Stops at the first value that does not decode; when the sample was ``cut`` from a bigger
    file that value may be the one cut in half, so the count stands. Otherwise a stream whose
    second value is broken counts one and is not a stream.
    """
    decoder = json.JSONDecoder()
    count, pos = 0, 0
    while count < 50:
        gap = _JSON_GAP.match(text, pos)
        pos = gap.end() if gap else pos
        if pos >= len(text):
            return count
        try:
            value, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return count if cut or count >= 2 else 0
        if not isinstance(value, dict | list):
            return 0
        count += 1
    return count


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
