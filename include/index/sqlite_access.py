"""Document access entries in the SQLite index file: storage and the search filter's SQL.

``doc_access`` holds one row per (index, document, entry) (:mod:`include.acl` entries such as
``public`` or ``group:feishu_chat:oc_1``); a document with no row is seen by an unrestricted
search only (fail-closed: that includes documents indexed before entries were stored, until a
permission sync or a re-upsert writes theirs). The ``(index_name, entry, doc_id)`` index makes
"the documents holding one of these entries" a range scan per entry.

The filter is a semi-join inside the ranking query, not a pass over its results: BM25 checks
each FTS match's ``doc_id`` against the permitted set (built once per statement), and KNN hands
sqlite-vec the permitted chunk rowids (``chunk_rowid IN (...)``, a filter applied while it scans,
so the ``k`` nearest *permitted* vectors come back). The searcher's entries travel as one JSON
array parameter (``json_each``): no statement variable per entry, whatever the principal's size.

KNN when the searcher may read much of the index (:func:`nearest_permitted`): building the
permitted rowid list costs one index seek per permitted document (8 ms for 25,000 chunks of
2,500 documents, against a 28 ms unfiltered KNN over 50,000 384-dimension vectors), so from
``WIDEN_FROM_SHARE`` of the documents on, the KNN is run unfiltered for ``2k / share`` nearest
and the permitted among them kept; fewer than ``k`` left (the nearest happen to be forbidden),
it is run again with the filter inside. Either way the result is the ``k`` nearest permitted
chunks: the permitted ones among the overall nearest are, in order, the nearest permitted.

Writes only touch ``doc_access``: an ACL change never rewrites a chunk row, its FTS text or its
vector.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from include.index.base import normalize_entries

__all__ = [
    "ACCESS_SCHEMA",
    "WIDEN_FROM_SHARE",
    "delete_entries",
    "nearest_permitted",
    "permitted_chunk_rowids",
    "permitted_doc_ids",
    "set_entries",
    "stored_entries",
    "write_entries",
]

ACCESS_SCHEMA = """
CREATE TABLE IF NOT EXISTS doc_access (
    index_name TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    entry TEXT NOT NULL,
    PRIMARY KEY (index_name, doc_id, entry)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS doc_access_entry ON doc_access (index_name, entry, doc_id);
"""

_BATCH = 500  # doc ids per statement (SQLite's variable limit is 32766)
WIDEN_FROM_SHARE = 0.25  # permitted share of documents from which KNN widens instead of filtering
_MAX_WIDE_K = 4096  # sqlite-vec's limit on k

# The documents of an index holding one of the searcher's entries (a JSON array parameter).
_PERMITTED_DOCS = "SELECT doc_id FROM doc_access WHERE index_name = ? AND entry IN (SELECT value FROM json_each(?))"


def permitted_doc_ids(column: str, index_name: str, access: Sequence[str]) -> tuple[str, list[Any]]:
    """A WHERE term keeping rows whose ``column`` (a doc id) is of a permitted document."""
    return f"{column} IN ({_PERMITTED_DOCS})", [index_name, json.dumps(list(access))]


def permitted_chunk_rowids(column: str, index_name: str, access: Sequence[str]) -> tuple[str, list[Any]]:
    """A WHERE term keeping rows whose ``column`` (a chunk rowid) is of a permitted document."""
    docs, args = permitted_doc_ids("c.doc_id", index_name, access)
    return f"{column} IN (SELECT c.rowid FROM chunks c WHERE c.index_name = ? AND {docs})", [index_name, *args]


Knn = Callable[[int, "tuple[str, list[Any]] | None"], list[tuple[int, float]]]


def _permitted_share(db: Any, index_name: str, access: Sequence[str]) -> float:
    """The share of the index's documents (those with entries) holding one of ``access``."""
    permitted, total = db.execute(
        f"SELECT (SELECT count(DISTINCT doc_id) FROM ({_PERMITTED_DOCS})),"
        " (SELECT count(DISTINCT doc_id) FROM doc_access WHERE index_name = ?)",
        [index_name, json.dumps(list(access)), index_name],
    ).fetchone()
    return float(permitted) / total if total else 0.0


def nearest_permitted(db: Any, index_name: str, access: Sequence[str], k: int, knn: Knn) -> list[tuple[int, float]]:
    """The ``k`` nearest permitted (chunk rowid, similarity); ``knn(k, only)`` runs the KNN
    statement with an optional WHERE term on ``chunk_rowid`` (module docstring)."""
    share = _permitted_share(db, index_name, access)
    if share >= WIDEN_FROM_SHARE:
        wide_k = min(_MAX_WIDE_K, math.ceil(2 * k / share))
        wide = knn(wide_k, None)
        if wide:
            term, args = permitted_doc_ids("doc_id", index_name, access)
            marks = ",".join("?" * len(wide))
            rows = db.execute(
                f"SELECT rowid FROM chunks WHERE rowid IN ({marks}) AND {term}", [*(r for r, _ in wide), *args]
            )
            keep = {r[0] for r in rows}
            hits = [hit for hit in wide if hit[0] in keep]
            if len(hits) >= k or len(wide) < wide_k:  # k found, or every vector was a candidate
                return hits[:k]
    return knn(k, permitted_chunk_rowids("chunk_rowid", index_name, access))


def _current(cur: Any, index_name: str, doc_id: str) -> tuple[str, ...]:
    rows = cur.execute(
        "SELECT entry FROM doc_access WHERE index_name = ? AND doc_id = ? ORDER BY entry", (index_name, doc_id)
    )
    return tuple(r[0] for r in rows)


def write_entries(cur: Any, index_name: str, doc_id: str, entries: Iterable[str]) -> bool:
    """Make ``entries`` the document's (inside the caller's transaction); False: they already were."""
    wanted = normalize_entries(entries)
    if _current(cur, index_name, doc_id) == wanted:
        return False  # a re-upsert of an unchanged document writes no ACL row either
    cur.execute("DELETE FROM doc_access WHERE index_name = ? AND doc_id = ?", (index_name, doc_id))
    cur.executemany(
        "INSERT INTO doc_access (index_name, doc_id, entry) VALUES (?, ?, ?)",
        [(index_name, doc_id, e) for e in wanted],
    )
    return True


def delete_entries(cur: Any, index_name: str, doc_id: str) -> None:
    cur.execute("DELETE FROM doc_access WHERE index_name = ? AND doc_id = ?", (index_name, doc_id))


def _batches(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), _BATCH):
        yield items[i : i + _BATCH]


def _indexed_docs(db: Any, index_name: str, source: str, doc_ids: Sequence[str]) -> set[str]:
    """Which of ``doc_ids`` have chunks of ``source`` in the index."""
    found: set[str] = set()
    for batch in _batches(doc_ids):
        rows = db.execute(
            "SELECT DISTINCT doc_id FROM chunks WHERE index_name = ? AND source = ?"
            f" AND doc_id IN ({','.join('?' * len(batch))})",
            [index_name, source, *batch],
        )
        found.update(r[0] for r in rows)
    return found


def set_entries(db: Any, index_name: str, source: str, access: Mapping[str, Sequence[str]]) -> int:
    """``IndexBackend.set_access`` in one transaction: documents whose entries changed."""
    wanted = {doc_id: normalize_entries(entries) for doc_id, entries in access.items()}  # refused before BEGIN
    cur = db.cursor()
    cur.execute("BEGIN IMMEDIATE")
    try:
        present = _indexed_docs(cur, index_name, source, list(wanted))
        changed = sum(write_entries(cur, index_name, d, wanted[d]) for d in wanted if d in present)
        cur.execute("COMMIT")
    except BaseException:
        cur.execute("ROLLBACK")
        raise
    return changed


def stored_entries(db: Any, index_name: str, source: str, doc_ids: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """``IndexBackend.access_of``: each indexed document's entries (``()``: none stored)."""
    ids = list(dict.fromkeys(doc_ids))
    out: dict[str, list[str]] = {d: [] for d in sorted(_indexed_docs(db, index_name, source, ids))}
    for batch in _batches([d for d in ids if d in out]):
        rows = db.execute(
            "SELECT doc_id, entry FROM doc_access WHERE index_name = ?"
            f" AND doc_id IN ({','.join('?' * len(batch))}) ORDER BY doc_id, entry",
            [index_name, *batch],
        )
        for doc_id, entry in rows:
            out[doc_id].append(entry)
    return {d: tuple(e) for d, e in out.items()}
