"""MHTML parser: RFC 2557 web archives (``.mht`` / ``.mhtml`` from browsers and Word).

The archive is a MIME message (RFC 2045/2046) whose body is ``multipart/related``. The stdlib
:mod:`email` package reads it (``policy.default``, bytes parser); the root part is the one the
``start`` parameter names by Content-ID (RFC 2387 3.2), else the first ``text/html`` part
(RFC 2557 5: the root is the first part when ``start`` is absent). Its transfer encoding
(quoted-printable, base64) and charset are decoded and the HTML goes to the project's HTML
parser; the other parts that are documents (not images, style sheets, fonts, scripts or Word's
theme/XML housekeeping) are parsed as embedded files (:mod:`plugins.parsers._embedded`), images
too when ``engines: {embedded_images: ocr}``.

Caps: the number of MIME parts (:data:`MAX_PARTS`), their nesting (``Limits.xml_max_depth``), the
bytes all decoded parts may take together (``Limits.zip_max_uncompressed``) and the time budget.
"""

from __future__ import annotations

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
    budget = _Budget(limits, Deadline(limits.time_budget_s))
    message = BytesParser(policy=policy.default).parsebytes(data)
    if message.defects and not message.is_multipart():
        raise ParseError(ParseErrorCode.CORRUPT, f"MHTML: not a MIME message ({type(message.defects[0]).__name__})")
    parts = _leaf_parts(message, limits.xml_max_depth)
    root = _root_part(message, parts)
    doc = _parse_root(root, budget, ctx)
    files = _embedded_files(parts, root, budget, embedded_images_wanted(ctx.options))
    result = parse_embedded(files, ctx.options)
    doc.blocks.extend(result.blocks)
    result.record(doc.metadata)
    doc.metadata["mhtml_parts"] = len(parts)
    location = root.get("Content-Location")
    if location:
        doc.metadata["mhtml_root"] = str(location)
    doc.media_type = MHTML
    return doc


def _leaf_parts(message: Message, max_depth: int) -> list[Message]:
    """The non-multipart parts in document order, walked without recursion under the caps."""
    leaves: list[Message] = []
    pending: list[tuple[Message, int]] = [(message, 0)]
    while pending:
        part, depth = pending.pop()
        if depth > max_depth:
            raise ParseError(ParseErrorCode.BOMB, f"MHTML: multiparts nested deeper than {max_depth}")
        if part.is_multipart():
            children = part.get_payload()
            if isinstance(children, list):
                pending.extend((child, depth + 1) for child in reversed(children) if isinstance(child, Message))
        else:
            leaves.append(part)
        if len(leaves) + len(pending) > MAX_PARTS:
            raise ParseError(ParseErrorCode.TOO_LARGE, f"MHTML: more than {MAX_PARTS} MIME parts")
    return leaves


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
