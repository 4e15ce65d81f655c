"""Issue 32 (Yuque): the incremental listing stays right under every reading of the spec.

The spec says only that ``changed_at_gte`` is a "lower bound of change time" and that
``items_count`` is the "number of docs" (../shared/reference/yuque-api.md, additions of
2026-12-04). The simulator runs each reading (``changed_at_field``, ``items_count_counts``); the
listing must (a) list each repo in full at least every ``full_listing_every`` runs and whenever
a count disagrees, (b) count drafts the way ``items_count`` does, and (c) delete only in runs
whose listings were all full. Every run here is a real ``run_pipeline`` against the simulator on
127.0.0.1; requests are counted in the simulator.
"""

from __future__ import annotations

import pytest

from include.index import open_index
from include.stores import open_state_store
from plugins.connectors.yuque.versions import RepoCursor, fingerprint, repo_cursor, with_listed_at
from plugins.engine import run_pipeline
from tests.yuque.conftest import yuque_source


def _full_listings(sim, namespace: str | None = None) -> int:
    """Doc listings of this run without ``changed_at_gte`` (tombstone listings aside)."""
    return sum(
        1
        for r in sim.requests
        if r["path"].endswith("/docs")
        and "deleted" not in r["query"]
        and "changed_at_gte" not in r["query"]
        and (namespace is None or r["path"] == f"repos/{namespace}/docs")
    )


def _searchable(source, words: list[str]) -> dict[str, str | None]:
    """word -> URL of the document the index finds it in (None: not found)."""
    index = open_index(source.index)
    try:
        found = {w: index.search(w, k=5, source=source.source_id) for w in words}
    finally:
        index.close()
    return {w: (hits[0].url if hits else None) for w, hits in found.items()}


def _sheet(text: str) -> list[dict]:
    return [{"name": "表1", "index": 0, "data": {"0": {"0": {"v": text}}}}]


def _stored(source) -> dict:
    store = open_state_store()
    try:
        return store.items(source.source_id)
    finally:
        store.close()


@pytest.mark.parametrize("counts", ["all", "published"])
def test_a_draft_does_not_make_every_run_list_in_full(sim, yuque_conn, tributary_home, counts):
    # before: a draft made runs list the repo in full, under either reading of items_count:
    # the runs after its edits ("published": [1, 1, 0, 1]) or the others ("all": [1, 0, 1, 0])
    sim.items_count_counts = counts
    repo = sim.add_repo("alice", "kb", "知识库")
    for i in range(3):
        sim.add_doc(repo, f"文档{i}", body=f"正文 published{i}x。")
    draft = sim.add_doc(repo, "草稿", body="草稿 wipx。", status=0)
    source = yuque_source(incremental_overlap_minutes=0)
    full = []
    for run in range(4):
        if run % 2:  # drafts are edited (autosaved) between some runs, left alone between others
            sim.edit_doc(draft, body=f"草稿 wipx 第{run}版。")
        sim.settle()
        sim.reset_counters()
        summary = run_pipeline(source)
        assert summary.status == "success" and summary.counts["new"] == (3 if run == 0 else 0)
        assert summary.counts["source_stats"]["drafts_skipped"] in (0, 1)
        full.append(_full_listings(sim))
    assert full == [1, 0, 0, 0]  # the first run knows nothing yet; then incremental
    assert len(_stored(source)) == 3  # the draft is still not indexed


def test_docs_moved_between_repos_without_a_timestamp_are_never_dropped(sim, yuque_conn, tributary_home):
    # before: the doc that entered x was deleted in the run after the move (z's full listing
    # lacked it; x's incremental listing, its count unchanged, did not show it) and came back a
    # run later as a new document: deletions per run [1, 0], "movedinx" found [False, True]
    x = sim.add_repo("alice", "x", "甲")
    y = sim.add_repo("alice", "y", "乙")
    z = sim.add_repo("alice", "z", "丙")
    leaves_x = sim.add_doc(x, "离开甲", body="正文 leavesxx。")
    sim.add_doc(x, "留在甲", body="正文 staysxx。")
    sim.add_doc(y, "乙的", body="正文 ofyx。")
    enters_x = sim.add_doc(z, "进入甲", body="正文 movedinx。")
    sim.add_doc(z, "留在丙", body="正文 stayszx。")
    words = ["leavesxx", "staysxx", "ofyx", "movedinx", "stayszx"]
    source = yuque_source(incremental_overlap_minutes=0)
    sim.settle()
    assert run_pipeline(source).counts["new"] == 5
    # one doc leaves x, another enters it: x's items_count does not move, no timestamp does
    sim.move_doc_to_repo(leaves_x, y)
    sim.move_doc_to_repo(enters_x, x)
    for _ in range(2):
        summary = run_pipeline(source)
        assert summary.status == "success" and summary.counts["deleted"] == 0
        urls = _searchable(source, words)
        assert all(urls.values()), urls  # every live doc is searchable after every run
    keys = set(_stored(source))
    assert {f"{x.id}/{enters_x.id}", f"{y.id}/{leaves_x.id}"} <= keys and len(keys) == 5
    assert f"/{x.namespace}/" in (urls["movedinx"] or "") and f"/{y.namespace}/" in (urls["leavesxx"] or "")


@pytest.mark.parametrize("field", ["updated_at", "content_updated_at"])
def test_every_reading_of_changed_at_gte_sees_edits_and_deletes_only_on_full_listings(
    sim, yuque_conn, tributary_home, field
):
    # before: an edit moving only the timestamp the filter does not read was never picked up
    # (no run after the first listed in full), and a tombstoned doc was deleted in a run that
    # listed both repos incrementally (incremental_repos 2)
    every = 2
    sim.changed_at_field = field
    sim.sheet_autosave_moves = "content"  # the autosave moves content_updated_at alone
    kb = sim.add_repo("alice", "kb", "知识库")
    other = sim.add_repo("alice", "other", "其他")
    sheet = sim.add_doc(kb, "销售表", format="lakesheet", sheets=_sheet("初始 firstcellx"))
    note = sim.add_doc(kb, "笔记", body="正文 notex。")
    victim = sim.add_doc(kb, "将删除", body="正文 victimx。")
    for i in range(3):  # one deletion stays under the mass-delete guard's 20 %
        sim.add_doc(other, f"其他{i}", body=f"正文 other{i}x。")
    source = yuque_source(incremental_overlap_minutes=0, full_listing_every=every)
    sim.settle()
    assert run_pipeline(source).counts["new"] == 6

    # an edit the filter cannot see under this reading: autosave (content time only) when it
    # filters on updated_at, a slug rename (updated_at only) when it filters on content time
    if field == "updated_at":
        sim.autosave_sheet(sheet, _sheet("自动保存 autosavedx"))
    else:
        sim.edit_meta(note, slug="renamed-note")
    sim.settle()
    seen_after = None
    for attempt in range(1, every + 1):
        run_pipeline(source)
        urls = _searchable(source, ["autosavedx", "notex"])
        seen = urls["autosavedx"] is not None if field == "updated_at" else "renamed-note" in (urls["notex"] or "")
        if seen:
            seen_after = attempt
            break
    assert seen_after is not None and seen_after <= every

    sim.delete_doc(victim)  # an explicit tombstone
    for _ in range(2):
        sim.reset_counters()
        summary = run_pipeline(source)
        if summary.counts["deleted"]:
            # decided on full listings of every repo only
            assert summary.counts["source_stats"]["incremental_repos"] == 0
            assert _full_listings(sim, kb.namespace) >= 1 and _full_listings(sim, other.namespace) >= 1
            break
    assert summary.counts["deleted"] == 1 and _searchable(source, ["victimx"])["victimx"] is None


def test_full_listing_every_is_honoured_per_repo(sim, yuque_conn, tributary_home):
    # before: the option did not exist (refused as unknown); without it, full listings per
    # run were a: [1, 0, 0, 0, 0] (never again) and b: [1, 0, 1, 1, 1] (the draft, every run)
    a = sim.add_repo("alice", "a", "甲")
    b = sim.add_repo("alice", "b", "乙")
    sim.add_doc(a, "甲", body="正文 ax。")
    sim.add_doc(b, "乙", body="正文 bx。")
    source = yuque_source(incremental_overlap_minutes=0, full_listing_every=2)
    sim.settle()
    modes: dict[str, list[str]] = {a.namespace: [], b.namespace: []}
    for run in range(5):
        if run == 1:
            sim.add_doc(b, "新草稿", body="草稿。", status=0)  # items_count moves: b once in full
            sim.settle()
        sim.reset_counters()
        assert run_pipeline(source).status == "success"
        for ns, seen in modes.items():
            seen.append("full" if _full_listings(sim, ns) else "incremental")
    assert modes[a.namespace] == ["full", "incremental", "full", "incremental", "full"]
    assert modes[b.namespace] == ["full", "full", "incremental", "full", "incremental"]


def test_repo_cursor_is_read_from_the_latest_listing():
    # the versions a listing stamped last carry the repo's cursor; a doc whose fetch failed
    # keeps an older stamp and is not asked; unstamped or disagreeing stamps mean "list in full"
    older = fingerprint("2026-01-05T08:00:00.000Z", "alice/kb", "a", [], "2026-01-05T09:00:00.000Z", RepoCursor(5, 1))
    newer = with_listed_at(older, "2026-01-05T10:00:00.000Z", RepoCursor(6, 1))
    assert repo_cursor([older, newer, newer]) == RepoCursor(6, 1)
    assert repo_cursor([with_listed_at(older, "2026-01-05T10:00:00.000Z")]) is None  # no n=/e=
    assert repo_cursor([newer, with_listed_at(older, "2026-01-05T10:00:00.000Z", RepoCursor(0, 0))]) is None
    assert repo_cursor([]) is None
