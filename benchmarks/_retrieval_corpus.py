"""The retrieval benchmark's sets: FAQ entries split into question and answer, and PostgreSQL
manual pages with hand-written questions (``_retrieval_pg.py``); see ``retrieval.py``.

Documents are chunked as the engine chunks them for a source with the local model
(``plugins/engine/chunk_budget.py``: within the model's 512 tokens by its own tokenizer).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import lxml.html
from lxml import etree

from benchmarks._retrieval_pg import PG_EXCLUDED_PREFIXES, PG_MANUAL, PG_QUESTIONS
from include.config import EmbeddingConfig
from include.contract import Chunk, ParseError, RawDocument, document_id
from include.index.base import DocumentRecord, DocumentWrite
from plugins.embedders.registry import ChunkBudget, chunk_budget
from plugins.engine.chunk_budget import chunk_within
from plugins.parsers.registry import parse_document

__all__ = [
    "Corpus",
    "FaqEntry",
    "Query",
    "add_distractors",
    "answer_page",
    "corpora",
    "faq_corpus",
    "faq_entries",
    "pg_corpus",
]

PY_DOCS = (Path("/usr/share/doc/python3-doc/html"), Path("/usr/share/doc/python3/html"))
ZH_FAQ = Path("/usr/share/doc/debian/FAQ/zh-cn")
DISTRACTOR_CHUNKS = 400  # --quick: none
QUICK_PY_PAGES = ("general.html", "library.html", "design.html")
PG_DISTRACTOR_CHUNKS = 200  # the answer pages alone are ~1,200 chunks

_SECTION = "//section | //div[contains(concat(' ', normalize-space(@class), ' '), ' section ')]"
_NESTED = ".//section | .//div[contains(concat(' ', normalize-space(@class), ' '), ' section ')]"
_HEADING = ".//*[self::h1 or self::h2 or self::h3 or self::h4 or self::h5 or self::h6]"
_NUMBERING = re.compile(r"^\s*(?:\d+\.)+\s*")  # DocBook's "3.1.2. " before a title
_QUESTION_END = ("?", "？")


# ------------------------------------------------------------------------------ FAQ extraction
@dataclass(frozen=True, slots=True)
class FaqEntry:
    page: str
    anchor: str
    question: str
    answer_html: str  # the entry's section with its heading removed


def faq_entries(html: str | bytes, page: str, *, questions_only: bool = False) -> list[FaqEntry]:
    """Every leaf section of a FAQ page (Sphinx ``<section>``, DocBook ``div.section``) as a
    question (its heading) and an answer (the rest of the section)."""
    root = lxml.html.fromstring(html)
    entries: list[FaqEntry] = []
    for section in root.xpath(_SECTION):
        headings = section.xpath(_HEADING)
        if section.xpath(_NESTED) or not headings:
            continue  # a category (it holds the entries) or a section without a title
        question = _heading_text(headings[0])
        if not question or (questions_only and not question.endswith(_QUESTION_END)):
            continue
        answer = _without(section, headings[0])
        if not " ".join(answer.text_content().split()):
            continue
        anchor = section.get("id") or next(iter(headings[0].xpath(".//@id")), "") or str(len(entries))
        entries.append(FaqEntry(page, anchor, question, etree.tostring(answer, encoding="unicode")))
    return entries


def _heading_text(heading: Any) -> str:
    text = " ".join(heading.text_content().replace("¶", " ").split())
    return _NUMBERING.sub("", text).strip()


def _without(section: Any, heading: Any) -> Any:
    """A copy of ``section`` without ``heading`` (the text after the heading stays)."""
    copy = lxml.html.fromstring(etree.tostring(section, encoding="unicode"))
    target = copy.xpath(_HEADING)[0]
    target.drop_tree()  # keeps the tail text, drops the element and its children
    return copy


def answer_page(entry: FaqEntry) -> bytes:
    """The answer as a standalone HTML page with no title (the title field is searched too)."""
    return f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>{entry.answer_html}</body></html>'.encode()


# ------------------------------------------------------------------------------ corpus
@dataclass(frozen=True, slots=True)
class Query:
    text: str
    relevant: frozenset[str]  # doc ids (several when two entries ask the same question)


@dataclass(slots=True)
class Corpus:
    name: str
    source: str
    writes: list[DocumentWrite] = field(default_factory=list)
    queries: list[Query] = field(default_factory=list)
    faq_docs: int = 0
    distractor_docs: int = 0

    @property
    def chunks(self) -> list[Chunk]:
        return [c for w in self.writes for c in w.chunks]


@cache
def _model_budget() -> ChunkBudget:
    """The local model's chunk budget (loads its tokenizer once)."""
    budget = chunk_budget(EmbeddingConfig(provider="local"))
    assert budget is not None  # provider "local"
    return budget


def _document(source: str, key: str, data: bytes) -> DocumentWrite | None:
    doc_id = document_id(source, key)
    try:
        parsed = parse_document(RawDocument(item_key=key, data=data, file_name=Path(key).name, media_type="text/html"))
    except ParseError:
        return None
    chunks = chunk_within(parsed, doc_id, "token", {}, _model_budget())  # as the engine chunks for the model
    if not chunks:
        return None
    record = DocumentRecord(source=source, doc_id=doc_id, item_key=key, media_type="text/html", run_id="bench")
    return DocumentWrite(record, chunks)


def faq_corpus(name: str, source: str, pages: Sequence[Path], *, questions_only: bool) -> Corpus:
    corpus = Corpus(name, source)
    by_question: dict[str, set[str]] = {}
    for page in pages:
        for entry in faq_entries(page.read_bytes(), page.name, questions_only=questions_only):
            write = _document(source, f"faq/{page.name}#{entry.anchor}", answer_page(entry))
            if write is None:
                continue
            corpus.writes.append(write)
            by_question.setdefault(entry.question, set()).add(write.document.doc_id)
    corpus.faq_docs = len(corpus.writes)
    corpus.queries = [Query(q, frozenset(ids)) for q, ids in by_question.items()]
    return corpus


def add_distractors(
    corpus: Corpus, pages: Sequence[Path], chunk_budget: int, seed: int = 22, prefix: str = "library"
) -> None:
    """Whole pages, in a seeded random order, until ``chunk_budget`` chunks are added."""
    order = list(pages)
    random.Random(seed).shuffle(order)
    added = 0
    for page in order:
        if added >= chunk_budget:
            break
        write = _document(corpus.source, f"{prefix}/{page.name}", page.read_bytes())
        if write is None or added + len(write.chunks) > chunk_budget * 1.1:
            continue  # a page that would overshoot the budget by much: try a smaller one
        corpus.writes.append(write)
        corpus.distractor_docs += 1
        added += len(write.chunks)


def _py_docs() -> Path | None:
    return next((p for p in PY_DOCS if (p / "faq").is_dir()), None)


def pg_corpus(distractor_chunks: int = PG_DISTRACTOR_CHUNKS) -> Corpus:
    """The PostgreSQL set: every answer page whole, and a seeded sample of the others."""
    corpus = Corpus("PostgreSQL manual questions (en)", "bench:pgman")
    doc_of: dict[str, str] = {}
    for name in sorted({page for pages in PG_QUESTIONS.values() for page in pages}):
        write = _document(corpus.source, f"pg/{name}.html", (PG_MANUAL / f"{name}.html").read_bytes())
        if write is None:
            raise RuntimeError(f"answer page {name}.html of the PostgreSQL set did not parse or chunk")
        corpus.writes.append(write)
        doc_of[name] = write.document.doc_id
    corpus.faq_docs = len(corpus.writes)
    corpus.queries = [Query(q, frozenset(doc_of[p] for p in pages)) for q, pages in PG_QUESTIONS.items()]
    others = [
        p
        for p in sorted(PG_MANUAL.glob("*.html"))
        if p.stem not in doc_of and not p.name.startswith(PG_EXCLUDED_PREFIXES)
    ]
    add_distractors(corpus, others, distractor_chunks)
    return corpus


def corpora(quick: bool) -> tuple[list[Corpus], list[str]]:
    """The sets installed here (``quick``: three Python FAQ pages, no distractors anywhere) and notes on
    the ones skipped."""
    found: list[Corpus] = []
    notes: list[str] = []
    py = _py_docs()
    if py is None:
        notes.append("Python FAQ skipped: python3-doc is not installed (apt-get install python3-doc).")
    else:
        pages = sorted(p for p in (py / "faq").glob("*.html") if p.name != "index.html")
        if quick:
            pages = [p for p in pages if p.name in QUICK_PY_PAGES]
        corpus = faq_corpus("Python FAQ (en)", "bench:pyfaq", pages, questions_only=False)
        if not quick:
            add_distractors(corpus, sorted((py / "library").glob("*.html")), DISTRACTOR_CHUNKS)
        found.append(corpus)
    if ZH_FAQ.is_dir():
        pages = sorted(p for p in ZH_FAQ.glob("*.html") if p.name != "index.zh-cn.html")
        found.append(faq_corpus("Debian FAQ (zh-cn)", "bench:zhfaq", pages, questions_only=True))
    else:
        notes.append("Chinese set skipped: debian-faq-zh-cn is not installed (apt-get install debian-faq-zh-cn).")
    if PG_MANUAL.is_dir():
        found.append(pg_corpus(0) if quick else pg_corpus())
    else:
        notes.append("PostgreSQL set skipped: postgresql-doc-15 is not installed (apt-get install postgresql-doc-15).")
    return found, notes
