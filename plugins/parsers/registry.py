"""Parser registry: media type -> pure ``bytes -> ParsedDocument`` function.

Parsers register themselves with :func:`register_parser`; :func:`parse_document` sniffs the
media type from the bytes (falling back to the declared type and the file name), picks the
parser and stamps its name and version on the result. A parser signals a bad document by
raising :class:`include.contract.ParseError`; any other exception escaping a parser is
converted into ``ParseError(corrupt)`` here so that one file never fails a batch.
"""

from __future__ import annotations

import importlib
import mimetypes
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, overload
from urllib.parse import urlsplit

from include.contract import ParsedDocument, ParseError, ParseErrorCode, RawDocument
from plugins.parsers._common import Limits, document_budget, document_embed_allowance

__all__ = [
    "BUILTIN_PARSERS",
    "EMBEDDED_IMAGES",
    "ParseContext",
    "ParserSpec",
    "check_engines",
    "choose_engine",
    "engine_choices",
    "get_parser",
    "load_builtins",
    "parse_document",
    "parser_versions",
    "register_parser",
    "sniff_media_type",
]

# The modules that register the built-in parsers when imported, by dotted path (as Scrapy names
# its components in settings): the registry loads them itself, so it never imports a parser module
# and no parser module is imported before the registry it registers with. Sniffers run in
# registration order, so ``sniff`` (the magic numbers) comes first, then the rest, sorted.
BUILTIN_PARSERS: tuple[str, ...] = (
    "plugins.parsers.sniff",
    "plugins.parsers.csv_tsv",
    "plugins.parsers.docx",
    "plugins.parsers.epub",
    "plugins.parsers.html",
    "plugins.parsers.image",
    "plugins.parsers.jsonl",
    "plugins.parsers.legacy",
    "plugins.parsers.markdown",
    "plugins.parsers.mhtml",
    "plugins.parsers.notebook",
    "plugins.parsers.odf",
    "plugins.parsers.pdf",
    "plugins.parsers.pptx",
    "plugins.parsers.rtf",
    "plugins.parsers.source",
    "plugins.parsers.structured",
    "plugins.parsers.text",
    "plugins.parsers.xlsx",
    "plugins.parsers.xmldoc",
)
_loaded = False


@dataclass(frozen=True, slots=True)
class ParseContext:
    """What a parser may know besides the bytes: names, declared type and its options."""

    file_name: str = ""
    media_type: str | None = None
    # the Content-Type the source declared, parameters included ("text/html; charset=gbk")
    declared_type: str | None = None
    url: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    # the engine chosen for this parse (option ``engines: {<engine_key>: name}``, else the
    # parser's default), for parsers that register more than one way to read a format
    engine: str | None = None


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
    # the ways this parser can read its format, default first ("auto", "text", "ocr" for PDF),
    # chosen per source with ``parser: {engines: {<engine_key>: <engine>}}``
    engines: tuple[str, ...] = ()
    engine_key: str = ""


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
    engines: tuple[str, ...] = (),
    engine_key: str = "",
) -> Callable[[ParserFn], ParserFn]:
    """Decorator: register ``fn`` for the given media types and file extensions.

    ``isolate=True`` runs the parser in a forked child process by default (option ``isolate``
    overrides), so a hang inside C code still ends at the time budget. ``engines`` names the
    ways the parser can read its format (default first); a source picks one with
    ``engines: {<engine_key>: <engine>}`` and the parser finds it in ``ParseContext.engine``.
    """

    def deco(fn: ParserFn) -> ParserFn:
        exts = tuple(e.lower().lstrip(".") for e in extensions)
        spec = ParserSpec(name, version, media_types, exts, fn, isolate, engines, engine_key or name)
        for mt in media_types:
            _BY_MEDIA_TYPE[mt] = spec
        for ext in spec.extensions:
            _BY_EXTENSION[ext] = spec
        return fn

    return deco


@overload
def register_sniffer(fn: Sniffer, *, text: bool = False) -> Sniffer: ...
@overload
def register_sniffer(fn: None = None, *, text: bool = False) -> Callable[[Sniffer], Sniffer]: ...
def register_sniffer(fn: Sniffer | None = None, *, text: bool = False) -> Sniffer | Callable[[Sniffer], Sniffer]:
    """Register a content sniffer ``(data, file_name) -> media type or None``; first hit wins.

    Magic-number sniffers (the default) run before the declared type and the file extension;
    ``text=True`` sniffers (HTML vs Markdown vs CSV ...) run only when neither identified a
    parser, because text formats are ambiguous by content and the name is the better hint.
    """

    def deco(f: Sniffer) -> Sniffer:
        (_TEXT_SNIFFERS if text else _SNIFFERS).append(f)
        return f

    return deco(fn) if fn is not None else deco


def load_builtins() -> None:
    """Import every module of :data:`BUILTIN_PARSERS` (they register themselves); once per process."""
    global _loaded
    if not _loaded:
        for path in BUILTIN_PARSERS:
            importlib.import_module(path)
        _loaded = True


def sniff_media_type(data: bytes, file_name: str = "", declared: str | None = None) -> str | None:
    """Media type: magic numbers, then the declared type, the extension, text sniffing."""
    load_builtins()
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


_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


def _claimed_binary_type(raw: RawDocument) -> str | None:
    """The PDF/Office type the declared type, the file name or the URL's path claims, if any."""
    declared = (raw.media_type or "").split(";")[0].strip().lower()
    if declared in BINARY_TYPES:
        return declared
    for name in (raw.file_name, urlsplit(raw.url).path if raw.url else ""):
        ext = name.rsplit(".", 1)[-1].lower() if "." in name.rsplit("/", 1)[-1] else ""
        spec = _BY_EXTENSION.get(ext)
        if spec is not None and spec.media_types[0] in BINARY_TYPES:
            return spec.media_types[0]
    return None


def _refuse_html_for_a_binary_claim(raw: RawDocument) -> None:
    """An HTML body where a PDF/Office file was promised is a login wall or an error page.

    Indexing it would file the sign-in form under the document's name; ``empty`` makes the run
    record it as skipped with this reason, and the next run looks at the URL again.
    """
    claimed = _claimed_binary_type(raw)
    if claimed is not None:
        raise ParseError(
            ParseErrorCode.EMPTY, f"login or error page: HTML served where {claimed} was expected ({raw.file_name})"
        )


def get_parser(media_type: str | None) -> ParserSpec | None:
    load_builtins()
    if media_type is None:
        return None
    return _BY_MEDIA_TYPE.get(media_type.split(";")[0].strip().lower())


def parser_versions() -> dict[str, str]:
    """Every registered parser's name with its version: what planning compares an item's recorded
    parser with (a new version re-processes the items that parser read)."""
    load_builtins()
    return {spec.name: spec.version for spec in _BY_MEDIA_TYPE.values()}


def parse_document(raw: RawDocument, options: Mapping[str, Any] | None = None) -> ParsedDocument:
    """Parse one raw document. Raises :class:`ParseError` (never anything else).

    The whole parse, and everything nested in it (an embedded file parsed through this function
    again included), runs under one deadline, the top-level document's ``time_budget_s``, and
    one embedded-file allowance (its ``embed_max_files``, ``embed_max_total``, ``max_chars``)."""
    limits = Limits.from_options(options)
    with document_budget(limits.time_budget_s), document_embed_allowance(limits):
        return _parse(raw, options)


def _parse(raw: RawDocument, options: Mapping[str, Any] | None) -> ParsedDocument:
    try:
        media_type = sniff_media_type(raw.data, raw.file_name, raw.media_type)
    except Exception as exc:  # a sniffer opening a hostile container (zip version, bad zlib stream)
        raise ParseError(
            ParseErrorCode.CORRUPT, f"cannot identify {raw.file_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    if media_type in _HTML_TYPES:
        _refuse_html_for_a_binary_claim(raw)
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
        engine=choose_engine(spec, options),
    )
    isolate = ctx.options.get("isolate", spec.isolate)
    doc = (
        _isolation().run_isolated(spec.name, lambda: _run(spec, raw.data, ctx), len(raw.data), ctx.options)
        if isolate
        else _run(spec, raw.data, ctx)
    )
    doc.parser = spec.name
    doc.parser_version = spec.version
    doc.engine = doc.engine or ctx.engine
    doc.media_type = doc.media_type or media_type
    if not doc.title:
        doc.title = raw.title
    return doc


def choose_engine(spec: ParserSpec, options: Mapping[str, Any] | None) -> str | None:
    """The engine ``options["engines"]`` picks for ``spec``'s format, else its default.

    An engine the parser does not have is refused (``unsupported``, naming the ones it has)
    rather than silently read another way: the source asked for something specific.
    """
    if not spec.engines:
        return None
    chosen = ((options or {}).get("engines") or {}).get(spec.engine_key)
    if chosen is None:
        return spec.engines[0]
    if chosen not in spec.engines:
        raise ParseError(
            ParseErrorCode.UNSUPPORTED,
            f"parser engine {chosen!r} for {spec.engine_key} is not one of {', '.join(spec.engines)}",
        )
    return str(chosen)


def engine_choices() -> dict[str, tuple[str, ...]]:
    """Every engine key with its engines (default first): what ``parser.engines`` may name."""
    load_builtins()
    choices = {spec.engine_key: spec.engines for spec in _BY_MEDIA_TYPE.values() if spec.engines}
    choices[EMBEDDED_IMAGES] = ("off", "ocr")  # images inside documents: read by the image parser
    return choices


# ``engines: {embedded_images: ocr}``: hand images inside documents to the image parser (OCR)
EMBEDDED_IMAGES = "embedded_images"


def check_engines(options: Mapping[str, Any] | None) -> None:
    """Refuse a source's ``engines`` that name a format or an engine no parser has (ValueError).

    Called when a run is planned, so a typo fails the run at once with the choices, instead of
    every document of that format failing one by one.
    """
    engines = (options or {}).get("engines")
    if engines is None:
        return
    if not isinstance(engines, Mapping):
        raise ValueError(f"parser.engines must be a mapping of format to engine, not {type(engines).__name__}")
    choices = engine_choices()
    for key, engine in engines.items():
        if key not in choices:
            raise ValueError(
                f"parser.engines: no parser has a choice of engine for {key!r} (known: {', '.join(sorted(choices))})"
            )
        if engine not in choices[key]:
            raise ValueError(f"parser.engines.{key}: {engine!r} is not one of {', '.join(choices[key])}")


def _isolation() -> Any:
    """The isolated-run module, loaded by dotted path on first use (as the built-in parsers are),
    so that parsing a DAG file, which reaches this registry for ``check_engines``, loads no
    parser machinery."""
    return importlib.import_module("plugins.parsers._isolated")


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
