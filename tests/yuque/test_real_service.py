"""Yuque as the real service behaves (issue 20): each test fails on the connector before it.

End to end through the engine (``run_pipeline``, SQLite FTS index) against the simulator set
to the real behaviour: 404 for repos a token cannot see, repo renames, metadata-only edits
moving ``updated_at`` alone, drafts, TOC moves that do not touch the doc.
"""

from __future__ import annotations

import pytest

from include.config import SourceConfig
from include.contract import document_id
from include.index import open_index
from include.stores import open_state_store
from plugins.connectors.yuque import connector as yuque_connector
from plugins.engine import run_pipeline
from tests.yuque.conftest import yuque_source


def _hits(source, query: str) -> list:
    index = open_index(source.index)
    try:
        return index.search(query, k=20, source=source.source_id)
    finally:
        index.close()


def _ids(source, query: str) -> set[str]:
    return {h.doc_id for h in _hits(source, query)}


def _state(source) -> dict:
    store = open_state_store()
    try:
        return store.items(source.source_id)
    finally:
        store.close()


def _key(repo, doc) -> str:
    return f"{repo.id}/{doc.id}"


@pytest.fixture
def kb(sim, yuque_conn, tributary_home):
    big = sim.add_repo("alice", "kb", "知识库")
    docs = [sim.add_doc(big, f"文档{i}", body=f"第{i}篇正文，编号 kb{i}x。", toc_path=["章节"]) for i in range(9)]
    return sim, big, docs


# ----------------------------------------------------------------------- 1. a 404 deletes nothing


def test_repo_answering_404_is_not_deleted(kb):
    sim, _big, _ = kb
    small = sim.add_repo("alice", "small", "小库")
    doc = sim.add_doc(small, "小文档", body="只有一篇，编号 small1x。")
    source = yuque_source(namespaces=["alice/kb", "alice/small"])
    assert run_pipeline(source).counts["new"] == 10
    # the token loses sight of the repo (another team's token, a permission change): Yuque
    # answers 404 on every route, exactly as for a repo that does not exist
    sim.add_account("other", group=True)
    small.owner = "other"
    for _ in range(3):  # more runs than delete_after_missing_runs: still nothing deleted
        summary = run_pipeline(source)
        assert summary.status == "partial" and summary.counts["deleted"] == 0
        assert summary.counts["listing_complete"] is False
    reasons = summary.counts["source_stats"]["incomplete_reasons"]
    assert any("alice/small" in r and "404" in r for r in reasons)
    assert _ids(source, "small1x") == {document_id(source.source_id, _key(small, doc))}


# ----------------------------------------------------------------------- 2. renames


def test_repo_rename_keeps_every_doc(kb):
    sim, big, docs = kb
    source = yuque_source()
    sid = source.source_id
    assert run_pipeline(source).counts["new"] == 9
    before = {k: (st.doc_id, st.chunk_ids) for k, st in _state(source).items()}
    sim.rename_repo(big, "handbook", "员工手册")
    summary = run_pipeline(source)
    # no mass-delete guard, no new docs, nothing deleted: the keys never mentioned the slug
    assert summary.status == "success"
    assert (summary.counts["new"], summary.counts["deleted"], summary.counts["failed"]) == (0, 0, 0)
    after = {k: (st.doc_id, st.chunk_ids) for k, st in _state(source).items()}
    # every doc keeps its doc id and its chunk count; chunk ids follow the chunks' text, and
    # each doc's text starts with its breadcrumbs, whose first crumb is the repo's (new) name
    assert {k: (d, len(c)) for k, (d, c) in after.items()} == {k: (d, len(c)) for k, (d, c) in before.items()}
    index = open_index(source.index)
    assert all(index.get_chunk(c)["text"].startswith("员工手册\n") for _, ids in after.values() for c in ids)
    # the URLs follow the new namespace (the text did not change, the place did)
    (hit,) = _hits(source, "kb3x")
    assert hit.doc_id == document_id(sid, _key(big, docs[3])) and "/alice/handbook/" in hit.url


def test_legacy_namespace_keys_migrate_without_reindexing(kb, monkeypatch):
    sim, big, docs = kb
    source = yuque_source()
    sid = source.source_id
    # state as an earlier release wrote it: keys "<namespace>/<doc id>", doc ids derived from them
    legacy = {big.id: big.namespace}
    current_key = yuque_connector.item_key
    monkeypatch.setattr(yuque_connector, "item_key", lambda book_id, doc_id: f"{legacy[book_id]}/{doc_id}")
    assert run_pipeline(source).counts["new"] == 9
    old = _state(source)
    assert set(old) == {f"alice/kb/{d.id}" for d in docs}
    monkeypatch.setattr(yuque_connector, "item_key", current_key)

    sim.rename_repo(big, "handbook")  # a rename on top: the legacy keys would all go missing
    summary = run_pipeline(source)
    assert summary.status == "success"
    assert (summary.counts["new"], summary.counts["deleted"]) == (0, 0)
    assert summary.counts["source_stats"]["renamed_keys"] == 9
    new = _state(source)
    assert set(new) == {_key(big, d) for d in docs}
    for d in docs:
        was, now = old[f"alice/kb/{d.id}"], new[_key(big, d)]
        assert (now.doc_id, now.chunk_ids) == (was.doc_id, was.chunk_ids)  # same index entries
    index = open_index(source.index)
    try:
        assert index.count(source=sid) == sum(len(st.chunk_ids) for st in new.values())
    finally:
        index.close()
    # and the run after that is a quiet one
    third = run_pipeline(source)
    assert (third.counts["unchanged"], third.counts["fetched"]) == (9, 0)


def test_legacy_keys_migrate_in_a_full_resync_too(kb, monkeypatch):
    # a full resync withholds every item from ``known``; the keys must still move, not be
    # re-created (new doc ids) while the old ones are deleted (the mass-delete guard)
    _sim, big, docs = kb
    source = yuque_source()
    current_key = yuque_connector.item_key
    monkeypatch.setattr(yuque_connector, "item_key", lambda book_id, doc_id: f"{big.namespace}/{doc_id}")
    run_pipeline(source)
    old = _state(source)
    monkeypatch.setattr(yuque_connector, "item_key", current_key)
    summary = run_pipeline(source, {"full_resync": True})
    assert summary.status == "success"
    assert (summary.counts["new"], summary.counts["deleted"]) == (0, 0)
    new = _state(source)
    assert sorted(st.doc_id for st in new.values()) == sorted(st.doc_id for st in old.values())
    assert set(new) == {_key(big, d) for d in docs}


# ----------------------------------------------------------------------- 3. metadata-only edits


def test_slug_rename_alone_updates_the_url(kb):
    sim, _big, docs = kb
    source = yuque_source()
    run_pipeline(source)
    sim.edit_meta(docs[4], slug="renamed-slug")  # updated_at moves, content_updated_at does not
    summary = run_pipeline(source)
    assert summary.counts["changed"] == 1
    (hit,) = _hits(source, "kb4x")
    assert hit.url.endswith("/alice/kb/renamed-slug")


def test_toc_move_that_does_not_touch_the_doc_updates_its_path(kb):
    sim, _big, docs = kb
    sim.toc_move_touches_doc = False  # the most hidden variant: only the TOC changes
    source = yuque_source()
    run_pipeline(source)
    sim.move_doc(docs[5], ["归档", "2025"])
    summary = run_pipeline(source)
    assert (summary.counts["changed"], summary.counts["unchanged"]) == (1, 8)
    (hit,) = _hits(source, "kb5x")
    assert hit.metadata["breadcrumbs"] == ["知识库", "归档", "2025"]
    assert "归档" in hit.text and "2025" in hit.text  # the new path heads the doc's text


@pytest.mark.parametrize("moves", ["content", "updated"])
def test_sheet_autosave_is_seen_whichever_timestamp_it_moves(sim, yuque_conn, tributary_home, moves):
    sim.sheet_autosave_moves = moves
    repo = sim.add_repo("alice", "sheets", "表格")
    first = [{"name": "S", "index": 0, "data": {"0": {"0": {"v": "原值 oldcellx"}}}}]
    sheet = sim.add_doc(repo, "表", format="lakesheet", sheets=first)
    source = yuque_source()
    run_pipeline(source)
    sim.autosave_sheet(sheet, [{"name": "S", "index": 0, "data": {"0": {"0": {"v": "新值 newcellx"}}}}])
    assert run_pipeline(source).counts["changed"] == 1
    assert _ids(source, "newcellx") and not _ids(source, "oldcellx")


# ----------------------------------------------------------------------- 4. drafts


def test_drafts_skipped_unless_include_drafts(sim, yuque_conn, tributary_home):
    repo = sim.add_repo("alice", "kb", "知识库")
    sim.add_doc(repo, "已发布", body="发布的正文 publishedx。")
    sim.add_doc(repo, "草稿", body="草稿正文 draftx。", status=0)
    source = yuque_source()
    summary = run_pipeline(source)
    assert (summary.counts["new"], summary.counts["failed"], summary.counts["skipped"]) == (1, 0, 0)
    assert summary.counts["source_stats"]["drafts_skipped"] == 1
    assert _ids(source, "publishedx") and not _ids(source, "draftx")
    with_drafts = yuque_source(name="kb_drafts", include_drafts=True)
    assert run_pipeline(with_drafts).counts["new"] == 2
    assert _ids(with_drafts, "draftx")  # from body_draft: a draft has no published body


# ----------------------------------------------------------------------- 7. TOC as heading path


def test_toc_path_is_the_heading_path_of_every_chunk(sim, yuque_conn, tributary_home):
    repo = sim.add_repo("alice", "kb", "知识库")
    body = "# 第一节\n\n甲乙 sectiononex。\n\n## 小节\n\n丙丁 subsectionx。"
    sim.add_doc(repo, "手册", body=body, toc_path=["制度", "人事"])
    # heading mode: every chunk starts with its heading path, which now begins with the TOC path
    source = SourceConfig(
        kind="yuque",
        name="kb",
        conn_id="yuque_default",
        chunker={"name": "heading", "options": {"chunk_token_num": 32}},
    )
    run_pipeline(source)
    (first,) = _hits(source, "sectiononex")
    (second,) = _hits(source, "subsectionx")
    assert first.title == "手册"  # the repo heading does not become the title
    # the first chunk starts at the path's own headings (they are its text); a later one carries
    # the whole path, TOC first (its text prefix is cut to max_prefix_tokens by the chunker)
    assert first.text.startswith("知识库\n制度\n人事\n手册\n第一节\n")
    assert second.heading_path == ["知识库", "制度", "人事", "手册", "第一节", "小节"]
    # the default chunker sees the same headings: the path is in the text the index holds
    plain = yuque_source(name="kb_plain")
    run_pipeline(plain)
    (hit,) = _hits(plain, "sectiononex")
    assert all(part in hit.text for part in ("知识库", "制度", "人事", "手册"))
