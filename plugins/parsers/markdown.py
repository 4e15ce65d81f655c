"""Markdown (markdown-it-py, CommonMark + tables + strikethrough) to blocks.

Headings keep their level, lists their nesting and numbering, tables their header row, fences
their info string as ``language``. YAML front matter becomes document metadata. Paragraphs that
contain math (``$...$``, ``\\(...\\)``, ``\\[...\\]``) keep their source text verbatim, because
CommonMark would read ``_`` and ``*`` inside formulas as emphasis and eat characters.
"""

from __future__ import annotations

import functools
import html
import json
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import yaml
from lxml import html as lxml_html

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits, clean_text, decode_text
from plugins.parsers.registry import ParseContext, register_parser

if TYPE_CHECKING:  # markdown-it is loaded by the first parse, not by registering the parser
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

__all__ = ["parse_markdown"]

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)
_MATH = re.compile(r"\$[^$\n]+\$|\$\$|\\\(|\\\[")


@functools.cache
def _md() -> MarkdownIt:
    from markdown_it import MarkdownIt  # deferred: loaded by the first parse, not by registration

    md = MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough")
    # Block structure comes from markdown-it; inline markup is stripped by the regexes below.
    # The inline tokenizer is a third of markdown-it's time and we only need the plain text.
    md.core.ruler.disable("inline")
    # reference definitions are removed by a line scan before parsing (see below): markdown-it's
    # rule for them is tried on every paragraph line and costs a tenth of the parse
    md.block.ruler.disable("reference")
    return md


_REF_DEF = re.compile(r"\[[^\]\n]+\]:[ \t]*\S")


def _scan_lines(lines: list[str]) -> Iterator[tuple[int, str, int, bool]]:
    """``(index, line without leading spaces, indent, inside fenced code)`` for every line.

    Fence delimiter lines count as inside. A fence opens and closes with ``` or ~~~ indented
    less than four spaces, as markdown-it reads them.
    """
    fence = ""
    for i, line in enumerate(lines):
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        if fence:
            if indent < 4 and stripped.startswith(fence):
                fence = ""
            yield i, stripped, indent, True
        elif indent < 4 and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            yield i, stripped, indent, True
        else:
            yield i, stripped, indent, False


def _drop_reference_definitions(body: str) -> str:
    """Blank out link reference definition lines (outside code), keeping line numbers."""
    if "]:" not in body:
        return body
    lines = body.split("\n")
    for i, stripped, indent, fenced in _scan_lines(lines):
        if not fenced and indent < 4 and stripped.startswith("[") and _REF_DEF.match(stripped):
            lines[i] = ""
    return "\n".join(lines)


# markdown-it holds its token stream, about 80 times the text, until the parse ends: a large
# document is parsed in pieces of about this many characters, cut where no block can continue.
_SEGMENT_CHARS = 256 * 1024
_RAW_HTML_ENDS = {
    "<!--": "-->",
    "<pre": "</pre>",
    "<script": "</script>",
    "<style": "</style>",
    "<textarea": "</textarea>",
}


def _segments(body: str, target: int = _SEGMENT_CHARS) -> Iterator[tuple[str, int]]:
    """``(piece, first line)`` of ``body``, cut only before a line that starts a new top-level block.

    A cut point follows a blank line and starts at column 0 with a heading marker or a letter,
    outside fenced code and raw HTML blocks: there every CommonMark container (list item,
    block quote, indented code, table, paragraph) has already ended, so the pieces parse to
    the same blocks as the whole. Small documents are one piece.
    """
    if len(body) <= target:
        yield body, 0
        return
    lines = body.split("\n")
    start = size = 0
    raw_end = ""
    blank_before = False
    for i, stripped, indent, fenced in _scan_lines(lines):
        line = lines[i]
        if fenced:
            pass
        elif raw_end:
            if raw_end in line.lower():
                raw_end = ""
        else:
            head = stripped[:1]
            if size >= target and blank_before and indent == 0 and (head == "#" or head.isalpha()):
                yield "\n".join(lines[start:i]), start
                start, size = i, 0
            if indent < 4 and head == "<":
                lowered = stripped.lower()
                for opener, closer in _RAW_HTML_ENDS.items():
                    if lowered.startswith(opener) and closer not in lowered[len(opener) :]:
                        raw_end = closer
                        break
        size += len(line) + 1
        blank_before = not line.strip()
    yield "\n".join(lines[start:]), start


_CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.S)
_IMAGE = re.compile(r"!\[([^\]]*)\]\((?:[^()]|\([^()]*\))*\)")
_LINK = re.compile(r"\[((?:[^\[\]]|\[[^\]]*\])+)\](?:\((?:[^()]|\([^()]*\))*\)|\[[^\]]*\])")
_AUTOLINK = re.compile(r"<((?:https?|ftp|mailto):[^>\s]+)>")
_HTML_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>|<!--.*?-->", re.S)
# paired emphasis only; "_" must not touch word characters outside (snake_case stays intact)
_EMPHASIS = re.compile(r"(\*\*|\*|~~)(?=\S)(.+?)(?<=\S)\1|(?<!\w)(__|_)(?=\S)(.+?)(?<=\S)\3(?!\w)", re.S)
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_HARD_BREAK = re.compile(r"(?: {2,}|\\)\n")


_ANY_MARKUP = re.compile(r"[*_\[`<\\&~!]| \n")


def _strip_inline(src: str) -> str:
    if not _ANY_MARKUP.search(src):
        return src  # most prose lines: nothing to strip
    codes: list[str] = []

    def keep_code(m: re.Match[str]) -> str:
        codes.append(m.group(2).strip() if m.group(2).strip() else m.group(2))
        return f"\x00{len(codes) - 1}\x00"

    def keep_code_literal(char: str) -> str:
        codes.append(char)
        return f"\x00{len(codes) - 1}\x00"

    # each rule runs only when its trigger character occurs: most lines need one or two
    text = _CODE_SPAN.sub(keep_code, src) if "`" in src else src
    if "\n" in text:
        text = _HARD_BREAK.sub("\n", text)
    if "\\" in text:  # escaped characters are literal: park them so no markup rule sees them
        text = _ESCAPE.sub(lambda m: keep_code_literal(m.group(1)), text)
    if "![" in text:
        text = _IMAGE.sub(lambda m: m.group(1), text)
    has_emphasis = "*" in text or "_" in text or "~" in text
    for _ in range(3):  # links can nest inside emphasis and vice versa
        new = _LINK.sub(lambda m: m.group(1), text) if "[" in text else text
        if has_emphasis:
            new = _EMPHASIS.sub(lambda m: m.group(2) if m.group(1) else m.group(4), new)
        if new == text:
            break
        text = new
    if "<" in text:
        text = _HTML_TAG.sub("", _AUTOLINK.sub(lambda m: m.group(1), text))
    if "&" in text:
        text = html.unescape(text)
    return re.sub("\x00(\\d+)\x00", lambda m: codes[int(m.group(1))], text) if codes else text


def _inline_text(tok: Token) -> str:
    if _MATH.search(tok.content):
        return tok.content
    return _strip_inline(tok.content)


def _front_matter(text: str) -> tuple[dict[str, Any], str, int]:
    m = _FRONT_MATTER.match(text)
    if not m:
        return {}, text, 0
    try:
        data = yaml.safe_load(m.group(1))
    except yaml.YAMLError:
        return {}, text, 0
    if not isinstance(data, dict):
        return {}, text, 0
    # dates and other YAML types become strings so the metadata stays JSON round-trippable
    meta = json.loads(json.dumps({str(k): v for k, v in data.items()}, default=str))
    # keep the line count so positions still point at the original file
    return meta, text[m.end() :], text[: m.end()].count("\n")


class _Renderer:
    def __init__(self, builder: BlockBuilder, deadline: Deadline, line_offset: int) -> None:
        self.b = builder
        self.deadline = deadline
        self.offset = line_offset

    def _pos(self, tok: Token) -> list[Position]:
        return [Position(line=tok.map[0] + 1 + self.offset)] if tok.map else []

    def render(self, tokens: list[Token]) -> None:
        i = 0
        while i < len(tokens):
            if i % 2000 == 0:
                self.deadline.check("markdown")
            tok = tokens[i]
            t = tok.type
            if t == "heading_open":
                self.b.heading(_inline_text(tokens[i + 1]), int(tok.tag[1]), self._pos(tok))
                i += 3
            elif t == "paragraph_open":
                self.b.paragraph(_inline_text(tokens[i + 1]), self._pos(tok))
                i += 3
            elif t in ("bullet_list_open", "ordered_list_open"):
                end = _close(tokens, i)
                lines: list[str] = []
                _list(tokens[i + 1 : end], t == "ordered_list_open", tok, 0, lines)
                self.b.add(BlockKind.LIST, "\n".join(lines), self._pos(tok), ordered=t == "ordered_list_open")
                i = end + 1
            elif t == "table_open":
                end = _close(tokens, i)
                header, rows = _table(tokens[i:end])
                self.b.table(rows, header, self._pos(tok))
                i = end + 1
            elif t in ("fence", "code_block"):
                lang = (tok.info or "").strip().split(" ")[0]
                extra: dict[str, Any] = {"language": lang} if lang else {}
                self.b.add(BlockKind.CODE, tok.content.rstrip("\n"), self._pos(tok), **extra)
                i += 1
            elif t == "html_block":
                text = _html_text(tok.content)
                if text:
                    self.b.paragraph(text, self._pos(tok))
                i += 1
            else:  # blockquote_open/close, hr, ...: their paragraphs are rendered individually
                i += 1


def _close(tokens: list[Token], i: int) -> int:
    """Index of the token closing ``tokens[i]`` (same nesting level)."""
    level = tokens[i].level
    closing = tokens[i].type.replace("_open", "_close")
    for j in range(i + 1, len(tokens)):
        if tokens[j].type == closing and tokens[j].level == level:
            return j
    return len(tokens) - 1


def _list(tokens: list[Token], ordered: bool, opener: Token, depth: int, out: list[str]) -> None:
    n = int(opener.attrGet("start") or 1) - 1 if ordered else 0
    i = 0
    first_in_item = False
    while i < len(tokens):
        tok = tokens[i]
        if tok.type == "list_item_open":
            n += 1
            first_in_item = True
        elif tok.type in ("bullet_list_open", "ordered_list_open"):
            end = _close(tokens, i)
            _list(tokens[i + 1 : end], tok.type == "ordered_list_open", tok, depth + 1, out)
            i = end
        elif tok.type == "inline" or tok.type in ("fence", "code_block"):
            text = _inline_text(tok) if tok.type == "inline" else tok.content.rstrip("\n")
            indent = "  " * depth
            if first_in_item:
                marker = f"{n}." if ordered else "-"
                lines = text.split("\n")
                out.append(f"{indent}{marker} {lines[0]}")
                out.extend(f"{indent}  {line}" for line in lines[1:])
                first_in_item = False
            else:
                out.extend(f"{indent}  {line}" for line in text.split("\n"))
        i += 1


def _table(tokens: list[Token]) -> tuple[list[str] | None, list[list[str]]]:
    header: list[str] | None = None
    rows: list[list[str]] = []
    current: list[str] = []
    in_head = False
    for tok in tokens:
        if tok.type == "thead_open":
            in_head = True
        elif tok.type == "thead_close":
            in_head = False
        elif tok.type == "tr_open":
            current = []
        elif tok.type == "inline":
            current.append(clean_text(_inline_text(tok)))
        elif tok.type == "tr_close":
            if in_head:
                header = current
            else:
                rows.append(current)
    return header, rows


def _html_text(fragment: str) -> str:
    stripped = fragment.strip()
    if stripped.startswith("<!--") and stripped.endswith("-->") and stripped.count("<!--") == 1:
        return ""  # a comment (metadata blocks in many docs): no visible text
    try:
        el = lxml_html.fragment_fromstring(fragment, create_parent="div")
    except Exception:  # malformed HTML in Markdown: keep the raw text rather than lose it
        return clean_text(re.sub(r"<[^>]+>", " ", fragment), keep_newlines=True)
    for bad in el.xpath(".//script|.//style"):
        bad.drop_tree()
    return clean_text(el.text_content(), keep_newlines=True)


@register_parser("markdown", "1.0", ("text/markdown", "text/x-markdown"), ("md", "markdown", "mdown", "mkd"))
def parse_markdown(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    text, encoding = decode_text(data, ctx.declared_type)
    meta, body, offset = _front_matter(text)
    builder = BlockBuilder(limits.max_blocks)
    for piece, first_line in _segments(_drop_reference_definitions(body)):
        _Renderer(builder, deadline, offset + first_line).render(_md().parse(piece))
    if not builder.blocks:
        raise ParseError(ParseErrorCode.EMPTY, "no text content")
    title = meta.get("title")
    if not isinstance(title, str) or not title:
        first = next((b for b in builder.blocks if b.kind == BlockKind.HEADING), None)
        title = first.text if first else None
    meta["encoding"] = encoding
    return ParsedDocument(blocks=builder.blocks, title=title, media_type="text/markdown", metadata=meta)
