"""Shared parser helpers: text decoding, limits and time budgets, block building, safe XML.

Everything here is pure; parsers import what they need. Private to the parsers package.
"""

from __future__ import annotations

import codecs
import contextlib
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from typing import Any

from lxml import etree

from include.contract import Block, BlockKind, ParseError, ParseErrorCode, Position

__all__ = [
    "BlockBuilder",
    "Deadline",
    "EmbedAllowance",
    "EmbedUsage",
    "Limits",
    "charset_from_content_type",
    "clean_text",
    "current_embed_allowance",
    "decode_text",
    "document_budget",
    "document_embed_allowance",
    "document_seconds_left",
    "normalise_charset",
    "parse_xml",
    "safe_xml_parser",
]

MiB = 1024 * 1024

# --------------------------------------------------------------------------- limits


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps that keep one hostile document from taking the worker down.

    Read from parser options, flat (``{"max_rows": 10}``) or under ``"limits"``.
    """

    max_bytes: int = 256 * MiB
    max_pages: int = 5_000
    max_rows: int = 1_000_000
    max_blocks: int = 2_000_000
    # output text of one document (characters, all blocks): what a few KB of markup can inflate
    # to through copied merged cells, list markers or indentation is refused past this
    max_chars: int = 64 * MiB
    # spreadsheet cells one document may expand to (row widths, merge fills): a lone cell in
    # column XFD makes a 16,384-cell row
    max_cells: int = 20_000_000
    # decompressed XML parts a package library parses into trees (all parts together, not each
    # alone): lxml trees take 10-15x their XML size in memory
    xml_max_total: int = 64 * MiB
    zip_max_entries: int = 100_000
    zip_max_uncompressed: int = 512 * MiB
    # compression ratio beyond which a single zip member counts as a bomb
    zip_max_ratio: float = 200.0
    xml_max_depth: int = 256
    time_budget_s: float = 120.0
    # memory an isolated (forked) parse may add: max(isolate_memory, ratio x input size)
    isolate_memory: int = 1024 * MiB
    isolate_memory_ratio: float = 8.0
    # total bytes a PDF's compressed non-image streams may inflate to (pdfium holds them)
    pdf_max_inflated: int = 512 * MiB
    # embedded files (a workbook inside a DOCX, a PDF's attachments): how deep containers may
    # nest, how many files and how many bytes all levels together may hand to a parser
    embed_max_depth: int = 3
    embed_max_files: int = 1_000
    embed_max_total: int = 128 * MiB

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> Limits:
        options = options or {}
        merged: dict[str, Any] = {}
        nested = options.get("limits")
        if isinstance(nested, Mapping):
            merged.update(nested)
        for f in fields(cls):
            if f.name in options:
                merged[f.name] = options[f.name]
        if "time_budget" in merged and "time_budget_s" not in merged:
            merged["time_budget_s"] = merged.pop("time_budget")
        defaults: dict[str, Any] = {f.name: f.default for f in fields(cls)}
        return cls(**{k: type(defaults[k])(v) for k, v in merged.items() if k in defaults})

    def check_size(self, data: bytes) -> None:
        if len(data) > self.max_bytes:
            raise ParseError(ParseErrorCode.TOO_LARGE, f"{len(data)} bytes exceeds the {self.max_bytes}-byte cap")


# The monotonic instant by which the top-level document being parsed must be done. Everything
# nested in it (embedded files, converter runs, OCR, isolated children: a fork copies the
# variable) is bounded by it, whatever budget its own options name.
_DOCUMENT_DEADLINE: ContextVar[float | None] = ContextVar("tributary_document_deadline", default=None)


@contextlib.contextmanager
def document_budget(seconds: float) -> Iterator[float]:
    """Parse under one deadline: ``seconds`` from now, or the enclosing document's, if sooner."""
    outer = _DOCUMENT_DEADLINE.get()
    deadline = time.monotonic() + seconds
    token = _DOCUMENT_DEADLINE.set(deadline if outer is None else min(deadline, outer))
    try:
        yield _DOCUMENT_DEADLINE.get() or deadline
    finally:
        _DOCUMENT_DEADLINE.reset(token)


def document_seconds_left() -> float | None:
    """Seconds left of the current top-level document's budget (None outside a parse)."""
    deadline = _DOCUMENT_DEADLINE.get()
    return None if deadline is None else deadline - time.monotonic()


@dataclass(frozen=True, slots=True)
class EmbedUsage:
    """Embedded files, their bytes and the characters of their text: used or allowed."""

    files: int = 0
    bytes: int = 0
    chars: int = 0

    def __add__(self, other: EmbedUsage) -> EmbedUsage:
        return EmbedUsage(self.files + other.files, self.bytes + other.bytes, self.chars + other.chars)

    def beyond(self, other: EmbedUsage) -> EmbedUsage:
        """What this has more than ``other``, per count (never negative)."""
        return EmbedUsage(
            max(0, self.files - other.files), max(0, self.bytes - other.bytes), max(0, self.chars - other.chars)
        )

    def to_dict(self) -> dict[str, int]:
        return {"files": self.files, "bytes": self.bytes, "chars": self.chars}

    @classmethod
    def from_dict(cls, raw: Any) -> EmbedUsage:
        if not isinstance(raw, Mapping):
            return cls()
        return cls(*(max(0, int(raw.get(key) or 0)) for key in ("files", "bytes", "chars")))


@dataclass(slots=True)
class EmbedAllowance:
    """What all the embedded files of one top-level document may use together, at every level.

    Shared in process through :func:`document_embed_allowance`; a forked child charges its
    copy and reports its usage back (``metadata["embedded_usage"]``) for the parent to charge."""

    limit: EmbedUsage
    used: EmbedUsage = field(default_factory=EmbedUsage)

    @classmethod
    def from_limits(cls, limits: Limits) -> EmbedAllowance:
        return cls(EmbedUsage(limits.embed_max_files, limits.embed_max_total, limits.max_chars))

    @property
    def left(self) -> EmbedUsage:
        return self.limit.beyond(self.used)

    def charge(self, usage: EmbedUsage) -> None:
        self.used = self.used + usage


_DOCUMENT_EMBEDS: ContextVar[EmbedAllowance | None] = ContextVar("tributary_document_embeds", default=None)


@contextlib.contextmanager
def document_embed_allowance(limits: Limits) -> Iterator[EmbedAllowance]:
    """The embedded-file allowance of the document being parsed: the enclosing one's, if any."""
    outer = _DOCUMENT_EMBEDS.get()
    if outer is not None:
        yield outer
        return
    allowance = EmbedAllowance.from_limits(limits)
    token = _DOCUMENT_EMBEDS.set(allowance)
    try:
        yield allowance
    finally:
        _DOCUMENT_EMBEDS.reset(token)


def current_embed_allowance() -> EmbedAllowance | None:
    """The allowance of the top-level document being parsed (None outside a parse)."""
    return _DOCUMENT_EMBEDS.get()


@dataclass(slots=True)
class Deadline:
    """Cooperative per-document time budget: parsers call :meth:`check` in their loops.

    Never longer than what is left of the top-level document's budget (:func:`document_budget`):
    a parser that starts its own deadline inside an embedded file gets the remainder, not a
    fresh budget."""

    seconds: float
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        outer = _DOCUMENT_DEADLINE.get()
        if outer is not None:
            self.seconds = max(0.0, min(self.seconds, outer - self.started))

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> Deadline:
        return cls(Limits.from_options(options).time_budget_s)

    @property
    def remaining(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def check(self, where: str = "") -> None:
        if time.monotonic() - self.started > self.seconds:
            suffix = f" ({where})" if where else ""
            raise ParseError(ParseErrorCode.TIMEOUT, f"time budget of {self.seconds:g}s exceeded{suffix}")


# --------------------------------------------------------------------------- decoding

# WHATWG's label mapping in brief: browsers decode these labels with the superset codec, and
# so must we, or pages declared "gb2312" but using GBK-only characters decode wrongly.
_CHARSET_ALIASES = {
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "x-gbk": "gb18030",
    "cp936": "gb18030",
    "big5": "big5hkscs",
    "big5-hkscs": "big5hkscs",
    "shift_jis": "cp932",
    "shift-jis": "cp932",
    "sjis": "cp932",
    "x-sjis": "cp932",
    "ms_kanji": "cp932",
    "windows-31j": "cp932",
    "euc-kr": "cp949",
    "ks_c_5601-1987": "cp949",
    "iso-8859-1": "cp1252",
    "latin1": "cp1252",
    "latin-1": "cp1252",
    "us-ascii": "cp1252",
    "ascii": "cp1252",
    "iso-8859-9": "cp1254",
    "tis-620": "cp874",
    "unicode": "utf-16",
    "utf8": "utf-8",
}

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)

_SINGLE_BYTE_DEFAULTS = frozenset({"cp1252", "latin-1", "iso8859-1", "iso8859-15"})
_CT_CHARSET = re.compile(r"""charset\s*=\s*["']?([A-Za-z0-9_.:\-]+)""", re.I)


def normalise_charset(label: str | None) -> str | None:
    """A Python codec name for a charset label, or None when the label is unknown."""
    if not label:
        return None
    label = label.strip().strip("\"'").lower()
    label = _CHARSET_ALIASES.get(label, label)
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return None
    return _CHARSET_ALIASES.get(name, name)


def charset_from_content_type(content_type: str | None) -> str | None:
    if not content_type:
        return None
    m = _CT_CHARSET.search(content_type)
    return normalise_charset(m.group(1)) if m else None


def _bom(data: bytes) -> tuple[str, int] | None:
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return codec, len(bom)
    return None


def decode_text(data: bytes, declared_type: str | None = None, hints: tuple[str | None, ...] = ()) -> tuple[str, str]:
    """Decode ``data``: BOM, then the declared charset, then in-document hints, then detection.

    The BOM wins over the transport header (as in browsers): a file that starts with one was
    written in that encoding whatever the server claims. Returns ``(text, codec)``.
    """
    bom = _bom(data)
    if bom:
        codec, skip = bom
        return data[skip:].decode(codec, errors="replace"), codec
    candidates: list[str] = []
    for label in (charset_from_content_type(declared_type), *(normalise_charset(h) for h in hints)):
        if label and label not in candidates:
            candidates.append(label)
    for codec in candidates:
        if codec in _SINGLE_BYTE_DEFAULTS and not data.isascii():
            # "ISO-8859-1" is many servers' default label, not a statement about the page: text
            # that is valid UTF-8 with multi-byte sequences is practically never real cp1252.
            try:
                return data.decode("utf-8"), "utf-8"
            except UnicodeDecodeError:
                pass
        try:
            return data.decode(codec), codec
        except UnicodeDecodeError:
            continue
    # Pure ASCII/UTF-8 is by far the common case and a strict decode proves it.
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    detected = _detect(data)
    if detected:
        return data.decode(detected, errors="replace"), detected
    fallback = candidates[0] if candidates else "utf-8"
    return data.decode(fallback, errors="replace"), fallback


def _detect(data: bytes) -> str | None:
    # imported on first use: most text decodes as UTF-8 and never needs a charset guess
    from charset_normalizer import from_bytes

    # Large files: detection on a prefix is as good and much faster.
    best = from_bytes(data[: 512 * 1024]).best()
    if best is None:
        return None
    return normalise_charset(best.encoding)


# --------------------------------------------------------------------------- text helpers

# Only runs that change (not a lone space): on a long text each match is a piece of the result.
_WS = re.compile(r"(?: [ \t\r\n\f\v\u00a0\u200b]+|[\t\r\n\f\v\u00a0\u200b][ \t\r\n\f\v\u00a0\u200b]*)")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


_HSPACE = re.compile(r"(?: [ \t\f\v\u00a0\u200b]+|[\t\f\v\u00a0\u200b][ \t\f\v\u00a0\u200b]*)")
_LINE_BREAKS = re.compile(r" ?(?:\r\n?|\n)(?: ?(?:\r\n?|\n))* ?")


def clean_text(text: str, keep_newlines: bool = False) -> str:
    """Fold whitespace runs (optionally keeping line breaks) and drop control characters."""
    if _CONTROL.search(text):
        text = _CONTROL.sub("", text)
    if not keep_newlines:
        return _WS.sub(" ", text).strip()
    # whole-text passes (not one per line): fold spaces, then collapse blank lines
    return _LINE_BREAKS.sub("\n", _HSPACE.sub(" ", text)).strip()


# --------------------------------------------------------------------------- blocks


class BlockBuilder:
    """Accumulates blocks in document order and tracks the heading path.

    A heading block's ``heading_path`` ends with the heading itself; every other block carries
    the chain of headings it sits under.
    """

    def __init__(self, max_blocks: int = 2_000_000, max_chars: int | None = None) -> None:
        self.blocks: list[Block] = []
        self._stack: list[tuple[int, str]] = []
        self._path: list[str] = []  # the stack's texts, shared by the blocks until the next heading
        self._max_blocks = max_blocks
        self._max_chars = max_chars
        self.chars = 0

    def charge(self, chars: int) -> None:
        """Count ``chars`` of output against ``max_chars`` *before* building a string that big."""
        self.chars += chars
        if self._max_chars is not None and self.chars > self._max_chars:
            raise ParseError(
                ParseErrorCode.TOO_LARGE, f"document text exceeds {self._max_chars} characters (limit max_chars)"
            )

    @property
    def room(self) -> int | None:
        """Characters that may still be added (None: no cap)."""
        return None if self._max_chars is None else max(0, self._max_chars - self.chars)

    def extend(self, blocks: list[Block]) -> None:
        """Append blocks built elsewhere (an embedded file's), counted against both caps."""
        if len(self.blocks) + len(blocks) > self._max_blocks:
            raise ParseError(ParseErrorCode.TOO_LARGE, f"more than {self._max_blocks} blocks with embedded files")
        self.charge(sum(len(block.text) for block in blocks))
        self.blocks.extend(blocks)

    @property
    def heading_path(self) -> list[str]:
        """The enclosing headings' texts: one list shared by every block under the same headings.

        Not a copy per block: on a page with a block every ~80 bytes the copies were a tenth of
        the parse's peak memory. Consumers read it; none may mutate it.
        """
        return self._path

    def _append(self, block: Block) -> Block:
        if len(self.blocks) >= self._max_blocks:
            raise ParseError(ParseErrorCode.TOO_LARGE, f"more than {self._max_blocks} blocks")
        self.charge(len(block.text))
        self.blocks.append(block)
        return block

    def _check_room(self, chars: int) -> None:
        if self._max_chars is not None and self.chars + chars > self._max_chars:
            self.charge(chars)

    def heading(
        self, text: str, level: int, positions: Sequence[Position] | None = None, **metadata: Any
    ) -> Block | None:
        text = clean_text(text)
        if not text:
            return None
        level = max(1, min(int(level), 9))
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, text))
        self._path = [text for _, text in self._stack]
        return self._append(
            Block(
                BlockKind.HEADING,
                text,
                level=level,
                heading_path=self.heading_path,
                positions=positions or (),
                metadata=metadata,
            )
        )

    def add(
        self,
        kind: BlockKind,
        text: str,
        positions: Sequence[Position] | None = None,
        rows: list[list[str]] | None = None,
        header: list[str] | None = None,
        level: int | None = None,
        **metadata: Any,
    ) -> Block | None:
        if not text or not text.strip():
            return None
        return self._append(
            Block(
                kind,
                text,
                level=level,
                heading_path=self.heading_path,
                positions=positions or (),
                rows=rows,
                header=header,
                metadata=metadata,
            )
        )

    def paragraph(self, text: str, positions: Sequence[Position] | None = None, **metadata: Any) -> Block | None:
        return self.add(BlockKind.PARAGRAPH, clean_text(text, keep_newlines=True), positions, **metadata)

    def table(
        self,
        rows: list[list[str]],
        header: list[str] | None,
        positions: Sequence[Position] | None = None,
        **metadata: Any,
    ) -> Block | None:
        rows = [r for r in rows if any(c.strip() for c in r)]
        if not rows and not (header and any(h.strip() for h in header)):
            return None
        # the joined text is built below: refuse it before it exists, not after
        self._check_room(sum(len(c) + 1 for r in [*rows, header or []] for c in r))
        lines = ["\t".join(header)] if header else []
        lines += ["\t".join(r) for r in rows]
        return self.add(BlockKind.TABLE, "\n".join(lines), positions, rows=rows, header=header, **metadata)


def table_text(rows: list[list[str]]) -> str:
    return "\n".join("\t".join(r) for r in rows)


# --------------------------------------------------------------------------- safe XML


def safe_xml_parser(**kwargs: Any) -> etree.XMLParser:
    """An XML parser that never resolves entities, never touches the network, keeps limits on."""
    return etree.XMLParser(
        resolve_entities=False, no_network=True, huge_tree=False, load_dtd=False, dtd_validation=False, **kwargs
    )


def parse_xml(data: bytes, what: str = "XML", max_depth: int | None = None) -> etree._Element:
    """Parse untrusted XML safely; malformed or over-deep input becomes ``ParseError(corrupt)``."""
    try:
        root = etree.fromstring(data, safe_xml_parser())
    except etree.XMLSyntaxError as exc:
        # libxml2 refuses depth > 256 without huge_tree: report it as what it is.
        code = (
            ParseErrorCode.BOMB if "depth" in str(exc).lower() or "nest" in str(exc).lower() else ParseErrorCode.CORRUPT
        )
        raise ParseError(code, f"{what}: {exc}") from exc
    if root is None:
        raise ParseError(ParseErrorCode.CORRUPT, f"{what}: empty document")
    return root
