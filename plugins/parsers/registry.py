"""Parser registry: media type -> pure ``bytes -> ParsedDocument`` function.

Parsers register themselves with :func:`register_parser`; :func:`parse_document` sniffs the
media type from the bytes (falling back to the declared type and the file name), picks the
parser and stamps its name and version on the result. A parser signals a bad document by
raising :class:`include.contract.ParseError`; any other exception escaping a parser is
converted into ``ParseError(corrupt)`` here so that one file never fails a batch.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from include.contract import ParsedDocument, ParseError, ParseErrorCode, RawDocument

__all__ = ["ParseContext", "ParserSpec", "get_parser", "parse_document", "register_parser", "sniff_media_type"]


@dataclass(frozen=True, slots=True)
class ParseContext:
    """What a parser may know besides the bytes: names, declared type and its options."""

    file_name: str = ""
    media_type: str | None = None
    # the Content-Type the source declared, parameters included ("text/html; charset=gbk")
    declared_type: str | None = None
    url: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


ParserFn = Callable[[bytes, ParseContext], ParsedDocument]


@dataclass(frozen=True, slots=True)
class ParserSpec:
    name: str
    version: str
    media_types: tuple[str, ...]
    extensions: tuple[str, ...]
    fn: ParserFn


_BY_MEDIA_TYPE: dict[str, ParserSpec] = {}
_BY_EXTENSION: dict[str, ParserSpec] = {}
_SNIFFERS: list[Callable[[bytes, str], str | None]] = []


def register_parser(
    name: str, version: str, media_types: tuple[str, ...], extensions: tuple[str, ...] = ()
) -> Callable[[ParserFn], ParserFn]:
    """Decorator: register ``fn`` for the given media types and file extensions."""

    def deco(fn: ParserFn) -> ParserFn:
        spec = ParserSpec(name, version, media_types, tuple(e.lower().lstrip(".") for e in extensions), fn)
        for mt in media_types:
            _BY_MEDIA_TYPE[mt] = spec
        for ext in spec.extensions:
            _BY_EXTENSION[ext] = spec
        return fn

    return deco


def register_sniffer(fn: Callable[[bytes, str], str | None]) -> Callable[[bytes, str], str | None]:
    """Register a content sniffer ``(data, file_name) -> media type or None``; first hit wins."""
    _SNIFFERS.append(fn)
    return fn


def _ensure_loaded() -> None:
    # Importing the package registers every built-in parser module.
    import plugins.parsers  # noqa: F401


def sniff_media_type(data: bytes, file_name: str = "", declared: str | None = None) -> str | None:
    """Media type by content first, then the declared type, then the file extension."""
    _ensure_loaded()
    for sniffer in _SNIFFERS:
        found = sniffer(data, file_name)
        if found:
            return found
    if declared:
        base = declared.split(";")[0].strip().lower()
        if base in _BY_MEDIA_TYPE:
            return base
    ext = file_name.rsplit(".", 1)[-1].lower() if "." in file_name else ""
    if ext in _BY_EXTENSION:
        return _BY_EXTENSION[ext].media_types[0]
    guessed, _ = mimetypes.guess_type(file_name)
    return guessed


def get_parser(media_type: str | None) -> ParserSpec | None:
    _ensure_loaded()
    if media_type is None:
        return None
    return _BY_MEDIA_TYPE.get(media_type.split(";")[0].strip().lower())


def parse_document(raw: RawDocument, options: Mapping[str, Any] | None = None) -> ParsedDocument:
    """Parse one raw document. Raises :class:`ParseError` (never anything else)."""
    media_type = sniff_media_type(raw.data, raw.file_name, raw.media_type)
    spec = get_parser(media_type)
    if spec is None:
        raise ParseError(ParseErrorCode.UNSUPPORTED, f"no parser for media type {media_type!r} ({raw.file_name})")
    ctx = ParseContext(
        file_name=raw.file_name,
        media_type=media_type,
        declared_type=raw.media_type,
        url=raw.url,
        options=options or {},
    )
    try:
        doc = spec.fn(raw.data, ctx)
    except ParseError:
        raise
    except MemoryError as exc:
        raise ParseError(ParseErrorCode.TOO_LARGE, f"{spec.name}: out of memory") from exc
    except Exception as exc:  # a parser bug or a malformed file must not fail the batch
        raise ParseError(ParseErrorCode.CORRUPT, f"{spec.name}: {type(exc).__name__}: {exc}") from exc
    doc.parser = spec.name
    doc.parser_version = spec.version
    doc.media_type = doc.media_type or media_type
    if not doc.title:
        doc.title = raw.title
    return doc
