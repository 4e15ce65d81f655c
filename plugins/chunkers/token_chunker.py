"""The default chunker (``token``) and its heading-aware mode (``heading``).

Blocks are merged in order into chunks of at most ``chunk_token_num`` cl100k_base tokens; a block
too long for a chunk is split at delimiters, a sentence too long at token ends (see
:mod:`plugins.chunkers.pack`). Tables never share a chunk with prose: runs of prose end at a
table, and the table goes to :mod:`plugins.chunkers.table`.

Heading mode (``headings: true``, or the ``heading`` chunker) starts every chunk with its heading
path ``A > B > C`` on its own line, as the seed's ``tree_merge`` does; a chunk that starts at a
heading folds that heading into the path instead of repeating it. Runs also end at every
top-level heading, so no chunk spans two top-level sections (``cross_sections: true`` lifts
that). The prefix counts toward the limit.

Every chunk records in ``metadata`` how its text is composed, so consumers (and the
losslessness tests) can take it apart: ``prefix_chars`` (heading path / table header at the
start), ``overlap_chars`` and ``overlap_tokens`` (text repeated from the previous chunk),
``heading_folded`` (how many of the path's last headings are this chunk's own section
headings, folded into the prefix instead of repeated in the body).

Options: :mod:`plugins.chunkers.options`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

from include.contract import Block, BlockKind, Chunk, ParsedDocument, Position
from plugins.chunkers.options import ChunkOptions
from plugins.chunkers.pack import NO_PREFIX, ChunkSink, Prefix, pack_run
from plugins.chunkers.registry import register_chunker
from plugins.chunkers.table import TableRows, chunk_table
from plugins.chunkers.tokenizer import count_tokens

__all__ = ["chunk_heading", "chunk_token", "chunk_with_options", "heading_paths"]

# "2": content-defined cuts and content-derived chunk ids (:mod:`plugins.chunkers.pack`); the
# engine puts chunker versions into the processing hash, so indexes are re-chunked once.
VERSION = "2"
_SEPARATOR = " > "
_KIND = attrgetter("kind")
_HEADING_PATH = attrgetter("heading_path")


def _clean(text: str) -> str:
    return " ".join(text.split())


def heading_paths(blocks: list[Block]) -> list[tuple[str, ...]]:
    """For every block, the headings it sits under (a heading block: under, not including itself).

    Parsers fill ``Block.heading_path`` (a heading's own path ends with itself); when none of the
    blocks carries one, the path is rebuilt from the heading blocks' levels.
    """
    from_parsers = any(map(_HEADING_PATH, blocks))
    if not from_parsers and BlockKind.HEADING not in map(_KIND, blocks):
        return [()] * len(blocks)
    return _heading_paths(blocks, from_parsers)


def _heading_paths(blocks: list[Block], from_parsers: bool) -> list[tuple[str, ...]]:
    """:func:`heading_paths` when the caller already knows whether any block has a heading path."""
    if from_parsers:
        out = []
        for b in blocks:
            path = [_clean(h) for h in b.heading_path]
            if b.kind == BlockKind.HEADING and path and path[-1] == _clean(b.text):
                path.pop()
            out.append(tuple(path))
        return out
    stack: list[tuple[int, str]] = []
    out = []
    for b in blocks:
        if b.kind == BlockKind.HEADING:
            level = b.level or 1
            while stack and stack[-1][0] >= level:
                stack.pop()
            out.append(tuple(t for _, t in stack))
            stack.append((level, _clean(b.text)))
        else:
            out.append(tuple(t for _, t in stack))
    return out


class _ParserPaths(Sequence[tuple[str, ...]]):
    """Heading paths of a document without heading blocks: every block's own ``heading_path``,
    cleaned, computed when asked.

    :func:`_heading_paths` would compute the same tuples for every block up front; without
    heading blocks there is no stack to rebuild, and the plain chunker asks once per chunk, so a
    large document whose blocks carry no path never reads its tens of thousands of empty lists.
    """

    __slots__ = ("_blocks",)

    def __init__(self, blocks: list[Block]) -> None:
        self._blocks = blocks

    def __len__(self) -> int:
        return len(self._blocks)

    def __getitem__(self, index: int) -> tuple[str, ...]:  # type: ignore[override]  # no slices
        path = self._blocks[index].heading_path
        return tuple(map(_clean, path)) if path else ()


class _Headings:
    """Prefix provider for one prose run in heading mode."""

    def __init__(self, blocks: list[Block], paths: Sequence[tuple[str, ...]], opts: ChunkOptions) -> None:
        self.blocks = blocks
        self.paths = paths
        self.limit = opts.prefix_limit
        self._cache: dict[tuple[str, ...], tuple[str, int]] = {}

    def render(self, path: tuple[str, ...]) -> tuple[str, int]:
        """Prefix text and tokens for ``path``; outer headings are dropped until it fits."""
        hit = self._cache.get(path)
        if hit is None:
            hit = ("", 0)
            for k in range(len(path)):
                text = _SEPARATOR.join(path[k:]) + "\n"
                tokens = count_tokens(text)
                if tokens <= self.limit:
                    hit = (text, tokens)
                    break
            self._cache[path] = hit
        return hit

    def __call__(self, unit: int, at_start: bool) -> Prefix:
        blocks, paths = self.blocks, self.paths
        path = paths[unit]
        if at_start and blocks[unit].kind == BlockKind.HEADING:
            # Fold the heading (and directly nested headings right after it) into the path.
            folded = path
            j = unit
            while j < len(blocks) and blocks[j].kind == BlockKind.HEADING and paths[j] == folded:
                folded = (*folded, _clean(blocks[j].text))
                j += 1
            text, tokens = self.render(folded)
            if text == _SEPARATOR.join(folded) + "\n":  # the whole path fits: fold
                return Prefix(text, tokens, list(folded), skip_to_unit=j, folded=j - unit)
        text, tokens = self.render(path)
        own = (*path, _clean(blocks[unit].text)) if blocks[unit].kind == BlockKind.HEADING else path
        return Prefix(text, tokens, list(own))


def _plain_prefix(blocks: list[Block], paths: Sequence[tuple[str, ...]]) -> Any:
    HEADING = BlockKind.HEADING

    def prefix_at(unit: int, _at_start: bool) -> Prefix:
        block = blocks[unit]
        path = paths[unit]
        if block.kind == HEADING:
            path = (*path, _clean(block.text))
        elif not path:
            return NO_PREFIX  # one shared instance: pack_run never changes a prefix
        return Prefix(heading_path=list(path))

    return prefix_at


def _is_header_echo(block: Block, following: Block | None) -> bool:
    """Spreadsheet parsers emit the header row as a paragraph before the rows; tables repeat it."""
    return (
        block.metadata.get("role") == "header"
        and following is not None
        and following.kind == BlockKind.TABLE
        and bool(following.header)
    )


def _outline(blocks: list[Block]) -> tuple[list[str], list[Sequence[Position]], set[BlockKind], bool]:
    """Every block's text and positions, the kinds present, and whether any block has positions,
    in one pass.

    One loop that touches every block once: a separate pass per field (``map(attrgetter(...))``)
    would bring every block of a large document back into the CPU cache once per field.
    Heading paths are not read here (see :class:`_ParserPaths`).
    """
    texts: list[str] = []
    positions: list[Sequence[Position]] = []
    kinds: set[BlockKind] = set()
    add_text, add_positions, add_kind = texts.append, positions.append, kinds.add
    for block in blocks:
        add_text(block.text)
        add_kind(block.kind)
        add_positions(block.positions)
    return texts, positions, kinds, any(positions)


def chunk_with_options(doc: ParsedDocument, doc_id: str, opts: ChunkOptions, *, _legacy: bool = False) -> list[Chunk]:
    """Chunk ``doc`` with validated options (the registered chunkers' common body).

    ``_legacy`` chunks as version 1 did (furthest cuts, positional ids): private, for the
    edit-locality benchmark's "today's greedy chunker" row (``benchmarks/edit_locality.py``).
    """
    return _DocumentChunker(doc, doc_id, opts, _legacy).chunks()


class _DocumentChunker:
    """One document's walk: runs of prose blocks go to :func:`pack_run`, tables to
    :func:`chunk_table`, each flushed when the other kind of block interrupts it."""

    def __init__(self, doc: ParsedDocument, doc_id: str, opts: ChunkOptions, legacy: bool = False) -> None:
        self.blocks = blocks = doc.blocks
        self.opts = opts
        self.texts, self.positions, self.kinds, self.has_positions = _outline(blocks)
        # With heading blocks, a block's path depends on the headings before it: all paths up front.
        self.paths: Sequence[tuple[str, ...]] = (
            _heading_paths(blocks, any(map(_HEADING_PATH, blocks)))
            if BlockKind.HEADING in self.kinds
            else _ParserPaths(blocks)
        )
        self.sink = ChunkSink(doc_id, legacy=legacy)
        self.table: TableRows | None = None

    def chunks(self) -> list[Chunk]:
        split_sections = self.opts.headings and not self.opts.cross_sections
        if BlockKind.TABLE not in self.kinds and not (split_sections and BlockKind.HEADING in self.kinds):
            self._prose_only()
        else:
            self._walk(split_sections)
        return self.sink.chunks

    def _prose_only(self) -> None:
        """One run of all the blocks that say something (what :meth:`_walk` does for such a
        document, in C loops; isspace() stops at the first visible character): header echoes
        only precede tables."""
        texts = self.texts
        if not all(texts) or any(map(str.isspace, texts)):
            self._flush_run([i for i, t in enumerate(texts) if t and not t.isspace()])
        else:
            self._flush_run(range(len(self.blocks)))

    def _walk(self, split_sections: bool) -> None:
        blocks, paths = self.blocks, self.paths
        run: list[int] = []
        run_breaks: list[int] = []  # where in ``run`` a new top-level section starts
        for i, block in enumerate(blocks):
            kind = block.kind
            if kind == BlockKind.TABLE:
                self._flush_run(run, run_breaks)
                run, run_breaks = [], []
                self._add_table(block, list(paths[i]))
                continue
            if self.table is not None:
                self._flush_table()
            text = block.text
            if not text or text.isspace():
                continue  # nothing to say (and an empty unit would be a cut point going nowhere)
            if block.metadata and _is_header_echo(block, blocks[i + 1] if i + 1 < len(blocks) else None):
                continue
            if split_sections and kind == BlockKind.HEADING and not paths[i] and run:
                run_breaks.append(len(run))  # a top-level heading opens a new section
            run.append(i)
        self._flush_run(run, run_breaks)
        self._flush_table()

    def _add_table(self, block: Block, heading_path: list[str]) -> None:
        """A table block continues the open table when it repeats its header under the same
        headings (a parser's page- or sheet-split table); otherwise it starts a new one."""
        table = self.table
        if table is not None and block.header and table.header == block.header and table.heading_path == heading_path:
            table.extend(block)
            return
        self._flush_table()
        self.table = TableRows.from_block(block, heading_path)

    def _flush_table(self) -> None:
        table, self.table = self.table, None
        if table is None:
            return
        path_prefix = ""
        if self.opts.headings and table.heading_path:
            path_prefix = _Headings([], [], self.opts).render(tuple(table.heading_path))[0]
        chunk_table(table, self.opts, self.sink, path_prefix)

    def _flush_run(self, members: Sequence[int], breaks: Sequence[int] = ()) -> None:
        """Chunk the run of prose blocks ``members`` (block indexes, in order); ``breaks``: the
        positions in ``members`` where a new top-level section starts."""
        if not members:
            return
        blocks, paths, opts = self.blocks, self.paths, self.opts
        whole = len(members) == len(blocks)
        run_blocks = blocks if whole else list(map(blocks.__getitem__, members))
        run_paths: Sequence[tuple[str, ...]]
        if whole:
            run_paths = paths
        elif isinstance(paths, _ParserPaths):
            run_paths = _ParserPaths(run_blocks)  # still read per chunk, not per block
        else:
            run_paths = list(map(paths.__getitem__, members))
        prefix_at = _Headings(run_blocks, run_paths, opts) if opts.headings else _plain_prefix(run_blocks, run_paths)
        run_positions: Any = ()
        if self.has_positions:
            run_positions = self.positions if whole else list(map(self.positions.__getitem__, members))
        headings: Sequence[int] = ()
        if BlockKind.HEADING in self.kinds:
            headings = [k for k, b in enumerate(run_blocks) if b.kind == BlockKind.HEADING]
        pack_run(
            self.texts if whole else list(map(self.texts.__getitem__, members)),
            run_positions,
            prefix_at,
            self.sink,
            limit=opts.chunk_token_num,
            overlap=opts.overlap_tokens,
            delimiters=opts.delimiters,
            breaks=breaks,
            headings=headings,
        )


@register_chunker("token", VERSION)
def chunk_token(doc: ParsedDocument, doc_id: str, options: Mapping[str, Any]) -> list[Chunk]:
    """Token-bounded chunks of merged blocks; tables chunked apart."""
    return chunk_with_options(doc, doc_id, ChunkOptions.from_mapping(options))


@register_chunker("heading", VERSION)
def chunk_heading(doc: ParsedDocument, doc_id: str, options: Mapping[str, Any]) -> list[Chunk]:
    """Like ``token``, with every chunk starting at its heading path (``headings`` forced on)."""
    return chunk_with_options(doc, doc_id, ChunkOptions.from_mapping(options, headings=True))
