"""MHTML parser: RFC 2557 web archives (``.mht`` / ``.mhtml`` from browsers and Word).

The archive is a MIME message (RFC 2045/2046) whose body is ``multipart/related``. The stdlib
:mod:`email` package reads it (``policy.default``, bytes parser); the root part is the one the
``start`` parameter names by Content-ID (RFC 2387 3.2), else the first ``text/html`` part
(RFC 2557 5: the root is the first part when ``start`` is absent). Its transfer encoding
(quoted-printable, base64) and charset are decoded and the HTML goes to the project's HTML
parser; the other parts that are documents (not images, style sheets, fonts, scripts or Word's
theme/XML housekeeping) are parsed as embedded files (:mod:`plugins.parsers._embedded`), images
too when ``engines: {embedded_images: ocr}``.

The parts are found by scanning the bytes for the boundary lines (RFC 2046 5.1.1) and counted
before any of them is parsed; ``email`` then parses each part alone.

Caps: the number of MIME parts (:data:`MAX_PARTS`), their nesting (``Limits.xml_max_depth``), the
bytes all decoded parts may take together (``Limits.zip_max_uncompressed``), the text of the page
and its documents together (``Limits.max_chars``, through the HTML parser's own cap first) and the
time budget. An archive past :data:`MAX_PARTS` is refused (``too_large``), not cut to its first
parts: no saved page has thousands of parts, the root the ``start`` parameter names may lie
beyond any cut, and a partial archive indexed as if whole would hide that it was cut at all.
"""

from __future__ import annotations

import re
from email import policy
from email.message import EmailMessage, Message
from email.parser import BytesParser
from typing import Any

from include.contract import ParsedDocument, ParseError, ParseErrorCode
from plugins.parsers._common import Deadline, Limits
from plugins.parsers._embedded import EmbeddedFile, embedded_images_wanted, parse_embedded
from plugins.parsers.registry import ParseContext, get_parser, register_parser
from plugins.parsers.sniff import MHTML

__all__ = ["MAX_PARTS", "parse_mhtml"]

# a saved page has tens of parts (its images, style sheets, frames); thousands is not a page
MAX_PARTS = 10_000
# parts that are a page's furniture, not documents: never handed to a parser
_NOT_DOCUMENTS = ("text/css", "font/", "application/font", "application/x-font", "audio/", "video/")
_BLANK_LINE = re.compile(rb"\r?\n\r?\n")
_NOT_DOCUMENTS_EXACT = frozenset(
    {
        "text/javascript",
        "application/javascript",
        "application/x-javascript",
        "text/xml",  # Word's filelist.xml, colorschememapping.xml and customXml items
        "application/xml",
        "application/vnd.ms-officetheme",
    }
)


class _Budget:
    """What the decoded parts may still take: bytes and time."""

    def __init__(self, limits: Limits, deadline: Deadline) -> None:
        self.bytes_left = limits.zip_max_uncompressed
        self.limit = limits.zip_max_uncompressed
        self.deadline = deadline

    def decode(self, part: Message) -> bytes:
        self.deadline.check("MHTML parts")
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        self.bytes_left -= len(data)
        if self.bytes_left < 0:
            raise ParseError(
                ParseErrorCode.TOO_LARGE,
                f"MHTML parts decode to more than {self.limit} bytes (limit zip_max_uncompressed)",
            )
        return data


@register_parser("mhtml", "1.0", (MHTML, "application/x-mimearchive", "message/rfc822"), ("mht", "mhtml"))
def parse_mhtml(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    budget = _Budget(limits, deadline)
    message, parts = _read_archive(data, limits.xml_max_depth, deadline)
    root = _root_part(message, parts)
    doc = _parse_root(root, budget, ctx)
    files = _embedded_files(parts, root, budget, embedded_images_wanted(ctx.options))
    result = parse_embedded(files, ctx.options)
    if sum(len(b.text) for b in doc.blocks) + sum(len(b.text) for b in result.blocks) > limits.max_chars:
        raise ParseError(
            ParseErrorCode.TOO_LARGE,
            f"MHTML: the page and its documents exceed {limits.max_chars} characters (limit max_chars)",
        )
    doc.blocks.extend(result.blocks)
    result.record(doc.metadata)
    doc.metadata["mhtml_parts"] = len(parts)
    location = root.get("Content-Location")
    if location:
        doc.metadata["mhtml_root"] = str(location)
    doc.media_type = MHTML
    return doc


def _read_archive(data: bytes, max_depth: int, deadline: Deadline) -> tuple[Message, list[Message]]:
    """The archive's top-level headers and its leaf parts, each parsed only after all are counted.

    ``email`` would turn the whole message into objects first (300,000 tiny parts: 315 s before
    :data:`MAX_PARTS` could be looked at); the boundaries are found by a scan of the bytes instead.
    A message that is not multipart is one part, parsed as before.
    """
    message, body_start = _headers(data, 0, len(data))
    boundary = _boundary(message)
    if boundary is None:
        message = BytesParser(policy=policy.default).parsebytes(data)
        if message.defects and not message.is_multipart():
            raise ParseError(ParseErrorCode.CORRUPT, f"MHTML: not a MIME message ({type(message.defects[0]).__name__})")
        return message, [message]
    children = _split(data, body_start, len(data), boundary, MAX_PARTS, deadline)
    if not children:
        raise ParseError(ParseErrorCode.CORRUPT, "MHTML: the multipart boundary never occurs")
    return message, _leaf_spans(data, children, max_depth, deadline)


def _leaf_spans(data: bytes, top: list[tuple[int, int]], max_depth: int, deadline: Deadline) -> list[Message]:
    """The non-multipart parts in document order, walked without recursion under the caps."""
    spans: list[tuple[int, int, int]] = [(start, end, 1) for start, end in reversed(top)]
    leaves: list[tuple[int, int]] = []
    while spans:
        start, end, depth = spans.pop()
        if depth > max_depth:
            raise ParseError(ParseErrorCode.BOMB, f"MHTML: multiparts nested deeper than {max_depth}")
        headers, body_start = _headers(data, start, end)
        boundary = _boundary(headers)
        children = _split(data, body_start, end, boundary, MAX_PARTS - len(leaves) - len(spans), deadline)
        if children:
            spans.extend((child_start, child_end, depth + 1) for child_start, child_end in reversed(children))
        else:  # not multipart, or its boundary never occurs: one part, as ``email`` reads it
            leaves.append((start, end))
    parser = BytesParser(policy=policy.default)
    return [parser.parsebytes(data[start:end]) for start, end in leaves]


def _headers(data: bytes, start: int, end: int) -> tuple[Message, int]:
    """The header block of the part at ``data[start:end]`` (parsed alone) and where its body starts."""
    blank = _BLANK_LINE.search(data, start, end)
    body_start = blank.end() if blank else end
    return BytesParser(policy=policy.default).parsebytes(data[start:body_start], headersonly=True), body_start


def _boundary(headers: Message) -> bytes | None:
    if headers.get_content_maintype() != "multipart":
        return None
    boundary = headers.get_boundary()
    return boundary.encode("ascii", "surrogateescape") if boundary else None


def _split(
    data: bytes, start: int, end: int, boundary: bytes | None, room: int, deadline: Deadline
) -> list[tuple[int, int]]:
    """The body parts of a multipart body at ``data[start:end]`` as ``(start, end)`` offsets.

    RFC 2046 5.1.1: a delimiter is a line ``--boundary`` (``--boundary--`` closes), and the
    line break before it belongs to it; the preamble and epilogue are not parts. Past ``room``
    parts the scan stops with ``too_large``, before any part is parsed.
    """
    if boundary is None:
        return []
    delimiter = re.compile(rb"^--" + re.escape(boundary) + rb"(--)?[ \t]*\r?$", re.M)
    parts: list[tuple[int, int]] = []
    part_start: int | None = None
    for match in delimiter.finditer(data, start, end):
        if part_start is not None:
            parts.append((part_start, _before_line_break(data, part_start, match.start())))
            if len(parts) > room:
                raise ParseError(ParseErrorCode.TOO_LARGE, f"MHTML: more than {MAX_PARTS} MIME parts")
            if len(parts) % 1000 == 0:
                deadline.check("MHTML parts")
        if match.group(1):
            return parts
        part_start = min(match.end() + 1, end)  # past the delimiter line's own line break
    if part_start is not None:
        parts.append((part_start, end))  # no closing delimiter: the last part runs to the end
    if len(parts) > room:
        raise ParseError(ParseErrorCode.TOO_LARGE, f"MHTML: more than {MAX_PARTS} MIME parts")
    return parts


def _before_line_break(data: bytes, start: int, at: int) -> int:
    if at > start and data[at - 1 : at] == b"\n":
        at -= 2 if at - 1 > start and data[at - 2 : at - 1] == b"\r" else 1
    return at


def _root_part(message: Message, parts: list[Message]) -> Message:
    """RFC 2387 3.2: ``start`` names the root's Content-ID; without it, the first HTML part."""
    start = message.get_param("start", header="content-type")
    if isinstance(start, str) and start.strip():
        wanted = start.strip().strip("<>")
        for part in parts:
            if str(part.get("Content-ID", "")).strip().strip("<>") == wanted:
                return part
    for kind in ("text/html", "application/xhtml+xml", "text/plain"):
        for part in parts:
            if part.get_content_type() == kind:
                return part
    raise ParseError(ParseErrorCode.EMPTY, "MHTML: no HTML or text part")


def _parse_root(root: Message, budget: _Budget, ctx: ParseContext) -> ParsedDocument:
    html = budget.decode(root)
    kind = root.get_content_type()
    media = "text/plain" if kind == "text/plain" else "text/html"
    spec = get_parser(media)
    if spec is None:  # pragma: no cover - the HTML and text parsers are built in
        raise ParseError(ParseErrorCode.UNSUPPORTED, f"no parser for {media}")
    charset = root.get_content_charset()
    declared = f"{media}; charset={charset}" if charset else media
    location = root.get("Content-Location")
    nested = ParseContext(
        file_name=ctx.file_name,
        media_type=media,
        declared_type=declared,
        url=str(location) if location else ctx.url,
        options=ctx.options,
    )
    return spec.fn(html, nested)


def _is_document(kind: str, images: bool) -> bool:
    if kind.startswith("image/"):
        return images
    return kind not in _NOT_DOCUMENTS_EXACT and not kind.startswith(_NOT_DOCUMENTS)


def _embedded_files(parts: list[Message], root: Message, budget: _Budget, images: bool) -> list[EmbeddedFile]:
    """Every part but the root that is a document, decoded, named and numbered as in the archive."""
    files: list[EmbeddedFile] = []
    for number, part in enumerate(parts, start=1):
        kind = part.get_content_type()
        if part is root or not _is_document(kind, images):
            continue
        files.append(
            EmbeddedFile(
                name=_part_name(part, number), data=budget.decode(part), media_type=kind, where=f"part {number}"
            )
        )
    return files


def _part_name(part: Message, number: int) -> str:
    name: Any = part.get_filename() if isinstance(part, EmailMessage) else None
    location = part.get("Content-Location")
    if not name and location:
        name = str(location).split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return str(name) if name else f"part{number}"
