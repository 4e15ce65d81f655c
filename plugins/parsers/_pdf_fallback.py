"""A second PDF reader (pypdf) for files pdfium refuses.

The PDF parser calls :func:`read_with_pypdf` when pdfium will not open a file that another
reader copes with: a damaged stream pdfium reports as "Data format error", or a password demand
for a file whose user password is empty but that pdfium still refuses (AES-256, revision 6;
ISO 32000-2 7.6.4.3.3: an empty user password opens such a file). pypdf reads it leniently
(``strict=False``), decrypts with the empty password and then the given one, and extracts the
text of each page (``page=n`` positions, paragraphs split at blank lines); outline entries whose
title is in the text of the page they point at become that page's headings.

Caps: ``Limits.max_pages``, the time budget checked before every page, and pypdf's own limits
(its :class:`pypdf.Configuration`): every per-filter decompression limit and the per-stream
decoding work are set to ``Limits.pdf_max_inflated``. Anything pypdf raises becomes a typed
``ParseError``.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from include.contract import ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits, clean_text
from plugins.parsers.registry import ParseContext

if TYPE_CHECKING:
    import pypdf

__all__ = ["read_with_pypdf"]

_PDF = "application/pdf"
_BLANK_LINES = re.compile(r"\n[ \t\r\f\v]*\n")
# outline entries looked at for headings: a real outline has hundreds, not tens of thousands
_MAX_OUTLINE = 10_000
_LIMIT_FIELDS = (
    "zlib_maximum_output_length",
    "lzw_maximum_output_length",
    "run_length_maximum_output_length",
    "jbig2_maximum_output_length",
    "brotli_maximum_output_length",
    "array_based_stream_maximum_output_length",
    "stream_decoding_work_maximum_length",
)


def read_with_pypdf(data: bytes, ctx: ParseContext, password: str | None, refusal: str) -> ParsedDocument:
    """Read ``data`` with pypdf; ``refusal`` is pdfium's reason, kept in the metadata."""
    # deferred: pypdf is only the fallback, and loading it cost every process that merely registers
    # the parsers (a no-change resync asks them for their versions) ~40 ms
    import pypdf
    from pypdf.errors import FileNotDecryptedError, LimitReachedError, PdfReadError, PyPdfError  # deferred: as pypdf

    limits = Limits.from_options(ctx.options)
    deadline = Deadline(limits.time_budget_s)
    capped = pypdf.get_configuration().with_overwrites(**dict.fromkeys(_LIMIT_FIELDS, int(limits.pdf_max_inflated)))
    try:
        with pypdf.apply_configuration(capped):
            return _read(data, limits, deadline, password, refusal)
    except ParseError:
        raise
    except LimitReachedError as exc:
        raise ParseError(ParseErrorCode.BOMB, f"pypdf: {exc}") from exc
    except (FileNotDecryptedError, NotImplementedError) as exc:
        raise ParseError(ParseErrorCode.ENCRYPTED, f"pypdf: {exc}") from exc
    except MemoryError as exc:
        raise ParseError(ParseErrorCode.TOO_LARGE, "pypdf: out of memory") from exc
    except RecursionError as exc:
        raise ParseError(ParseErrorCode.BOMB, "pypdf: objects nested too deep") from exc
    except (PdfReadError, PyPdfError, Exception) as exc:  # pypdf raises builtins on damaged files too
        raise ParseError(ParseErrorCode.CORRUPT, f"pypdf: {type(exc).__name__}: {exc}") from exc


def _read(data: bytes, limits: Limits, deadline: Deadline, password: str | None, refusal: str) -> ParsedDocument:
    import pypdf  # deferred: see read_with_pypdf

    reader = pypdf.PdfReader(io.BytesIO(data), strict=False)
    encrypted = reader.is_encrypted
    if encrypted:
        _decrypt(reader, password)
    pages = len(reader.pages)
    if pages > limits.max_pages:
        raise ParseError(ParseErrorCode.TOO_LARGE, f"{pages} pages exceeds the {limits.max_pages}-page cap")
    headings = _outline_by_page(reader, deadline)
    builder = BlockBuilder(limits.max_blocks, limits.max_chars)
    for number, page in enumerate(reader.pages, start=1):
        deadline.check(f"pypdf page {number}")
        text = page.extract_text() or ""
        builder.charge(0)  # the page's text is counted as its blocks are added
        _add_page(builder, number, text, headings.get(number - 1, []))
    if not builder.blocks:
        raise ParseError(ParseErrorCode.EMPTY, "no text content", {"reader": "pypdf", "pdfium_refused": refusal})
    metadata: dict[str, Any] = {"reader": "pypdf", "pdfium_refused": refusal, "pages": pages}
    if encrypted:
        metadata["encrypted"] = True
    info = _info(reader)
    title = info.pop("title", None)
    metadata.update(info)
    return ParsedDocument(blocks=builder.blocks, title=title, media_type=_PDF, metadata=metadata)


def _decrypt(reader: pypdf.PdfReader, password: str | None) -> None:
    import pypdf  # deferred: see read_with_pypdf

    for candidate in ("", password):
        if candidate is not None and reader.decrypt(candidate) != pypdf.PasswordType.NOT_DECRYPTED:
            return
    raise ParseError(ParseErrorCode.ENCRYPTED, "password-protected PDF: the password is missing or wrong")


def _add_page(builder: BlockBuilder, number: int, text: str, titles: list[tuple[int, str]]) -> None:
    position = [Position(page=number)]
    folded = " ".join(text.split()).lower()
    for level, title in titles:
        # a bookmark is a heading only where its title is on the page it points at
        if title and " ".join(title.split()).lower() in folded:
            builder.heading(title, level, position)
    for paragraph in _BLANK_LINES.split(text):
        builder.paragraph(paragraph, position)


def _walk_outline(items: list[Any], level: int) -> Iterator[tuple[int, Any]]:
    stack = [(level, iter(items))]
    while stack:
        depth, entries = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
        elif isinstance(entry, list):
            stack.append((depth + 1, iter(entry)))
        else:
            yield depth, entry


def _outline_by_page(reader: pypdf.PdfReader, deadline: Deadline) -> dict[int, list[tuple[int, str]]]:
    """Outline titles by 0-based page index, with levels; a broken outline gives none."""
    by_page: dict[int, list[tuple[int, str]]] = {}
    try:
        outline = reader.outline
        for count, (level, entry) in enumerate(_walk_outline(outline, 1)):
            if count >= _MAX_OUTLINE:
                break
            if count % 256 == 0:
                deadline.check("pypdf outline")
            page = reader.get_destination_page_number(entry)
            title = clean_text(str(getattr(entry, "title", "") or ""))
            if page is not None and page >= 0 and title:
                by_page.setdefault(page, []).append((min(level, 9), title))
    except ParseError:
        raise
    except Exception:  # the outline is optional: a damaged one must not lose the text
        return {}
    return by_page


def _info(reader: pypdf.PdfReader) -> dict[str, str]:
    try:
        info = reader.metadata
    except Exception:  # a damaged /Info (often what pdfium refused) is no reason to lose the text
        return {}
    if not info:
        return {}
    out = {"title": info.title, "author": info.author, "subject": info.subject}
    return {key: clean_text(str(value)) for key, value in out.items() if value and clean_text(str(value))}
