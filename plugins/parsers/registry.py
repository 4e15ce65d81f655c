"""Parser registry: media type -> pure ``bytes -> ParsedDocument`` function.

Parsers register themselves with :func:`register_parser`; :func:`parse_document` sniffs the
media type from the bytes (falling back to the declared type and the file name), picks the
parser and stamps its name and version on the result. A parser signals a bad document by
raising :class:`include.contract.ParseError`; any other exception escaping a parser is
converted into ``ParseError(corrupt)`` here so that one file never fails a batch.
"""

from __future__ import annotations

import contextlib
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
    # run in a forked child with a hard deadline: for parsers whose C code may hang (pdfium)
    isolate: bool = False


_BY_MEDIA_TYPE: dict[str, ParserSpec] = {}
_BY_EXTENSION: dict[str, ParserSpec] = {}
Sniffer = Callable[[bytes, str], str | None]
_SNIFFERS: list[Sniffer] = []
_TEXT_SNIFFERS: list[Sniffer] = []

# Declared types that say nothing about the content: never trusted over sniffing.
_GENERIC_TYPES = frozenset(
    {
        "application/octet-stream",
        "binary/octet-stream",
        "application/x-download",
        "application/download",
        "application/unknown",
        "text/plain",
        "application/force-download",
    }
)
# Container formats: a name or a declared type only counts when the bytes' magic agrees,
# otherwise an HTML error page saved as ``report.pdf`` would reach the PDF parser.
BINARY_TYPES: set[str] = set()


def register_parser(
    name: str,
    version: str,
    media_types: tuple[str, ...],
    extensions: tuple[str, ...] = (),
    *,
    isolate: bool = False,
) -> Callable[[ParserFn], ParserFn]:
    """Decorator: register ``fn`` for the given media types and file extensions.

    ``isolate=True`` runs the parser in a forked child process by default (option ``isolate``
    overrides), so a hang inside C code still ends at the time budget.
    """

    def deco(fn: ParserFn) -> ParserFn:
        spec = ParserSpec(name, version, media_types, tuple(e.lower().lstrip(".") for e in extensions), fn, isolate)
        for mt in media_types:
            _BY_MEDIA_TYPE[mt] = spec
        for ext in spec.extensions:
            _BY_EXTENSION[ext] = spec
        return fn

    return deco


def register_sniffer(fn: Sniffer | None = None, *, text: bool = False) -> Any:
    """Register a content sniffer ``(data, file_name) -> media type or None``; first hit wins.

    Magic-number sniffers (the default) run before the declared type and the file extension;
    ``text=True`` sniffers (HTML vs Markdown vs CSV ...) run only when neither identified a
    parser, because text formats are ambiguous by content and the name is the better hint.
    """

    def deco(f: Sniffer) -> Sniffer:
        (_TEXT_SNIFFERS if text else _SNIFFERS).append(f)
        return f

    return deco(fn) if fn is not None else deco


def _ensure_loaded() -> None:
    # Importing the package registers every built-in parser module.
    import plugins.parsers  # noqa: F401


def sniff_media_type(data: bytes, file_name: str = "", declared: str | None = None) -> str | None:
    """Media type: magic numbers, then the declared type, the extension, text sniffing."""
    _ensure_loaded()
    for sniffer in _SNIFFERS:
        found = sniffer(data, file_name)
        if found:
            return found
    base = declared.split(";")[0].strip().lower() if declared else ""
    if base in _BY_MEDIA_TYPE and base not in _GENERIC_TYPES and base not in BINARY_TYPES:
        return base
    ext = file_name.rsplit(".", 1)[-1].lower() if "." in file_name else ""
    by_ext = _BY_EXTENSION.get(ext)
    if by_ext is not None and by_ext.media_types[0] not in BINARY_TYPES:
        return by_ext.media_types[0]
    for sniffer in _TEXT_SNIFFERS:
        found = sniffer(data, file_name)
        if found:
            return found
    if base in _BY_MEDIA_TYPE and base not in BINARY_TYPES:
        return base
    if base in BINARY_TYPES or (by_ext is not None and by_ext.media_types[0] in BINARY_TYPES):
        # claimed to be PDF/Office but the bytes say otherwise
        return "application/octet-stream"
    guessed, _ = mimetypes.guess_type(file_name)
    return guessed


def get_parser(media_type: str | None) -> ParserSpec | None:
    _ensure_loaded()
    if media_type is None:
        return None
    return _BY_MEDIA_TYPE.get(media_type.split(";")[0].strip().lower())


def parse_document(raw: RawDocument, options: Mapping[str, Any] | None = None) -> ParsedDocument:
    """Parse one raw document. Raises :class:`ParseError` (never anything else)."""
    try:
        media_type = sniff_media_type(raw.data, raw.file_name, raw.media_type)
    except Exception as exc:  # a sniffer opening a hostile container (zip version, bad zlib stream)
        raise ParseError(
            ParseErrorCode.CORRUPT, f"cannot identify {raw.file_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    spec = get_parser(media_type)
    if spec is None:
        raise ParseError(
            ParseErrorCode.UNSUPPORTED,
            f"no parser for media type {media_type!r} ({raw.file_name}); declared {raw.media_type!r}",
        )
    ctx = ParseContext(
        file_name=raw.file_name,
        media_type=media_type,
        declared_type=raw.media_type,
        url=raw.url,
        options=options or {},
    )
    isolate = ctx.options.get("isolate", spec.isolate)
    doc = _run_isolated(spec, raw.data, ctx) if isolate else _run(spec, raw.data, ctx)
    doc.parser = spec.name
    doc.parser_version = spec.version
    doc.media_type = doc.media_type or media_type
    if not doc.title:
        doc.title = raw.title
    return doc


def _run(spec: ParserSpec, data: bytes, ctx: ParseContext) -> ParsedDocument:
    try:
        return spec.fn(data, ctx)
    except ParseError:
        raise
    except MemoryError as exc:
        raise ParseError(ParseErrorCode.TOO_LARGE, f"{spec.name}: out of memory") from exc
    except RecursionError as exc:
        raise ParseError(ParseErrorCode.BOMB, f"{spec.name}: nesting too deep") from exc
    except Exception as exc:  # a parser bug or a malformed file must not fail the batch
        raise ParseError(ParseErrorCode.CORRUPT, f"{spec.name}: {type(exc).__name__}: {exc}") from exc


def _run_isolated(spec: ParserSpec, data: bytes, ctx: ParseContext) -> ParsedDocument:
    """Run the parser in a forked child; kill it when the time budget (+ grace) runs out.

    Cooperative deadline checks cannot interrupt a C library stuck inside one call; a process
    can always be killed. A bare ``os.fork`` (not :mod:`multiprocessing`) keeps start-up cheap,
    needs no re-import, and also works inside daemonic worker processes, which multiprocessing
    refuses to let have children. The child reports through a pipe as JSON and leaves with
    ``os._exit`` so no inherited atexit handler or buffer runs twice.
    """
    import json
    import os
    import select
    import signal
    import time

    from plugins.parsers._common import Limits

    budget = Limits.from_options(ctx.options).time_budget_s
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        status = 0
        try:
            os.close(read_fd)
            try:
                result: dict[str, Any] = {"ok": _run(spec, data, ctx).to_dict()}
            except ParseError as exc:
                result = {"error": [exc.code.value, exc.message]}
            payload = json.dumps(result).encode("utf-8")
            view = memoryview(payload)
            while view:
                view = view[os.write(write_fd, view) :]
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(write_fd)
    chunks: list[bytes] = []
    deadline = time.monotonic() + budget + 2.0
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ParseError(ParseErrorCode.TIMEOUT, f"{spec.name}: no result within the {budget:g}s time budget")
            ready, _, _ = select.select([read_fd], [], [], remaining)
            if ready:
                chunk = os.read(read_fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        os.close(read_fd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _, wait_status = os.waitpid(pid, 0)
    if not chunks:  # the child died without a word: segfault in C code, or killed for memory
        raise ParseError(ParseErrorCode.CORRUPT, f"{spec.name}: parser process died (status {wait_status})")
    try:
        result = json.loads(b"".join(chunks))
    except ValueError as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"{spec.name}: parser process died mid-answer") from exc
    if "ok" in result:
        return ParsedDocument.from_dict(result["ok"])
    raise ParseError(result["error"][0], result["error"][1])
