"""Embedded files: parse the files a container carries, recursively, as blocks of the outer one.

A workbook inside a DOCX, a PDF attached to a PPTX slide, a PDF's file attachments, the parts
of an MHTML archive: each goes back through :func:`registry.parse_document`, so it is sniffed,
routed and bounded exactly like a top-level file (the same time, memory, zip and XML caps; a PDF
in its own forked child). Its blocks follow the outer document's, under a heading that names
the file, each carrying ``metadata["embedded_from"]`` (the chain of names, outermost first) and
a ``path`` position.

Caps, from :class:`Limits`: ``embed_max_depth`` (containers within containers), and one
allowance per top-level document (:class:`._common.EmbedAllowance`, set up by
``parse_document``) of files (``embed_max_files``), bytes handed to parsers (``embed_max_total``)
and characters of embedded text (``max_chars``) that every level and every container of the
tree charges: three slides cannot each spend it anew, nor can ten nested copies of a document.
A nested parse in a forked child charges its own copy of what was left and reports what it
used (``metadata["embedded_usage"]``), which its container then charges. The embedded text
also counts against the container's own ``max_chars`` when it passes its ``room``.

One bad embedded file never fails its container: its typed error is listed in the outer
document's ``metadata["embedded_failed"]`` (which lineage records) and the rest goes on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from include.contract import Block, BlockKind, ParsedDocument, ParseError, RawDocument
from plugins.parsers._common import (
    EmbedAllowance,
    EmbedUsage,
    Limits,
    current_embed_allowance,
    document_seconds_left,
)
from plugins.parsers.registry import EMBEDDED_IMAGES, parse_document

__all__ = [
    "USAGE_KEY",
    "EmbeddedFile",
    "EmbeddedResult",
    "cap_reason",
    "embed_allowance",
    "embedded_images_wanted",
    "parse_embedded",
]

# private option keys the nested parse receives: how deep it is and what allowance is left
_DEPTH = "_embed_depth"
_FILES_LEFT = "_embed_files_left"
_BYTES_LEFT = "_embed_bytes_left"
_CHAIN = "_embed_chain"
# what a document's embedded files used, deeper levels included: a forked parse's way back
USAGE_KEY = "embedded_usage"


@dataclass(frozen=True, slots=True)
class EmbeddedFile:
    """One file a container carries."""

    name: str  # its name or part name in the container ("word/embeddings/Sheet1.xlsx")
    data: bytes
    media_type: str | None = None  # what the container declares (a content type), if anything
    where: str = ""  # where it sits in the outer document, for people ("slide 3", "page 2")


@dataclass(slots=True)
class EmbeddedResult:
    """The blocks of every embedded file that parsed, and what happened to each."""

    blocks: list[Block] = field(default_factory=list)
    parsed: list[dict[str, Any]] = field(default_factory=list)  # {name, media_type, parser, blocks}
    failed: list[dict[str, Any]] = field(default_factory=list)  # {name, code, message}
    skipped: list[dict[str, Any]] = field(default_factory=list)  # {name, reason}: over a cap
    # a member the container references more than once, parsed once: name -> references
    repeats: dict[str, int] = field(default_factory=dict)
    usage: EmbedUsage = field(default_factory=EmbedUsage)  # of the allowance, deeper levels included

    def merge(self, other: EmbeddedResult) -> None:
        """Add ``other``'s outcome (not its blocks: the container placed those)."""
        self.parsed.extend(other.parsed)
        self.failed.extend(other.failed)
        self.skipped.extend(other.skipped)
        for name, count in other.repeats.items():
            self.repeats[name] = self.repeats.get(name, 0) + count
        self.usage = self.usage + other.usage

    def record(self, metadata: dict[str, Any]) -> None:
        """Put the outcome into the outer document's metadata (``embedded_failed`` reaches lineage)."""
        if self.parsed:
            metadata["embedded"] = self.parsed
        if self.failed:
            metadata["embedded_failed"] = self.failed
        if self.skipped:
            metadata["embedded_skipped"] = self.skipped
        if self.repeats:
            metadata["embedded_repeats"] = [{"name": n, "references": c} for n, c in self.repeats.items()]
        if self.usage != EmbedUsage():
            metadata[USAGE_KEY] = self.usage.to_dict()


def embedded_images_wanted(options: Mapping[str, Any]) -> bool:
    """Whether images inside documents should be OCR'd (``engines: {embedded_images: ocr}``)."""
    return ((options.get("engines") or {}).get(EMBEDDED_IMAGES) or "off") == "ocr"


def embed_allowance(options: Mapping[str, Any]) -> EmbedAllowance:
    """The top-level document's allowance; outside a parse, one from ``options`` for this call."""
    allowance = current_embed_allowance()
    if allowance is not None:
        return allowance
    limits = Limits.from_options(options)
    files = int(options.get(_FILES_LEFT, limits.embed_max_files))
    return EmbedAllowance(EmbedUsage(files, int(options.get(_BYTES_LEFT, limits.embed_max_total)), limits.max_chars))


def parse_embedded(
    files: Iterable[EmbeddedFile],
    options: Mapping[str, Any],
    heading_path: list[str] | None = None,
    room: int | None = None,
) -> EmbeddedResult:
    """Parse ``files`` (as the container's parser found them) into blocks; never raises ParseError.

    ``options`` are the container's own parse options; ``heading_path`` the headings the
    embedded blocks should sit under (the container's path at the place of the file); ``room``
    the characters the container may still add (``BlockBuilder.room``), if it counts them.
    """
    limits = Limits.from_options(options)
    depth = int(options.get(_DEPTH, 0)) + 1
    chain = list(options.get(_CHAIN, ()))
    allowance = embed_allowance(options)
    started = allowance.used
    result = EmbeddedResult()
    placed = 0  # characters of the blocks placed so far: they take the container's room
    for item in files:
        chars_cap = min(limits.max_chars, allowance.left.chars, limits.max_chars if room is None else room - placed)
        seconds = document_seconds_left()
        # the container's one budget is spent: its own text is kept, the rest is listed as skipped
        reason = (
            "time_budget"
            if seconds is not None and seconds <= 0
            else _over_cap(len(item.data), depth, limits, allowance.left, chars_cap)
        )
        if reason:
            result.skipped.append({"name": item.name, "reason": reason})
            continue
        try:
            doc = _parse_one(item, options, depth, [*chain, item.name], allowance, chars_cap)
        except ParseError as exc:
            result.failed.append({"name": item.name, "code": exc.code.value, "message": exc.message})
            continue
        if doc is None:
            result.skipped.append({"name": item.name, "reason": f"embedded text exceeds max_chars={limits.max_chars}"})
            continue
        blocks = _placed_blocks(doc, item, [*chain, item.name], heading_path or [])
        placed += sum(len(block.text) for block in blocks)
        result.blocks.extend(blocks)
        _carry_nested_outcomes(doc, item, result)
        result.parsed.append(
            {"name": item.name, "media_type": doc.media_type, "parser": doc.parser, "blocks": len(doc.blocks)}
        )
    result.usage = allowance.used.beyond(started)
    return result


def _parse_one(
    item: EmbeddedFile, options: Mapping[str, Any], depth: int, chain: list[str], allowance: EmbedAllowance, chars: int
) -> ParsedDocument | None:
    """Parse one file against the allowance; None when its text is more than ``chars``."""
    allowance.charge(EmbedUsage(files=1, bytes=len(item.data)))
    left = allowance.left
    # the nested parse refuses text past what is left (max_chars); the depth and chain tell it where it is
    nested = {**options, _DEPTH: depth, _FILES_LEFT: left.files, _BYTES_LEFT: left.bytes, _CHAIN: chain}
    nested["max_chars"] = chars
    raw = RawDocument(
        item_key=item.name, data=item.data, file_name=item.name.rsplit("/", 1)[-1], media_type=item.media_type
    )
    before = allowance.used
    doc = parse_document(raw, nested)
    below = EmbedUsage.from_dict(doc.metadata.get(USAGE_KEY))
    # a forked parse charged its own copy of the allowance: what did not reach ours is charged now
    allowance.charge(below.beyond(allowance.used.beyond(before)))
    text = sum(len(block.text) for block in doc.blocks)
    if text > chars:  # a parser that does not count its text against max_chars
        return None
    allowance.charge(EmbedUsage(chars=max(0, text - below.chars)))  # deeper levels charged theirs
    return doc


def _carry_nested_outcomes(doc: ParsedDocument, item: EmbeddedFile, result: EmbeddedResult) -> None:
    """What failed or was cut off deeper down is the outer document's to report (lineage sees only it)."""
    for key, into in (("embedded_failed", result.failed), ("embedded_skipped", result.skipped)):
        for entry in doc.metadata.get(key) or []:
            into.append({**entry, "name": f"{item.name} > {entry.get('name', '')}"})


def cap_reason(options: Mapping[str, Any], size: int, pending: EmbedUsage) -> str:
    """Why a file of ``size`` bytes would be skipped, ``pending`` being what the container has
    found but not yet handed on: lets it leave a file unread ("" when it fits)."""
    limits = Limits.from_options(options)
    depth = int(options.get(_DEPTH, 0)) + 1
    left = embed_allowance(options).left.beyond(pending)
    return _over_cap(size, depth, limits, left, left.chars + 1)


def _over_cap(size: int, depth: int, limits: Limits, left: EmbedUsage, chars: int) -> str:
    if depth > limits.embed_max_depth:
        return f"nested deeper than embed_max_depth={limits.embed_max_depth}"
    if left.files <= 0:
        return f"more than embed_max_files={limits.embed_max_files} embedded files"
    if size > left.bytes:
        return f"embedded files exceed embed_max_total={limits.embed_max_total} bytes"
    if chars <= 0:
        return f"embedded text exceeds max_chars={limits.max_chars}"
    return ""


def _placed_blocks(doc: ParsedDocument, item: EmbeddedFile, chain: list[str], outer_path: list[str]) -> list[Block]:
    """The nested document's blocks under a heading naming the file, marked with where they came from."""
    label = item.name.rsplit("/", 1)[-1] + (f" ({item.where})" if item.where else "")
    title = Block(BlockKind.HEADING, label, level=len(outer_path) + 1, heading_path=list(outer_path))
    title.metadata["embedded_from"] = chain
    out = [title]
    for block in doc.blocks:
        block.heading_path = [*outer_path, label, *block.heading_path]
        # a block from deeper down already carries its whole chain (the nested parse got ours)
        block.metadata.setdefault("embedded_from", chain)
        out.append(block)
    return out
