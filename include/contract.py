"""The pipeline contract: the typed records that cross every seam.

A document travels  connector -> Change -> RawDocument -> ParsedDocument -> Chunk -> index.
Every record here is a plain dataclass that round-trips through JSON (``to_dict`` /
``from_dict``) so that stages running in different Airflow worker processes exchange them
through the staging area; XCom only ever carries small manifests that point at them.

Nothing in this module does I/O.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from xxhash import xxh3_128_hexdigest

__all__ = [
    "Block",
    "BlockKind",
    "Change",
    "ChangeKind",
    "Chunk",
    "ParseError",
    "ParseErrorCode",
    "ParsedDocument",
    "Position",
    "RawDocument",
    "VersionEvidence",
    "content_chunk_id",
    "content_hash",
    "document_id",
    "options_hash",
    "text_hash",
    "utf8_hash",
]


# --------------------------------------------------------------------------- identity


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_hash(text: str) -> str:
    """A document's content hash: its extracted text with whitespace runs folded (SHA-256, 32 hex).

    The name means this one thing everywhere: ``ParsedDocument.content_hash()``, the state
    store's ``content_hash``, ``VersionEvidence.content_hash`` (the version evidence of a source
    that gives no ETag), ``DocumentRecord.content_hash`` and the index's ``doc_content_hash``.
    Cosmetic reflows do not count, so a re-saved but unchanged document is skipped. A chunk's
    hash is :func:`text_hash` instead (``Chunk.text_hash``), where every character counts.
    """
    return _sha256(" ".join(text.split()).encode("utf-8"))[:32]


def text_hash(text: str) -> str:
    """A chunk's text hash (``Chunk.text_hash``, the index's ``text_hash``): of the exact text.

    The upsert compares it with the stored one to decide whether a chunk must be rewritten.
    Unlike a document's :func:`content_hash` (whitespace folded), whitespace counts: a chunk
    whose text changed only in whitespace is a different chunk to the index. XXH3-128 rather
    than SHA-256: it only tells an upsert whether a chunk's text changed (128 bits make an
    accidental match negligible) and is computed for every chunk, where SHA-256 cost ~2% of
    the chunker's time.
    """
    return utf8_hash(text.encode("utf-8"))


# :func:`text_hash` of the text whose UTF-8 encoding is the argument (bytes or a memoryview; no
# decode needed). The C function itself, not a wrapper: chunkers call it for every chunk.
utf8_hash: Callable[[bytes | memoryview], str] = xxh3_128_hexdigest


def options_hash(options: dict[str, Any]) -> str:
    """Stable hash of an options mapping (key order does not matter)."""
    return _sha256(json.dumps(options, sort_keys=True, default=str).encode("utf-8"))[:16]


def document_id(source: str, item_key: str) -> str:
    """Deterministic document id: the same source item always maps to the same id."""
    return _sha256(f"{source}\x1f{item_key}".encode())[:24]


def content_chunk_id(doc_id: str, chunk_text_hash: str, occurrence: int = 0) -> str:
    """A chunk's id: its document's id and its text's hash (:func:`text_hash`), not its position.

    An edit before a chunk leaves its id alone (``Chunk.sequence`` keeps the order), so the index
    and the vector cache keep it. ``occurrence`` tells apart identical chunks of one document: the
    k-th repeat of a text (counting from 0 in document order) gets ``-k``; the first has no suffix.
    """
    base = f"{doc_id}-{chunk_text_hash[:16]}"
    return f"{base}-{occurrence}" if occurrence else base


# --------------------------------------------------------------------------- changes


class ChangeKind(StrEnum):
    NEW = "new"
    CHANGED = "changed"
    UNCHANGED = "unchanged"
    DELETED = "deleted"


@dataclass(frozen=True, slots=True)
class VersionEvidence:
    """What a source told us about an item's version. Any field may be absent."""

    etag: str | None = None
    last_modified: str | None = None
    modified_time: str | None = None
    revision: str | None = None
    content_hash: str | None = None

    def to_dict(self) -> dict[str, str]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> VersionEvidence:
        data = data or {}
        return cls(**{f.name: data.get(f.name) for f in fields(cls)})

    def with_hash(self, digest: str) -> VersionEvidence:
        return VersionEvidence(
            etag=self.etag,
            last_modified=self.last_modified,
            modified_time=self.modified_time,
            revision=self.revision,
            content_hash=digest,
        )


@dataclass(slots=True)
class Change:
    """One item a connector reports during discovery.

    ``staged_path`` is set when discovery already downloaded the bytes (a crawler must read a
    page to find its links); ``fetch`` then reads them from staging instead of the network.
    """

    item_key: str
    kind: ChangeKind
    version: VersionEvidence = field(default_factory=VersionEvidence)
    url: str | None = None
    title: str | None = None
    reason: str | None = None
    staged_path: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "item_key": self.item_key,
            "kind": self.kind.value,
            "version": self.version.to_dict(),
            "url": self.url,
            "title": self.title,
            "reason": self.reason,
            "staged_path": self.staged_path,
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Change:
        return cls(
            item_key=data["item_key"],
            kind=ChangeKind(data["kind"]),
            version=VersionEvidence.from_dict(data.get("version")),
            url=data.get("url"),
            title=data.get("title"),
            reason=data.get("reason"),
            staged_path=data.get("staged_path"),
            metadata=dict(data.get("metadata") or {}),
        )


# --------------------------------------------------------------------------- raw documents


@dataclass(slots=True)
class RawDocument:
    """Bytes as the source delivered them, plus what we know about them."""

    item_key: str
    data: bytes
    file_name: str
    media_type: str | None = None
    url: str | None = None
    title: str | None = None
    version: VersionEvidence = field(default_factory=VersionEvidence)
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "item_key": self.item_key,
            "data_b64": base64.b64encode(self.data).decode("ascii"),
            "file_name": self.file_name,
            "media_type": self.media_type,
            "url": self.url,
            "title": self.title,
            "version": self.version.to_dict(),
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RawDocument:
        return cls(
            item_key=data["item_key"],
            data=base64.b64decode(data["data_b64"]),
            file_name=data["file_name"],
            media_type=data.get("media_type"),
            url=data.get("url"),
            title=data.get("title"),
            version=VersionEvidence.from_dict(data.get("version")),
            metadata=dict(data.get("metadata") or {}),
        )


# --------------------------------------------------------------------------- parsed documents


class BlockKind(StrEnum):
    HEADING = "heading"
    PARAGRAPH = "paragraph"
    TABLE = "table"
    LIST = "list"
    CODE = "code"


@dataclass(slots=True)
class Position:
    """Where a block sits in its source. Fill what the format has; leave the rest None.

    ``bbox`` is (x0, top, x1, bottom) in PDF points; ``row``/``line`` are 1-based;
    ``path`` is an element path (``/html/body/main/p[3]``, ``$.items[2].name``).
    """

    page: int | None = None
    bbox: tuple[float, float, float, float] | None = None
    sheet: str | None = None
    row: int | None = None
    line: int | None = None
    slide: int | None = None
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        # field by field, not dataclasses.asdict: its deep copy made this the hot spot of staging
        out: dict[str, Any] = {}
        for name in _POSITION_FIELDS:
            value = getattr(self, name)
            if value is not None:
                out[name] = list(value) if name == "bbox" else value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Position:
        bbox = data.get("bbox")
        return cls(
            page=data.get("page"),
            bbox=tuple(bbox) if bbox else None,
            sheet=data.get("sheet"),
            row=data.get("row"),
            line=data.get("line"),
            slide=data.get("slide"),
            path=data.get("path"),
        )


_POSITION_FIELDS = ("page", "bbox", "sheet", "row", "line", "slide", "path")


@dataclass(slots=True)
class Block:
    """One ordered unit of a parsed document.

    ``text`` is always the block's full plain text (for a table: its rows joined with tabs and
    newlines), so a consumer that ignores structure loses nothing. Tables additionally carry
    ``rows`` (a list of rows of cell strings) and ``header`` (the header row or None).
    ``heading_path`` is the chain of enclosing headings, outermost first.

    ``positions`` defaults to one shared empty tuple, not a new list per block: most formats
    have no positions, and a large document would otherwise carry tens of thousands of empty
    lists that every consumer asking "any positions?" has to visit one by one (on the chunker
    benchmark corpus that visit was a tenth of the chunker's own time). Give a list when there
    are positions; never mutate the default.
    """

    kind: BlockKind
    text: str
    level: int | None = None
    heading_path: list[str] = field(default_factory=list)
    positions: Sequence[Position] = ()
    rows: list[list[str]] | None = None
    header: list[str] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind.value, "text": self.text}
        if self.level is not None:
            out["level"] = self.level
        if self.heading_path:
            out["heading_path"] = self.heading_path
        if self.positions:
            out["positions"] = [p.to_dict() for p in self.positions]
        if self.rows is not None:
            out["rows"] = self.rows
        if self.header is not None:
            out["header"] = self.header
        if self.metadata:
            out["metadata"] = self.metadata
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Block:
        return cls(
            kind=BlockKind(data["kind"]),
            text=data["text"],
            level=data.get("level"),
            heading_path=list(data.get("heading_path") or []),
            positions=[Position.from_dict(p) for p in raw] if (raw := data.get("positions")) else (),
            rows=data.get("rows"),
            header=data.get("header"),
            metadata=dict(data.get("metadata") or {}),
        )


@dataclass(slots=True)
class ParsedDocument:
    """A parser's output: ordered blocks plus document metadata (title, author, language...)."""

    blocks: list[Block]
    title: str | None = None
    media_type: str | None = None
    parser: str | None = None
    parser_version: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # how the parser read it, for parsers with a choice (a PDF: "text", "ocr" or "auto")
    engine: str | None = None

    @property
    def text(self) -> str:
        return "\n".join(b.text for b in self.blocks)

    def content_hash(self) -> str:
        return content_hash(self.text)

    def to_dict(self) -> dict[str, Any]:
        return {
            "blocks": [b.to_dict() for b in self.blocks],
            "title": self.title,
            "media_type": self.media_type,
            "parser": self.parser,
            "parser_version": self.parser_version,
            "metadata": self.metadata,
            "engine": self.engine,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ParsedDocument:
        return cls(
            blocks=[Block.from_dict(b) for b in data.get("blocks") or []],
            title=data.get("title"),
            media_type=data.get("media_type"),
            parser=data.get("parser"),
            parser_version=data.get("parser_version"),
            metadata=dict(data.get("metadata") or {}),
            engine=data.get("engine"),
        )


class ParseErrorCode(StrEnum):
    UNSUPPORTED = "unsupported"
    ENCRYPTED = "encrypted"
    CORRUPT = "corrupt"
    TOO_LARGE = "too_large"
    BOMB = "bomb"
    TIMEOUT = "timeout"
    EMPTY = "empty"


class ParseError(Exception):
    """A document could not be parsed. Recorded for that document; never fails a batch.

    ``details`` is what the parser found out on the way, as plain JSON (a fully scanned PDF:
    ``{"needs_ocr": true, "ocr_pages": [...]}``); the run records its warning keys in the item's
    lineage like a parsed document's metadata. It is copied through JSON here, so it crosses
    the isolated parser's pipe and the stage manifests unchanged (a value JSON cannot hold
    becomes its ``str``).
    """

    def __init__(self, code: ParseErrorCode | str, message: str, details: Mapping[str, Any] | None = None) -> None:
        self.code = ParseErrorCode(code)
        self.message = message
        self.details: dict[str, Any] = json.loads(json.dumps(dict(details), default=str)) if details else {}
        super().__init__(f"{self.code.value}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception pickles as cls(*self.args), and args holds the formatted text only
        return (type(self), (self.code.value, self.message, self.details or None))

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code.value, "message": self.message, "details": self.details}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ParseError:
        return cls(d["code"], d["message"], d.get("details"))


# --------------------------------------------------------------------------- chunks

# What ``Chunk.text_hash`` was called in staged chunk files before it was renamed (the name now
# means a document's hash only); a run resumed across the upgrade still reads its staged chunks.
_LEGACY_TEXT_HASH_KEY = "content_hash"


@dataclass(slots=True)
class Chunk:
    """What the index stores and a retriever returns."""

    chunk_id: str
    doc_id: str
    sequence: int
    text: str
    token_count: int
    text_hash: str  # text_hash(text): exact, so the upsert rewrites any changed text
    heading_path: list[str] = field(default_factory=list)
    positions: list[Position] = field(default_factory=list)
    kind: str = "text"  # "text" or "table"
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "chunk_id": self.chunk_id,
            "doc_id": self.doc_id,
            "sequence": self.sequence,
            "text": self.text,
            "token_count": self.token_count,
            "text_hash": self.text_hash,
            "heading_path": self.heading_path,
            "positions": [p.to_dict() for p in self.positions],
            "kind": self.kind,
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Chunk:
        return cls(
            chunk_id=data["chunk_id"],
            doc_id=data["doc_id"],
            sequence=data["sequence"],
            text=data["text"],
            token_count=data["token_count"],
            # chunks a run staged before the rename (chunks/<doc>.json) carry the old key
            text_hash=data["text_hash"] if "text_hash" in data else data[_LEGACY_TEXT_HASH_KEY],
            heading_path=list(data.get("heading_path") or []),
            positions=[Position.from_dict(p) for p in data.get("positions") or []],
            kind=data.get("kind", "text"),
            metadata=dict(data.get("metadata") or {}),
        )
