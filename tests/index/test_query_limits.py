"""A long query searches at most 64 distinct terms, and every index search ends by its time limit.

Issue 32, point 16: a 666-term (1,997-character) query over 50,000 chunks took 6.9 s in SQLite.
The index here is a real SQLite FTS5 file of 50,000 chunks, bulk-inserted in one transaction
(the engine's upsert would take minutes); Elasticsearch is the request-recording simulator.
"""

from __future__ import annotations

import itertools
import json
import random
import string
from collections.abc import Iterator
from pathlib import Path

import pytest

from include.index.base import SearchTimeout
from include.index.elasticsearch import ElasticsearchIndex, bm25_query
from include.index.query_text import ENGLISH_STOP_WORDS, MAX_QUERY_TERMS, search_terms
from include.index.sqlite_fts import SqliteFtsIndex, fts_query
from tests.index.es_simulator import es_simulator
from tests.index.helpers import make_write

CHUNKS = 50_000
WORDS_PER_CHUNK = 30
# every two-letter word but the stop words (662), and four letters: 666 distinct terms in 1,993
# characters, as long as the query and within the API's 2,000
VOCABULARY = [a + b for a, b in itertools.product(string.ascii_lowercase, repeat=2)] + list("bcde")
TERMS = [w for w in VOCABULARY if w not in ENGLISH_STOP_WORDS]
LONG_QUERY = " ".join(TERMS)


def _bulk_fill(index: SqliteFtsIndex, chunks: int) -> None:
    """``chunks`` rows of random two-letter words, written straight into the index's two tables."""
    rng = random.Random(32)
    db = index._db  # the test's shortcut past upsert: one transaction, executemany
    db.execute("BEGIN")
    rows, texts = [], []
    for n in range(chunks):
        text = " ".join(rng.choices(VOCABULARY, k=WORDS_PER_CHUNK))
        rows.append((n + 1, f"c{n}", index.index_name, "files:big", f"d{n // 10}", f"k{n // 10}", n % 10, "text", text))
        texts.append((n + 1, text, f"doc {n // 10}"))
    db.executemany(
        "INSERT INTO chunks (rowid, chunk_id, index_name, source, doc_id, item_key, seq, kind, text, token_count,"
        " text_hash, heading_path, positions, metadata, updated_at) VALUES (?,?,?,?,?,?,?,?,?,30,'h','[]','[]','{}',0)",
        rows,
    )
    db.executemany("INSERT INTO chunks_fts (rowid, body, title) VALUES (?, ?, ?)", texts)
    db.execute("COMMIT")


@pytest.fixture(scope="module")
def big_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqliteFtsIndex]:
    path: Path = tmp_path_factory.mktemp("query-limits") / "index.db"
    index = SqliteFtsIndex(path, "big")
    _bulk_fill(index, CHUNKS)
    try:
        yield index
    finally:
        index.close()


def test_the_query_is_capped_at_64_distinct_terms_with_a_note() -> None:
    assert len(LONG_QUERY) == 1993 and len(set(TERMS)) == 666
    terms = search_terms(LONG_QUERY)
    assert terms.kept == TERMS[:MAX_QUERY_TERMS] and terms.dropped == 666 - MAX_QUERY_TERMS
    assert terms.note == "the query has 666 distinct terms; only the first 64 were searched"
    match = fts_query(LONG_QUERY)
    assert match is not None and match.count(" OR ") == MAX_QUERY_TERMS - 1
    assert search_terms("reset the password").note is None  # a question is untouched


def test_a_666_term_query_over_50000_chunks_returns_capped_hits(big_index: SqliteFtsIndex) -> None:
    assert big_index.count() == CHUNKS
    hits = big_index.search(LONG_QUERY, k=10, time_limit=60)  # generous: the outcome counts, not the time
    assert len(hits) == 10
    searched = set(TERMS[:MAX_QUERY_TERMS])
    assert all(searched & set(h.text.split()) for h in hits)  # every hit matches a searched term


def test_a_search_past_its_time_limit_ends_typed_and_the_index_still_answers(big_index: SqliteFtsIndex) -> None:
    with pytest.raises(SearchTimeout, match=r"time limit of 0\.001 s"):
        big_index.search(LONG_QUERY, k=10, time_limit=0.001)
    with pytest.raises(SearchTimeout):  # the default limit, set as an index option, holds as well
        SqliteFtsIndex(big_index.path, "big", search_time_limit=0.001).search(LONG_QUERY, k=10)
    # the progress handler is gone after the timeout: the next search runs to its end
    assert len(big_index.search("aa zz", k=5)) == 5
    with pytest.raises(ValueError, match="search_time_limit"):
        SqliteFtsIndex(big_index.path, "big", search_time_limit=0)


def test_elasticsearch_searches_carry_the_time_limit_and_the_capped_query() -> None:
    with es_simulator("limits") as (simulator, client):
        index = ElasticsearchIndex(client, "limits", refresh="false", owns_client=False, search_time_limit=5)
        index.upsert([make_write("files:s", "a.html", [f"{TERMS[0]} {TERMS[1]}", "trains run late"])])
        before = len(simulator.bodies("POST", "/_search"))
        hits = index.search(LONG_QUERY, k=5)
        [sent] = simulator.bodies("POST", "/_search")[before:]
        with pytest.raises(SearchTimeout):  # no time left: refused before a request goes out
            index.search("trains", k=5, time_limit=1e-9)
    assert sent["timeout"].endswith("ms") and 0 < int(sent["timeout"][:-2]) <= 5000
    assert sent["query"] == bm25_query(" ".join(TERMS[:MAX_QUERY_TERMS]), None)
    assert len(json.dumps(sent["query"])) < 1000 and len(hits) == 1
