"""YAML and TOML: one block per top-level key, ``key.path: value`` lines, safe loaders only.

Each top-level key (or item, when the document is a list) is a paragraph of ``a.b[2].c: value``
lines, as JSON records are (so field names stay searchable), positioned at the key's path and
its line. A YAML stream of several documents (``---``) gives each block a ``document`` index.

Safety: YAML is read by PyYAML's safe loader (no Python objects; libyaml's when installed),
which caps nesting itself. Aliases are kept as shared nodes by the loader, but writing the text
out expands them, so before constructing a document the alias graph is measured: a document
that expands past ``max(_MIN_EXPANDED, _EXPANSION_RATIO x its node count)`` nodes ("billion
laughs", YAML 1.2 7.1 aliases) or refers to itself is a ``bomb``. TOML is read by ``tomllib``
(TOML 1.0, no aliases). Syntax errors are ``corrupt``. Lines and paths are built and charged
as JSON's are (``plugins.parsers.jsonl``): each line counted against ``max_chars`` before it
exists, a key longer than ``MAX_KEY_CHARS`` cut to that and ``…`` in paths. Both run isolated (in a forked child
killed at the time budget), because a whole document is one library call.
"""

from __future__ import annotations

import gc
import re
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml

from include.contract import ParsedDocument, ParseError, ParseErrorCode
from plugins.parsers._common import BlockBuilder, Deadline, Limits, decode_text
from plugins.parsers.jsonl import RecordBudget, flatten, path_key
from plugins.parsers.registry import ParseContext, register_parser

__all__ = ["parse_toml", "parse_yaml"]

YAML = "application/yaml"
TOML = "application/toml"
_MIN_EXPANDED = 100_000
_EXPANSION_RATIO = 16
_Loader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expansion(root: yaml.Node, what: str) -> None:
    """Refuse a node graph whose aliases expand it past the cap, or that contains itself.

    Depth-first without recursion; ``size`` memoises each shared node, so the measure costs
    the distinct nodes, not the expanded ones.
    """
    size: dict[int, int] = {}
    started: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            size[key] = 1 + sum(size[id(c)] for c in _children(node))
            started.discard(key)
            continue
        if key in size:
            continue
        if key in started:
            raise ParseError(ParseErrorCode.BOMB, f"{what}: an alias refers to the node that contains it")
        started.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)
    cap = max(_MIN_EXPANDED, _EXPANSION_RATIO * len(size))
    if size[id(root)] > cap:
        raise ParseError(
            ParseErrorCode.BOMB, f"{what}: aliases expand {len(size)} nodes to {size[id(root)]} (cap {cap})"
        )


def _key_lines(root: yaml.Node) -> dict[str, int]:
    if not isinstance(root, yaml.MappingNode):
        return {}
    return {str(k.value): k.start_mark.line + 1 for k, _ in root.value if isinstance(k, yaml.ScalarNode)}


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while PyYAML builds a document's nodes.

    Node objects are allocated by the hundred thousand and every collection walks all that are
    alive, so a big document costs quadratic time in collections (1.9 MiB of YAML: 12.3 s of
    composing with the collector on, 2.0 s with it paused). Reference counting still frees
    everything; only a recursive alias makes a cycle, and the collector takes it afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _yaml_documents(text: str, deadline: Deadline) -> Iterator[tuple[Any, dict[str, int]]]:
    """``(document, line of each top-level key)`` for each document of the stream."""
    loader = _Loader(text)
    # an alias needs an anchor ("&name", YAML 1.2 6.9.2): without a "&" there is nothing to expand
    may_alias = "&" in text
    try:
        while loader.check_node():
            deadline.check("yaml")
            with _collector_paused():
                node = loader.get_node()
                if may_alias:
                    _check_expansion(node, "yaml")
                document = loader.construct_document(node)
            yield document, _key_lines(node)
    except yaml.YAMLError as exc:
        code = ParseErrorCode.BOMB if "nesting depth" in str(exc) else ParseErrorCode.CORRUPT
        raise ParseError(code, f"yaml: {exc}") from exc
    except RecursionError as exc:
        raise ParseError(ParseErrorCode.BOMB, "yaml: nesting too deep") from exc
    except TypeError as exc:  # a list or a mapping used as a mapping key
        raise ParseError(ParseErrorCode.CORRUPT, f"yaml: {exc}") from exc
    finally:
        loader.dispose()


def _blocks(doc: Any, lines: dict[str, int], budget: RecordBudget, deadline: Deadline, **extra: Any) -> None:
    """One block per top-level key (a mapping) or item (a list); one block for a lone scalar."""
    if isinstance(doc, dict):
        items: list[tuple[str, str, Any]] = [(str(k), path_key(k), v) for k, v in doc.items()]
    elif isinstance(doc, list):
        items = [("", f"[{i}]", v) for i, v in enumerate(doc)]
    elif doc is None:
        return
    else:
        items = [("", "", doc)]
    for n, (key, path, value) in enumerate(items):
        if n % 1000 == 0:
            deadline.check("structured")
        out: list[str] = []
        flatten(value, path, out, budget)
        if not out and path:
            out.append(f"{path}:")  # an empty mapping or list: the key is still content
        budget.paragraph(out, path or "$", lines.get(key), **extra)


def _title(doc: Any) -> str | None:
    if isinstance(doc, dict):
        for key in ("title", "name"):
            if isinstance(doc.get(key), str) and doc[key].strip():
                return str(doc[key]).strip()[:200]
    return None


def _start(data: bytes, ctx: ParseContext) -> tuple[str, Deadline, BlockBuilder, RecordBudget]:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    text, _ = decode_text(data, ctx.declared_type)
    builder = BlockBuilder(limits.max_blocks, limits.max_chars)
    return text, Deadline(limits.time_budget_s), builder, RecordBudget(builder, limits.max_chars)


# isolated (a forked child killed at the time budget): PyYAML's constructor and tomllib run
# whole documents in single calls that cannot check a deadline (~0.5 MB/s for PyYAML)
@register_parser("yaml", "1.0", (YAML, "application/x-yaml", "text/yaml", "text/x-yaml"), ("yaml", "yml"), isolate=True)
def parse_yaml(data: bytes, ctx: ParseContext) -> ParsedDocument:
    text, deadline, builder, budget = _start(data, ctx)
    documents = 0
    title = None
    pending: list[tuple[Any, dict[str, int]]] = []
    for doc, lines in _yaml_documents(text, deadline):
        documents += 1
        title = title or _title(doc)
        pending.append((doc, lines))
    for index, (doc, lines) in enumerate(pending):
        extra = {"document": index} if documents > 1 else {}
        _blocks(doc, lines, budget, deadline, **extra)
    if not builder.blocks:
        raise ParseError(ParseErrorCode.EMPTY, "yaml: no values")
    return ParsedDocument(blocks=builder.blocks, title=title, media_type=YAML, metadata={"documents": documents})


# a table header's first key ([a.b], [[a]], ["quoted key"]) and a top-level key (key = / key.sub =)
_TOML_HEADER = re.compile(r'^[ \t]*\[\[?[ \t]*(?:"([^"]*)"|\'([^\']*)\'|([A-Za-z0-9_-]+))', re.M)
_TOML_KEY = re.compile(r'^[ \t]*(?:"([^"]*)"|\'([^\']*)\'|([A-Za-z0-9_-]+))[ \t]*[=.]', re.M)


def _toml_lines(text: str) -> dict[str, int]:
    """Line of each top-level key: where its table opens, or its ``key =`` before any table."""
    first_table = _TOML_HEADER.search(text)
    head_end = first_table.start() if first_table else len(text)
    lines: dict[str, int] = {}
    for pattern, span in ((_TOML_KEY, text[:head_end]), (_TOML_HEADER, text)):
        for m in pattern.finditer(span):
            key = next(g for g in m.groups() if g is not None)
            lines.setdefault(key, text.count("\n", 0, m.start()) + 1)
    return lines


@register_parser("toml", "1.0", (TOML,), ("toml",), isolate=True)
def parse_toml(data: bytes, ctx: ParseContext) -> ParsedDocument:
    text, deadline, builder, budget = _start(data, ctx)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"toml: {exc}") from exc
    except RecursionError as exc:
        raise ParseError(ParseErrorCode.BOMB, "toml: nesting too deep") from exc
    _blocks(doc, _toml_lines(text), budget, deadline)
    if not builder.blocks:
        raise ParseError(ParseErrorCode.EMPTY, "toml: no values")
    return ParsedDocument(blocks=builder.blocks, title=_title(doc), media_type=TOML)
