"""Jupyter notebooks (``.ipynb``, nbformat 4 and 3): cells in order, each with its path.

* markdown cells go through the Markdown parser (headings, lists, tables, fences as they are in
  a ``.md``); their headings carry on across cells, so a code cell sits under the heading of
  the markdown cell above it;
* code cells are CODE blocks with the notebook's language (``metadata.kernelspec.language``,
  else ``metadata.language_info.name``; v3: the cell's ``language``), indentation kept;
* outputs are text blocks (``metadata.output_type``): stream text, the ``text/plain`` (else
  ``text/markdown``, else ``text/html`` stripped of its tags and scripts) of results and
  displays, and ``ename: evalue`` of errors (tracebacks are ANSI-coloured frames of the kernel,
  not content). Images and scripts are skipped, and so is a ``<Figure ...>``/``<... at 0x..>``
  repr that only names the object;
* raw cells are paragraphs.

Positions are paths into the JSON: ``cells[3]``, outputs ``cells[3].outputs[0]`` (v3:
``worksheets[0].cells[3]``). Format: nbformat's JSON schema (nbformat.v4.schema.json, and v3's).

Memory: a notebook is read lazily with msgspec (``msgspec.Raw``: each level's members stay
slices of the input until they are needed), so images are never decoded and a multiline string
(a list of lines) is decoded a chunk at a time and no further than what is kept. A cell's
outputs together keep at most ``max_cell_output_chars`` characters (option; default
``CELL_OUTPUT_CHARS``); the rest is dropped, the block where the cut fell says
``output_cut: true`` and the document's metadata counts the cells cut (``outputs_cut``). A
cell's source is content: one longer than what is left of ``max_chars`` is ``too_large``. Lines
are kept without splitting a source into line objects. Before: a 16M-line output (208 MB) read
by ``json.loads`` and ``splitlines`` reached 2.5 GB before ``too_large``. The parser also runs
isolated (a forked child under the registry's memory cap), for whatever else a hostile file finds.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits, clean_text, decode_text
from plugins.parsers.jsonl import NOTEBOOK
from plugins.parsers.registry import ParseContext, get_parser, register_parser
from plugins.parsers.text import keep_lines

__all__ = ["CELL_OUTPUT_CHARS", "kept_lines", "parse_notebook"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_REPR = re.compile(r"<[^<>\n]+>")
_OUTPUT_LINES = 200  # an output longer than this is cut into blocks of this many lines
CELL_OUTPUT_CHARS = 1 << 20  # characters of output one cell keeps (all its outputs together)

Fields = dict[str, msgspec.Raw]  # a JSON object's members, each still its raw JSON
_OBJECT = msgspec.json.Decoder(Fields)
_ARRAY = msgspec.json.Decoder(list[msgspec.Raw])
_STRINGS = msgspec.json.Decoder(list[str])
_STRING = msgspec.json.Decoder(str)
_VALUE = msgspec.json.Decoder()
_SMALL = 64 * 1024  # raw bytes of a field read whole (cell_type, language, level): more is not one
# whole string items of a JSON array, each with its comma; and one item with what ends it
_STRING_ITEMS = re.compile(rb'(?:\s*+"(?:[^"\\]++|\\.)*+"\s*+,)*+', re.S)
_STRING_ITEM = re.compile(rb'\s*+"(?:[^"\\]++|\\.)*+"\s*+([,\]])', re.S)
_CHUNK = 1 << 20  # raw bytes of a list of lines decoded at a time


@dataclass(slots=True)
class _Cell:
    path: str
    kind: str  # markdown | code | raw | heading (v3)
    source: str
    language: str | None = None
    level: int = 1
    # (index in the cell's outputs, output_type, text, whether the cut fell in it) of the
    # outputs that have text
    outputs: list[tuple[int, str, str, bool]] = field(default_factory=list)


def _opens(raw: msgspec.Raw | None, char: bytes) -> bool:
    return raw is not None and memoryview(raw)[:1] == char


def _fields(raw: msgspec.Raw | None) -> Fields:
    """An object's members (raw); ``{}`` for anything that is not an object."""
    return _OBJECT.decode(raw) if raw is not None and _opens(raw, b"{") else {}


def _items(raw: msgspec.Raw | None) -> list[msgspec.Raw]:
    return _ARRAY.decode(raw) if raw is not None and _opens(raw, b"[") else []


def _small(raw: msgspec.Raw | None) -> Any:
    """A field's value when it is small enough to be a name or a number, else None."""
    return _VALUE.decode(raw) if raw is not None and len(memoryview(raw)) <= _SMALL else None


def _multiline(raw: msgspec.Raw | None, cap: int) -> tuple[str, bool]:
    """nbformat's multiline string (a string or a list of lines), at most ``cap`` characters,
    and whether it was cut there.

    A list is decoded a chunk of lines at a time and not past the cap, so a 16M-line output
    costs what is kept, not 16M string objects. Lines keep their newline from nbformat 3 on;
    nbformat 2 wrote them without, and nbformat's own reader (``v2.rwbase._join_lines``) tells
    the two apart by the first line. An item that is not a string ends the text.
    """
    if raw is None:
        return "", False
    view = memoryview(raw)
    if _opens(raw, b'"'):
        text = _STRING.decode(view)
        return (text, False) if len(text) <= cap else (text[:cap], True)
    if not _opens(raw, b"["):
        return "", False
    pieces: list[str] = []
    kept, pos, end, sep = 0, 1, len(view), ""
    while True:
        stop = _STRING_ITEMS.match(view, pos, min(end, pos + _CHUNK)).end()  # type: ignore[union-attr]
        last = False
        if stop > pos:  # whole lines within the chunk: one decode for all of them
            lines = _STRINGS.decode(b"[" + view[pos : stop - 1] + b"]")
        else:  # the last line, or one longer than a chunk
            item = _STRING_ITEM.match(view, pos)
            if item is None:  # "]", or an item that is not a string
                break
            lines, stop, last = [_STRING.decode(view[pos : item.start(1)])], item.end(), item.group(1) == b"]"
        if not pieces:
            sep = "" if lines[0].endswith(("\n", "\r")) else "\n"
        chunk = (sep if pieces else "") + sep.join(lines)
        if kept + len(chunk) > cap:
            pieces.append(chunk[: cap - kept])
            return "".join(pieces), True
        pieces.append(chunk)
        kept, pos = kept + len(chunk), stop
        if last:
            break
    return "".join(pieces), False


# a line's trailing white space and its break (str.splitlines' boundaries), and a last line's
_BREAK = "\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # the characters themselves, in a class below
_BREAKS = frozenset(_BREAK)
_LINE_END = re.compile(rf"[^\S{_BREAK}]*(?:\r\n|[{_BREAK}])")
_LAST_LINE_END = re.compile(rf"[^\S{_BREAK}]+\Z")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def kept_lines(text: str) -> str:
    """``keep_lines(text.splitlines())`` without a string object per line: each line less its
    trailing white space, joined by ``\\n``, control characters dropped."""
    ends_with_break = text[-1:] in _BREAKS  # splitlines has no line after a last break
    text = _LINE_END.sub("\n", _LAST_LINE_END.sub("", text))
    text = text[:-1] if ends_with_break and text else text
    return _CONTROL.sub("", text) if _CONTROL.search(text) else text


def _html_text(fragment: str) -> str:
    from lxml import html as lxml_html  # only for outputs that are HTML alone

    try:
        el = lxml_html.fragment_fromstring(fragment, create_parent="div")
    except Exception:  # markup lxml cannot read at all: the text between the tags
        return re.sub(r"<[^>]+>", " ", fragment)
    for bad in el.xpath(".//script|.//style"):
        bad.drop_tree()
    # spaced, then folded: a DataFrame's cells must not run together
    return clean_text(" ".join(el.itertext()), keep_newlines=True)


def _bundle_text(bundle: Fields, cap: int) -> tuple[str, bool]:
    """The text of a MIME bundle (v4 ``data``; v3 keys without the type: ``text``, ``html``, ``png``)."""
    plain, cut = _multiline(bundle.get("text/plain", bundle.get("text")), cap)
    richer = any(
        k not in ("text/plain", "text", "metadata", "output_type", "execution_count", "prompt_number") for k in bundle
    )
    # a Python repr such as "<Figure size 640x480 with 1 Axes>" or "<IPython...HTML at 0x11>"
    # names the object, not its content: dropped when a richer form comes with it
    is_repr = bool(_REPR.fullmatch(plain.strip())) and (richer or " at 0x" in plain)
    if plain and not is_repr:
        return plain, cut
    markdown, cut = _multiline(bundle.get("text/markdown", bundle.get("markdown")), cap)
    if markdown:
        return markdown, cut
    html, cut = _multiline(bundle.get("text/html", bundle.get("html")), cap)
    return (_html_text(html) if html else ""), cut


def _output(out: Fields, cap: int) -> tuple[str, str, bool] | None:
    """``(output_type, text, whether it was cut at cap)`` of an output that has text."""
    kind = str(_small(out.get("output_type")) or "")
    if kind == "stream":
        text, cut = _multiline(out.get("text"), cap)
    elif kind in ("error", "pyerr"):
        (name, _), (value, _) = _multiline(out.get("ename"), cap), _multiline(out.get("evalue"), cap)
        text, cut = f"{name}: {value}"[:cap], len(name) + len(value) + 2 > cap
    elif _opens(out.get("data"), b"{"):  # v4 execute_result / display_data
        text, cut = _bundle_text(_fields(out["data"]), cap)
    else:  # v3 pyout / display_data keep the bundle in the output itself
        text, cut = _bundle_text(out, cap)
    text = _ANSI.sub("", text)
    return (kind, text, cut) if text.strip() else None


def _outputs(raw: msgspec.Raw | None, cap: int) -> list[tuple[int, str, str, bool]]:
    """A code cell's outputs that have text, ``cap`` characters of them all together."""
    found: list[tuple[int, str, str, bool]] = []
    for j, out in enumerate(_items(raw)):
        if cap <= 0:  # the cell's output allowance is spent: the rest is dropped
            if found:
                found[-1] = (*found[-1][:3], True)
            break
        got = _output(_fields(out), cap)
        if got is not None:
            found.append((j, *got))
            cap -= len(got[1])
    return found


@dataclass(frozen=True, slots=True)
class _Caps:
    source_room: Callable[[], int]  # characters the document has left, for a cell's source
    max_chars: int
    cell_output: int  # characters of output one cell keeps


def _cells(doc: Fields, language: str | None, caps: _Caps) -> Iterator[_Cell]:
    if _opens(doc.get("cells"), b"["):  # v4
        sheets: list[tuple[str, list[msgspec.Raw]]] = [("", _items(doc["cells"]))]
    else:  # v3: cells live in worksheets
        sheets = [
            (f"worksheets[{w}].", _items(_fields(ws)["cells"]))
            for w, ws in enumerate(_items(doc.get("worksheets")))
            if _opens(_fields(ws).get("cells"), b"[")
        ]
    for prefix, cells in sheets:
        for i, raw in enumerate(cells):
            cell = _fields(raw)
            if not _opens(raw, b"{"):
                continue
            path = f"{prefix}cells[{i}]"
            kind = str(_small(cell.get("cell_type")) or "")
            source, cut = _multiline(cell.get("source", cell.get("input")), caps.source_room())
            if cut:
                raise ParseError(
                    ParseErrorCode.TOO_LARGE,
                    f"notebook: {path}'s source exceeds {caps.max_chars} characters (max_chars)",
                )
            lang = _small(cell.get("language"))
            outputs = _outputs(cell.get("outputs"), caps.cell_output) if kind == "code" else []
            level = _small(cell.get("level"))
            yield _Cell(
                path,
                kind,
                source,
                lang if isinstance(lang, str) else language,
                level if isinstance(level, int) and not isinstance(level, bool) else 1,
                outputs,
            )


def _language(meta: Fields) -> str | None:
    for key, field_name in (("kernelspec", "language"), ("language_info", "name")):
        value = _small(_fields(meta.get(key)).get(field_name))
        if isinstance(value, str) and value:
            return value.lower()
    return None


def _markdown(cell: _Cell, builder: BlockBuilder, ctx: ParseContext) -> None:
    """Parse the cell as Markdown and re-add its blocks here, so headings nest across cells."""
    spec = get_parser("text/markdown")
    if spec is None:  # never: the Markdown parser is built in
        raise ParseError(ParseErrorCode.UNSUPPORTED, "notebook: no Markdown parser registered")
    try:
        parsed = spec.fn(cell.source.encode("utf-8"), ParseContext(file_name="cell.md", options=ctx.options))
    except ParseError as exc:
        if exc.code == ParseErrorCode.EMPTY:  # an empty cell, or one with only a comment
            return
        raise
    where = [Position(path=cell.path)]
    for block in parsed.blocks:
        if block.kind == BlockKind.HEADING:
            builder.heading(block.text, block.level or 1, where)
        else:
            builder.add(block.kind, block.text, where, block.rows, block.header, block.level, **block.metadata)


def _render_outputs(cell: _Cell, builder: BlockBuilder) -> None:
    for j, output_type, text, cut in cell.outputs:
        where = [Position(path=f"{cell.path}.outputs[{j}]")]
        lines = text.splitlines()  # at most the cell's output allowance
        starts = range(0, len(lines), _OUTPUT_LINES)
        for start in starts:
            extra: dict[str, Any] = {"output_cut": True} if cut and start == starts[-1] else {}
            piece = keep_lines(lines[start : start + _OUTPUT_LINES])
            builder.add(BlockKind.PARAGRAPH, piece, where, output_type=output_type, **extra)


def _render(cell: _Cell, builder: BlockBuilder, ctx: ParseContext) -> None:
    where = [Position(path=cell.path)]
    if cell.kind == "markdown":
        _markdown(cell, builder, ctx)
    elif cell.kind == "heading":  # v3 heading cells
        builder.heading(cell.source, cell.level, where)
    elif cell.kind == "code":
        extra: dict[str, Any] = {"language": cell.language} if cell.language else {}
        builder.add(BlockKind.CODE, kept_lines(cell.source), where, **extra)
        _render_outputs(cell, builder)
    elif cell.kind == "raw":
        builder.add(BlockKind.PARAGRAPH, kept_lines(cell.source), where)


def _utf8(data: bytes, ctx: ParseContext) -> memoryview:
    """The notebook as UTF-8 (nbformat's encoding), BOM skipped: checked a megabyte at a time
    (no copy); anything else is decoded and written out as UTF-8 once."""
    view = memoryview(data)[3:] if data.startswith(codecs.BOM_UTF8) else memoryview(data)
    if not data.isascii():
        check = codecs.getincrementaldecoder("utf-8")()
        try:
            for start in range(0, len(view), _CHUNK):
                check.decode(view[start : start + _CHUNK])
            check.decode(b"", final=True)
        except UnicodeDecodeError:
            return memoryview(decode_text(data, ctx.declared_type)[0].encode("utf-8"))
    return view


def _load(data: bytes, ctx: ParseContext) -> Fields:
    try:
        doc = _OBJECT.decode(_utf8(data, ctx))
    except RecursionError as exc:
        raise ParseError(ParseErrorCode.BOMB, "notebook: JSON nesting too deep") from exc
    except msgspec.ValidationError as exc:  # JSON, but not an object
        raise ParseError(ParseErrorCode.CORRUPT, "notebook: JSON without nbformat and cells") from exc
    except msgspec.DecodeError as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"notebook: {exc}") from exc
    if "nbformat" not in doc or ("cells" not in doc and "worksheets" not in doc):
        raise ParseError(ParseErrorCode.CORRUPT, "notebook: JSON without nbformat and cells")
    return doc


def _cell_output_cap(options: Mapping[str, Any]) -> int:
    nested = options.get("limits")
    value = options.get(
        "max_cell_output_chars", nested.get("max_cell_output_chars") if isinstance(nested, Mapping) else None
    )
    return CELL_OUTPUT_CHARS if value is None else int(value)


# isolated (a forked child under the registry's memory cap): a last bound for what the lazy
# reading does not foresee (millions of empty cells, a Markdown cell the size of the file)
@register_parser("notebook", "1.1", (NOTEBOOK,), ("ipynb",), isolate=True)
def parse_notebook(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    doc = _load(data, ctx)
    meta = _fields(doc.get("metadata"))
    language = _language(meta)
    builder = BlockBuilder(limits.max_blocks, limits.max_chars)
    caps = _Caps(lambda: limits.max_chars - builder.chars, limits.max_chars, _cell_output_cap(ctx.options))
    count = cut = 0
    for cell in _cells(doc, language, caps):
        deadline.check("notebook")
        _render(cell, builder, ctx)
        count += 1
        cut += any(o[3] for o in cell.outputs)
    if not builder.blocks:
        raise ParseError(ParseErrorCode.EMPTY, "notebook: no text in any cell")
    title = _small(meta.get("title"))
    if not isinstance(title, str) or not title:
        title = next((b.text for b in builder.blocks if b.kind == BlockKind.HEADING), None)
    info: dict[str, Any] = {"nbformat": _small(doc.get("nbformat")), "cells": count}
    if language:
        info["language"] = language
    if cut:
        info.update(outputs_cut=cut, max_cell_output_chars=caps.cell_output)
    return ParsedDocument(blocks=builder.blocks, title=title, media_type=NOTEBOOK, metadata=info)
