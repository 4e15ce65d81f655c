"""Source code and logs: indentation kept, code as CODE blocks with the language of the extension.

Code is cut into blocks where a top-level piece starts: a blank line followed by a line at
column 0 that does not close something (``}``, ``)``, ``end``...), or a column-0 definition
keyword (``def``, ``class``, ``func``, ``fn``...) even without a blank line before it. So a
function, a class or an import group is one block, with its first line as ``Position.line``.
Pieces shorter than ``_MIN_LINES`` join the next one; a block past ``_SOFT_LINES`` is cut at its
next blank line and one past ``_HARD_LINES`` anywhere, so a 5,000-line class still makes blocks
of a size a chunker and a reader can use.

Logs (``.log``, ``.out``) are text blocks of at most ``_LOG_LINES`` lines, lines unchanged.
Text with NUL bytes is refused (``unsupported``): a ``.ts`` MPEG stream or a compiled ``.out`` is
not source.
"""

from __future__ import annotations

import re
from typing import Any

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits, decode_text
from plugins.parsers.registry import ParseContext, register_parser
from plugins.parsers.text import keep_lines, text_blocks

__all__ = ["LANGUAGES", "parse_log", "parse_source"]

# extension -> language name (the names GitHub Linguist and Markdown fences use)
LANGUAGES: dict[str, str] = {
    "py": "python",
    "pyi": "python",
    "js": "javascript",
    "mjs": "javascript",
    "cjs": "javascript",
    "jsx": "javascript",
    "ts": "typescript",
    "tsx": "typescript",
    "java": "java",
    "c": "c",
    "h": "c",
    "cc": "cpp",
    "cpp": "cpp",
    "cxx": "cpp",
    "hpp": "cpp",
    "hh": "cpp",
    "go": "go",
    "rs": "rust",
    "rb": "ruby",
    "php": "php",
    "sh": "shell",
    "bash": "shell",
    "zsh": "shell",
    "ps1": "powershell",
    "sql": "sql",
    "kt": "kotlin",
    "kts": "kotlin",
    "swift": "swift",
    "scala": "scala",
    "cs": "csharp",
    "lua": "lua",
    "r": "r",
    "pl": "perl",
    "pm": "perl",
    "dart": "dart",
    "ex": "elixir",
    "exs": "elixir",
    "erl": "erlang",
    "hs": "haskell",
    "ml": "ocaml",
    "clj": "clojure",
    "groovy": "groovy",
    "gradle": "groovy",
    "vue": "vue",
    "css": "css",
    "scss": "scss",
    "proto": "protobuf",
    "tf": "hcl",
    "cmake": "cmake",
    "mk": "make",
    "bat": "batch",
    "vb": "vbnet",
    "f90": "fortran",
    "jl": "julia",
    "zig": "zig",
    "nim": "nim",
}
_MEDIA_LANG = {
    "text/x-python": "python",
    "text/x-script.python": "python",
    "application/javascript": "javascript",
    "text/javascript": "javascript",
    "application/typescript": "typescript",
    "text/x-java-source": "java",
    "text/x-c": "c",
    "text/x-c++src": "cpp",
    "text/x-go": "go",
    "text/rust": "rust",
    "text/x-ruby": "ruby",
    "application/x-sh": "shell",
    "text/x-shellscript": "shell",
    "application/sql": "sql",
}
SOURCE = "text/x-source"
LOG = "text/x-log"

_MIN_LINES = 3
_SOFT_LINES = 80
_HARD_LINES = 300
_LOG_LINES = 100
# a top-level definition, in the languages above, starts a piece even without a blank line
_DEFINITION = re.compile(
    r"(?:export\s+|pub(?:\(\w+\))?\s+|public\s+|private\s+|protected\s+|static\s+|async\s+|abstract\s+|final\s+)*"
    r"(?:def|class|func|fn|function|interface|struct|enum|impl|trait|module|object|package|type|CREATE|create)\b"
)
# column-0 lines that end a piece rather than start one
_CLOSER = re.compile(r"[}\])]|end\b|fi\b|esac\b|done\b|#endif|\*/")


def _is_binary(data: bytes) -> bool:
    head = data[:8192]
    return b"\x00" in head and not head.startswith((b"\xff\xfe", b"\xfe\xff"))


def _starts_piece(line: str, after_blank: bool) -> bool:
    if not line or line[0] in " \t" or _CLOSER.match(line):
        return False
    return after_blank or bool(_DEFINITION.match(line))


def code_blocks(text: str, builder: BlockBuilder, deadline: Deadline, language: str | None) -> None:
    """Append CODE blocks of ``text`` cut at top-level pieces (see the module docstring)."""
    extra: dict[str, Any] = {"language": language} if language else {}
    run: list[str] = []
    start = 1
    after_blank = False

    def flush() -> None:
        while run and not run[-1].strip():
            run.pop()
        if run:
            builder.add(BlockKind.CODE, keep_lines(run), [Position(line=start)], **extra)
        run.clear()

    for number, line in enumerate(text.splitlines(), start=1):
        if number % 5000 == 0:
            deadline.check("source")
        blank = not line.strip()
        if blank and not run:
            continue
        size = len(run)
        if not blank and (
            (size >= _MIN_LINES and _starts_piece(line, after_blank))
            or (size >= _SOFT_LINES and after_blank)
            or size >= _HARD_LINES
        ):
            flush()
        if not run:
            start = number
        run.append(line)
        after_blank = blank
    flush()


def _language(ctx: ParseContext) -> str | None:
    name = ctx.file_name.rsplit("/", 1)[-1]
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if ext in LANGUAGES:
        return LANGUAGES[ext]
    declared = (ctx.declared_type or ctx.media_type or "").split(";")[0].strip().lower()
    return _MEDIA_LANG.get(declared)


def _decoded(data: bytes, ctx: ParseContext, what: str) -> tuple[str, str, Limits, Deadline]:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    if _is_binary(data):
        raise ParseError(ParseErrorCode.UNSUPPORTED, f"{what}: binary content (NUL bytes), not text ({ctx.file_name})")
    text, encoding = decode_text(data, ctx.declared_type)
    return text, encoding, limits, Deadline(limits.time_budget_s)


@register_parser("source", "1.0", (SOURCE, *_MEDIA_LANG), tuple(LANGUAGES))
def parse_source(data: bytes, ctx: ParseContext) -> ParsedDocument:
    text, encoding, limits, deadline = _decoded(data, ctx, "source")
    language = _language(ctx)
    builder = BlockBuilder(limits.max_blocks, limits.max_chars)
    code_blocks(text, builder, deadline, language)
    if not builder.blocks:
        raise ParseError(ParseErrorCode.EMPTY, "source: no text content")
    meta: dict[str, str] = {"encoding": encoding}
    if language:
        meta["language"] = language
    return ParsedDocument(blocks=builder.blocks, media_type=SOURCE, metadata=meta)


@register_parser("log", "1.0", (LOG,), ("log", "out"))
def parse_log(data: bytes, ctx: ParseContext) -> ParsedDocument:
    text, encoding, limits, deadline = _decoded(data, ctx, "log")
    builder = BlockBuilder(limits.max_blocks, limits.max_chars)
    text_blocks(text, builder, deadline, max_lines=_LOG_LINES)
    if not builder.blocks:
        raise ParseError(ParseErrorCode.EMPTY, "log: no text content")
    return ParsedDocument(blocks=builder.blocks, media_type=LOG, metadata={"encoding": encoding})
