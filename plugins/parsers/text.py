"""Plain text: decoded through BOM / declared charset / detection, split into paragraphs.

A paragraph is a run of non-blank lines; very long runs (dumps) are cut every ``_MAX_LINES``
lines so no block grows without bound. Each block records its first line. Lines keep their
leading whitespace (indented examples, poems, aligned columns, YAML pasted into a note): only
trailing whitespace and control characters are dropped, because indentation is content.
"""

from __future__ import annotations

import re

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits, clean_text, decode_text
from plugins.parsers.registry import ParseContext, register_parser

__all__ = ["keep_lines", "parse_text", "text_blocks"]

_MAX_LINES = 200
# C0 controls except tab, LF and CR (and DEL): never text, and they break JSON consumers
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def keep_lines(lines: list[str]) -> str:
    """``lines`` joined as they are, less trailing whitespace and control characters."""
    text = "\n".join(line.rstrip() for line in lines)
    return _CONTROL.sub("", text) if _CONTROL.search(text) else text


def text_blocks(
    text: str,
    builder: BlockBuilder,
    deadline: Deadline,
    first_line: int = 1,
    max_lines: int = _MAX_LINES,
    kind: BlockKind = BlockKind.PARAGRAPH,
) -> None:
    """Append one block per blank-line separated run of ``text`` (at most ``max_lines`` lines each)."""
    run: list[str] = []
    start = first_line

    def flush() -> None:
        if run:
            builder.add(kind, keep_lines(run), [Position(line=start)])
            run.clear()

    for i, line in enumerate(text.splitlines(), start=first_line):
        if i % 5000 == 0:
            deadline.check("text")
        if not line.strip():
            flush()
            continue
        if not run:
            start = i
        run.append(line)
        if len(run) >= max_lines:
            flush()
    flush()


@register_parser("text", "1.0", ("text/plain",), ("txt", "text", "rst"))
def parse_text(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    text, encoding = decode_text(data, ctx.declared_type)
    builder = BlockBuilder(limits.max_blocks, limits.max_chars)
    text_blocks(text, builder, deadline)
    if not builder.blocks:
        raise ParseError(ParseErrorCode.EMPTY, "no text content")
    title = clean_text(builder.blocks[0].text.splitlines()[0])[:200]
    return ParsedDocument(
        blocks=builder.blocks, title=title or None, media_type="text/plain", metadata={"encoding": encoding}
    )
