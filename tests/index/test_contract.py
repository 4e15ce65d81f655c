"""The IndexBackend contract, run against every backend (see conftest: SQLite always,
Elasticsearch when ELASTICSEARCH_URL is set)."""

from __future__ import annotations

from include.contract import document_id
from include.index.base import IndexBackend
from tests.index.conftest import BackendFactory
from tests.index.helpers import make_write, positional_chunk_id

SRC = "web:demo"
EN = [
    "Airflow schedules the incremental sync of every knowledge source.",
    "Chunks whose content hash did not change are never rewritten.",
    "Elasticsearch and SQLite implement the same index contract.",
]
ZH = ["知识库同步由调度器按增量方式执行。", "分块内容没有变化时不会被重写。"]


def _supports_rebuild(backend: IndexBackend) -> bool:
    return type(backend).begin_rebuild is not IndexBackend.begin_rebuild


def test_upsert_new_document_stores_every_chunk_with_lineage(backend: IndexBackend) -> None:
    w = make_write(SRC, "docs/intro.html", EN, title="Intro", heading=["Guide", "Intro"], run_id="run-7")
    [res] = backend.upsert([w])
    assert (res.doc_id, res.ok, res.written, res.unchanged, res.deleted, res.error) == (
        w.document.doc_id,
        True,
        3,
        0,
        0,
        None,
    )
    assert backend.count() == 3
    assert backend.count(source=SRC, doc_id=w.document.doc_id) == 3
    assert backend.chunk_ids(doc_id=w.document.doc_id) == {c.chunk_id for c in w.chunks}
    got = backend.get_chunk(w.chunks[1].chunk_id)
    assert got is not None
    assert got["chunk_id"] == w.chunks[1].chunk_id
    assert got["text"] == EN[1]
    assert got["doc_id"] == w.document.doc_id
    assert got["source"] == SRC
    assert got["item_key"] == "docs/intro.html"
    assert got["text_hash"] == w.chunks[1].text_hash
    assert got["heading_path"] == ["Guide", "Intro"]
    assert (got["title"], got["url"], got["run_id"], got["doc_version"]) == (
        "Intro",
        "http://127.0.0.1/docs/intro.html",
        "run-7",
        "v1",
    )
    # document and chunk metadata both travel with the chunk
    assert got["metadata"]["lang"] == "en"
    assert got["metadata"]["chunker_options_hash"] == "abc123"


def test_reupsert_of_unchanged_document_writes_nothing(backend: IndexBackend) -> None:
    w = make_write(SRC, "a.html", EN)
    backend.upsert([w])
    [res] = backend.upsert([make_write(SRC, "a.html", EN, run_id="run-2")])
    assert (res.ok, res.written, res.unchanged, res.deleted) == (True, 0, 3, 0)
    # unchanged chunks keep the run that actually wrote them
    assert backend.get_chunk(w.chunks[0].chunk_id)["run_id"] == "run-1"  # type: ignore[index]
    assert backend.count() == 3


def test_changed_chunk_is_rewritten_and_the_others_skipped(backend: IndexBackend) -> None:
    backend.upsert([make_write(SRC, "a.html", EN)])
    edited = [EN[0], "This sentence replaced the second chunk.", EN[2]]
    w2 = make_write(SRC, "a.html", edited, run_id="run-2", version="v2")
    [res] = backend.upsert([w2])
    assert (res.ok, res.written, res.unchanged, res.deleted) == (True, 1, 2, 0)
    got = backend.get_chunk(w2.chunks[1].chunk_id)
    assert got is not None and got["text"] == edited[1] and got["run_id"] == "run-2"
    assert [h.chunk_id for h in backend.search("replaced second chunk")] == [w2.chunks[1].chunk_id]


def test_moved_or_retitled_document_rewrites_its_unchanged_chunks(backend: IndexBackend) -> None:
    # a Yuque slug rename or TOC move changes the URL, a title edit the title, and no text
    backend.upsert([make_write(SRC, "a.html", EN, title="Old title")])
    moved = make_write(SRC, "a.html", EN, title="New title", run_id="run-2", version="v2")
    moved.document.url = "http://127.0.0.1/renamed/a.html"
    [res] = backend.upsert([moved])
    assert (res.ok, res.written, res.unchanged, res.deleted) == (True, 3, 0, 0)
    want = (moved.document.url, "New title", "run-2")
    for chunk in moved.chunks:
        got = backend.get_chunk(chunk.chunk_id)
        assert got is not None and (got["url"], got["title"], got["run_id"]) == want
    [hit] = backend.search("Elasticsearch SQLite contract")
    assert (hit.url, hit.title) == (moved.document.url, "New title")


def test_shrunk_document_loses_its_stale_chunks(backend: IndexBackend) -> None:
    w1 = make_write(SRC, "a.html", EN)
    backend.upsert([w1])
    stale = [c.chunk_id for c in w1.chunks[1:]]
    [res] = backend.upsert([make_write(SRC, "a.html", EN[:1], stale=stale)])
    assert (res.ok, res.written, res.unchanged, res.deleted) == (True, 0, 1, 2)
    assert backend.chunk_ids() == {w1.chunks[0].chunk_id}
    assert backend.get_chunk(stale[0]) is None


def test_stale_chunks_go_even_when_the_caller_does_not_list_them(backend: IndexBackend) -> None:
    # e.g. left behind by a run whose state commit failed: the index itself is the safety net
    w1 = make_write(SRC, "a.html", EN)
    backend.upsert([w1])
    [res] = backend.upsert([make_write(SRC, "a.html", ["A completely new first chunk."])])
    assert (res.ok, res.written, res.deleted) == (True, 1, 2)
    assert backend.chunk_ids(doc_id=w1.document.doc_id) == {w1.chunks[0].chunk_id}


def test_batch_results_follow_the_writes_order(backend: IndexBackend) -> None:
    writes = [make_write(SRC, f"page-{i}.html", [f"page {i} text", f"page {i} more text"]) for i in range(5)]
    backend.upsert(writes[:2])
    results = backend.upsert(list(reversed(writes)))
    assert [r.doc_id for r in results] == [w.document.doc_id for w in reversed(writes)]
    assert [(r.written, r.unchanged) for r in results] == [(2, 0), (2, 0), (2, 0), (0, 2), (0, 2)]
    assert backend.count() == 10
    assert backend.upsert([]) == []


def test_delete_documents_removes_only_those_documents(backend: IndexBackend) -> None:
    a, b = make_write(SRC, "a.html", EN), make_write(SRC, "b.html", ZH)
    other = make_write("web:other", "a.html", EN[:1])
    backend.upsert([a, b, other])
    assert backend.delete_documents("web:other", [a.document.doc_id]) == 0  # wrong source: untouched
    assert backend.delete_documents(SRC, [a.document.doc_id, document_id(SRC, "never-indexed")]) == 3
    assert backend.count(source=SRC) == 2
    assert backend.chunk_ids(source=SRC) == {c.chunk_id for c in b.chunks}
    assert backend.count(source="web:other") == 1
    assert backend.delete_documents(SRC, []) == 0


def test_search_ranks_matches_filters_by_source_and_returns_lineage(backend: IndexBackend) -> None:
    a = make_write(SRC, "a.html", EN, title="Sync guide", heading=["Guide"])
    z = make_write(SRC, "zh.html", ZH, title="同步说明")
    other = make_write("web:other", "o.html", ["Airflow incremental sync elsewhere."])
    backend.upsert([a, z, other])

    # any term matches (ranked retrieval): the chunks with both words in their text come first,
    # then a's other chunks, whose title "Sync guide" holds one of them
    hits = backend.search("incremental sync", k=5)
    assert {h.chunk_id for h in hits[:2]} == {a.chunks[0].chunk_id, other.chunks[0].chunk_id}
    assert {h.chunk_id for h in hits[2:]} == {a.chunks[1].chunk_id, a.chunks[2].chunk_id}
    assert all(h.score > 0 for h in hits)
    hit = backend.search("incremental sync", source=SRC)[0]
    assert (hit.chunk_id, hit.doc_id, hit.source, hit.text) == (a.chunks[0].chunk_id, a.document.doc_id, SRC, EN[0])
    assert (hit.title, hit.heading_path, hit.run_id, hit.doc_version) == ("Sync guide", ["Guide"], "run-1", "v1")
    assert hit.text_hash == a.chunks[0].text_hash
    assert hit.url == "http://127.0.0.1/a.html"

    # Chinese: adjacent characters of the query find the chunk holding them
    zh_hits = backend.search("增量", source=SRC)
    assert [h.chunk_id for h in zh_hits] == [z.chunks[0].chunk_id]
    assert backend.search("重写")[0].chunk_id == z.chunks[1].chunk_id

    # no chunk has every term: the best chunk with any term still comes back
    assert backend.search("contract zebra-unicorn")[0].chunk_id == a.chunks[2].chunk_id
    assert backend.search("nothingmatchesthis") == []
    assert len(backend.search("sync", k=1)) == 1


def test_get_chunk_and_counts_of_missing_things(backend: IndexBackend) -> None:
    assert backend.get_chunk(positional_chunk_id(document_id(SRC, "x"), 0)) is None
    assert backend.count() == 0
    assert backend.count(source=SRC) == 0
    assert backend.chunk_ids() == set()


def test_a_reopened_index_holds_what_was_written(open_backend: BackendFactory) -> None:
    first = open_backend()
    w = make_write(SRC, "a.html", EN)
    first.upsert([w])
    first.close()
    second = open_backend()
    assert second.chunk_ids() == {c.chunk_id for c in w.chunks}
    [res] = second.upsert([w])
    assert (res.written, res.unchanged) == (0, 3)


def test_full_rebuild_swaps_only_on_success(backend: IndexBackend) -> None:
    if not _supports_rebuild(backend):
        # Backends without a separate physical index keep the default no-op rebuild.
        backend.begin_rebuild()
        backend.finish_rebuild(True)
        return
    old = make_write(SRC, "old.html", ["the previous generation"])
    kept = make_write(SRC, "kept.html", EN)
    backend.upsert([old, kept])

    # a failed rebuild leaves the live index as it was
    backend.begin_rebuild()
    backend.upsert([make_write(SRC, "new.html", ["a generation that never goes live"])])
    backend.finish_rebuild(False)
    assert backend.chunk_ids() == {c.chunk_id for c in old.chunks + kept.chunks}

    # a successful one: readers see the old index until the swap, then exactly the new content
    backend.begin_rebuild()
    [res] = backend.upsert([make_write(SRC, "kept.html", EN)])
    assert (res.ok, res.written) == (True, 3)  # the new generation starts empty
    assert backend.search("previous generation")[0].chunk_id == old.chunks[0].chunk_id
    assert backend.count() == 4
    backend.finish_rebuild(True)
    assert backend.chunk_ids() == {c.chunk_id for c in kept.chunks}
    assert backend.search("previous generation") == []
    # writing after the swap goes to the live generation
    [res] = backend.upsert([make_write(SRC, "later.html", ["written after the swap"])])
    assert res.ok and backend.count() == 4
