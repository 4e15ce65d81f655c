"""Embedded files: parse the files a container carries, recursively, as blocks of the outer one.

A workbook inside a DOCX, a PDF attached to a PPTX slide, a PDF's file attachments, the parts
of an MHTML archive: each goes back through :func:`registry.parse_document`, so it is sniffed,
routed and bounded exactly like a top-level file (the same time, memory, zip and XML caps; a PDF
in its own forked child). Its blocks follow the outer document's, under a heading that names
the file, each carrying ``metadata["embedded_from"]`` (the chain of names, outermost first) and
a ``path`` position.

Caps, from :class:`Limits` (``embed_max_depth``, ``embed_max_files``, ``embed_max_total``): the
depth of containers within containers, and the files and bytes that all levels together may
hand to a parser. Each level passes its remaining allowance down in the options it gives the
nested parse, so a container cannot multiply it by nesting. A nested file's bytes are part of
its container's, so counting what each level hands over bounds the whole tree.

One bad embedded file never fails its container: its typed error is listed in the outer
document's ``metadata["embedded_failed"]`` (which lineage records) and the rest goes on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from include.contract import Block, BlockKind, ParsedDocument, ParseError, RawDocument
from plugins.parsers._common import Limits, document_seconds_left
from plugins.parsers.registry import EMBEDDED_IMAGES, parse_document

__all__ = ["EmbeddedFile", "EmbeddedResult", "embedded_images_wanted", "parse_embedded"]

# private option keys the nested parse receives: how deep it is and what allowance is left
_DEPTH = "_embed_depth"
_FILES_LEFT = "_embed_files_left"
_BYTES_LEFT = "_embed_bytes_left"
_CHAIN = "_embed_chain"


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

    def record(self, metadata: dict[str, Any]) -> None:
        """Put the outcome into the outer document's metadata (``embedded_failed`` reaches lineage)."""
        if self.parsed:
            metadata["embedded"] = self.parsed
        if self.failed:
            metadata["embedded_failed"] = self.failed
        if self.skipped:
            metadata["embedded_skipped"] = self.skipped


def embedded_images_wanted(options: Mapping[str, Any]) -> bool:
    """Whether images inside documents should be OCR'd (``engines: {embedded_images: ocr}``)."""
    return ((options.get("engines") or {}).get(EMBEDDED_IMAGES) or "off") == "ocr"


def parse_embedded(
    files: Iterable[EmbeddedFile], options: Mapping[str, Any], heading_path: list[str] | None = None
) -> EmbeddedResult:
    """Parse ``files`` (as the container's parser found them) into blocks; never raises ParseError.

    ``options`` are the container's own parse options; ``heading_path`` the headings the
    embedded blocks should sit under (the container's path at the place of the file).
    """
    limits = Limits.from_options(options)
    depth = int(options.get(_DEPTH, 0)) + 1
    files_left = int(options.get(_FILES_LEFT, limits.embed_max_files))
    bytes_left = int(options.get(_BYTES_LEFT, limits.embed_max_total))
    chain = list(options.get(_CHAIN, ()))
    result = EmbeddedResult()
    for item in files:
        left = document_seconds_left()
        # the container's one budget is spent: its own text is kept, the rest is listed as skipped
        reason = (
            "time_budget" if left is not None and left <= 0 else _over_cap(item, depth, limits, files_left, bytes_left)
        )
        if reason:
            result.skipped.append({"name": item.name, "reason": reason})
            continue
        files_left -= 1
        bytes_left -= len(item.data)
        nested = {
            **options,
            _DEPTH: depth,
            _FILES_LEFT: files_left,
            _BYTES_LEFT: bytes_left,
            _CHAIN: [*chain, item.name],
        }
        raw = RawDocument(
            item_key=item.name, data=item.data, file_name=item.name.rsplit("/", 1)[-1], media_type=item.media_type
        )
        try:
            doc = parse_document(raw, nested)
        except ParseError as exc:
            result.failed.append({"name": item.name, "code": exc.code.value, "message": exc.message})
            continue
        result.blocks.extend(_placed_blocks(doc, item, [*chain, item.name], heading_path or []))
        _carry_nested_outcomes(doc, item, result)
        result.parsed.append(
            {"name": item.name, "media_type": doc.media_type, "parser": doc.parser, "blocks": len(doc.blocks)}
        )
    return result


def _carry_nested_outcomes(doc: ParsedDocument, item: EmbeddedFile, result: EmbeddedResult) -> None:
    """What failed or was cut off deeper down is the outer document's to report (lineage sees only it)."""
    for key, into in (("embedded_failed", result.failed), ("embedded_skipped", result.skipped)):
        for entry in doc.metadata.get(key) or []:
            into.append({**entry, "name": f"{item.name} > {entry.get('name', '')}"})


def _over_cap(item: EmbeddedFile, depth: int, limits: Limits, files_left: int, bytes_left: int) -> str:
    if depth > limits.embed_max_depth:
        return f"nested deeper than embed_max_depth={limits.embed_max_depth}"
    if files_left <= 0:
        return f"more than embed_max_files={limits.embed_max_files} embedded files"
    if len(item.data) > bytes_left:
        return f"embedded files exceed embed_max_total={limits.embed_max_total} bytes"
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
