"""Plain text: decoded through BOM / declared charset / detection, split into paragraphs.

A paragraph is a run of non-blank lines; very long runs (logs, dumps) are cut every
``_MAX_LINES`` lines so no block grows without bound. Each block records its first line.
"""

from __future__ import annotations

from include.contract import ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits, clean_text, decode_text
from plugins.parsers.registry import ParseContext, register_parser

__all__ = ["parse_text"]

_MAX_LINES = 200


def text_blocks(text: str, builder: BlockBuilder, deadline: Deadline, first_line: int = 1) -> None:
    """Append one paragraph block per blank-line separated run of ``text``."""
    run: list[str] = []
    start = first_line

    def flush() -> None:
        if run:
            builder.paragraph("\n".join(run), [Position(line=start)])
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
        if len(run) >= _MAX_LINES:
            flush()
    flush()


@register_parser("text", "1.0", ("text/plain",), ("txt", "text", "log", "rst"))
def parse_text(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    text, encoding = decode_text(data, ctx.declared_type)
    builder = BlockBuilder(limits.max_blocks)
    text_blocks(text, builder, deadline)
    if not builder.blocks:
        raise ParseError(ParseErrorCode.EMPTY, "no text content")
    title = clean_text(builder.blocks[0].text.splitlines()[0])[:200]
    return ParsedDocument(
        blocks=builder.blocks, title=title or None, media_type="text/plain", metadata={"encoding": encoding}
    )
