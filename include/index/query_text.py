"""A search query's terms, as both index backends count them, and the cap on how many are searched.

A term is a word, or an overlapping bigram of a CJK run (a lone CJK character is itself), as
Lucene's CJKBigramFilter splits them. English stop words (Lucene's ``EnglishAnalyzer`` default
set) are left out of a query that has other terms; a term asked twice is one term.

Only the first :data:`MAX_QUERY_TERMS` distinct terms are searched. Every term of an OR query
is one more posting list to merge and score: 666 terms over 50,000 chunks took 6.9 s in SQLite
(RELIABILITY.md). Dropping the rest, with a note, keeps a pasted paragraph searchable; 64 is far
above what a question has and matches nothing a search user would miss (Elasticsearch's own
``max_clause_count`` guards the same cost, at a higher limit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "CJK_RUN",
    "ENGLISH_STOP_WORDS",
    "MAX_QUERY_TERMS",
    "SearchTerms",
    "fts_query",
    "query_terms",
    "search_terms",
    "segment_cjk",
]

MAX_QUERY_TERMS = 64

CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\uff66-\uff9f]+")
_QUERY_TERM = re.compile(r"[\w\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+", re.UNICODE)

# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (also Elasticsearch's ``_english_`` stop list).
# fmt: off
ENGLISH_STOP_WORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no",
    "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to",
    "was", "will", "with",
})
# fmt: on


@dataclass(frozen=True, slots=True)
class SearchTerms:
    """The terms a query is searched by, and how many distinct terms past the cap were dropped."""

    kept: list[str]
    dropped: int = 0

    @property
    def note(self) -> str | None:
        """What a search user is told when terms were dropped (None: every term searched)."""
        if not self.dropped:
            return None
        total = len(self.kept) + self.dropped
        return f"the query has {total} distinct terms; only the first {len(self.kept)} were searched"


def query_terms(query: str) -> list[str]:
    """The query's terms in order: its words, and each CJK run as overlapping bigrams (a lone
    CJK character as itself), as Lucene's CJKBigramFilter splits them."""
    terms: list[str] = []
    for word in _QUERY_TERM.findall(query):
        start = 0
        for run in CJK_RUN.finditer(word):  # a word may mix scripts: "Debian软件包"
            terms.append(word[start : run.start()])
            chars = run.group()
            terms += [chars] if len(chars) == 1 else [chars[i : i + 2] for i in range(len(chars) - 1)]
            start = run.end()
        terms.append(word[start:])
    return [t for t in terms if any(ch.isalnum() for ch in t)]  # "_" alone is no FTS token


def search_terms(
    query: str, *, stop_words: frozenset[str] = ENGLISH_STOP_WORDS, cap: int = MAX_QUERY_TERMS
) -> SearchTerms:
    """The distinct casefolded terms searched (stop words left out unless nothing else is left),
    the first ``cap`` of them."""
    terms = list(dict.fromkeys(t.casefold() for t in query_terms(query)))
    kept = [t for t in terms if t not in stop_words] or terms  # "to be or not to be" still searches
    return SearchTerms(kept[:cap], max(0, len(kept) - cap))


def segment_cjk(text: str) -> str:
    """Space out CJK characters so each is its own FTS token."""
    # one substitution per run of CJK characters, not per character (~2.7x faster upserts)
    return CJK_RUN.sub(lambda m: " " + " ".join(m.group()) + " ", text)


def fts_query(query: str, *, stop_words: frozenset[str] = ENGLISH_STOP_WORDS) -> str | None:
    """Free text as a safe FTS5 MATCH expression: its terms (:func:`~include.index.query_text.search_terms`:
    distinct, stop words left out unless nothing else is left, at most ``MAX_QUERY_TERMS``) quoted
    and OR'd, CJK bigrams as two-character phrases."""
    kept = search_terms(query, stop_words=stop_words).kept
    if not kept:
        return None
    return " OR ".join('"' + " ".join(segment_cjk(t).split()).replace('"', '""') + '"' for t in kept)
