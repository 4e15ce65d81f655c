"""Item keys and version evidence of Yuque docs.

Keys are ``<book_id>/<doc_id>``: both ids survive a repo rename (only the slug, and with it the
namespace, changes), so a rename is a no-op for the index. Keys of earlier releases were
``<namespace>/<doc_id>``; :func:`legacy_renames` maps them (and the key of a doc that moved to
another repo) to the current key by the doc id, which Yuque never reuses.

Version evidence:

- ``modified_time``: ``content_updated_at`` (``updated_at`` when absent), as before;
- ``revision``: ``u=<updated_at>;p=<hash of namespace/slug>;t=<hash of the TOC path>;l=<when
  a listing last vouched for this version>``. ``l`` only moves when the engine commits the
  report (a failed fetch keeps the old one), which is what lets an incremental listing start
  early enough to see that doc again (:mod:`.walk`); ``n=<incremental listings of the repo
  since its last full listing>;e=<items_count minus the docs that full listing showed>``: the
  repo's :class:`RepoCursor`, stamped by the same listing (read back by :func:`repo_cursor`).
  ``updated_at`` also moves on metadata-only edits (slug rename, sometimes a TOC move) and maybe
  on a sheet's autosave; the TOC path is compared on its own because a move need not touch the
  doc at all. ``t=-`` means the TOC was unreadable this run: that part is then not compared, and
  the known value is carried forward.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from include.contract import VersionEvidence

__all__ = [
    "UNKNOWN",
    "Comparison",
    "RepoCursor",
    "Verdict",
    "book_id_of",
    "compare",
    "doc_id_of",
    "fingerprint",
    "item_key",
    "legacy_renames",
    "repo_cursor",
    "revision_parts",
    "toc_part",
    "with_listed_at",
    "with_toc",
]

UNKNOWN = "-"


def item_key(book_id: int, doc_id: int) -> str:
    return f"{book_id}/{doc_id}"


def doc_id_of(key: str) -> int | None:
    """The doc id at the end of a current or legacy key (``12/34``, ``login/slug/34``)."""
    tail = key.rpartition("/")[2]
    return int(tail) if tail.isdigit() else None


def book_id_of(key: str) -> int | None:
    """The book id of a current key; None for a legacy ``login/slug/doc`` key."""
    head, _, tail = key.partition("/")
    return int(head) if head.isdigit() and tail.isdigit() else None


def legacy_renames(known: set[str] | frozenset[str], current: dict[int, str]) -> dict[str, str]:
    """old key -> current key, for known keys whose doc (by id) is listed under another key now.

    ``current`` maps listed doc ids to their current keys. A doc already known under its current
    key keeps it (a stale duplicate under an old key is then left to the deletion rules).
    """
    renames: dict[str, str] = {}
    for old in known:
        doc_id = doc_id_of(old)
        new = current.get(doc_id) if doc_id is not None else None
        if new is not None and new != old and new not in known:
            renames[old] = new
    return renames


def _short(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def toc_part(toc_path: list[str] | None) -> str:
    return UNKNOWN if toc_path is None else _short("\x1f".join(toc_path))


@dataclass(frozen=True, slots=True)
class RepoCursor:
    """Where a repo's listings stand, carried in the revisions of its docs (``n=``, ``e=``).

    ``since_full``: incremental listings of the repo since its last full listing (the walk lists
    it in full again once this reaches ``full_listing_every``). ``count_offset``: the repo's
    ``items_count`` minus the docs its last full listing showed us (the docs we index plus
    unreadable records); a draft counts in it exactly when ``items_count`` counts drafts, so an
    incremental listing compares counts the way the full listing found them.
    """

    since_full: int
    count_offset: int

    def advanced(self) -> RepoCursor:
        return RepoCursor(self.since_full + 1, self.count_offset)


def fingerprint(
    updated_at: str | None,
    namespace: str,
    slug: str | None,
    toc_path: list[str] | None,
    listed_at: str = "",
    cursor: RepoCursor | None = None,
) -> str:
    toc = toc_part(toc_path)
    place = _short(f"{namespace}/{slug or ''}")
    return _join({"u": updated_at or "", "p": place, "t": toc, "l": listed_at, **_cursor_parts(cursor)})


def _cursor_parts(cursor: RepoCursor | None) -> dict[str, str]:
    return {} if cursor is None else {"n": str(cursor.since_full), "e": str(cursor.count_offset)}


def _join(parts: dict[str, str]) -> str:
    order = ["u", "p", "t"] + [k for k in ("l", "n", "e") if parts.get(k)]
    return ";".join(f"{k}={parts[k]}" for k in order)


def revision_parts(revision: str | None) -> dict[str, str]:
    if not revision:
        return {}
    parts = dict(p.split("=", 1) for p in revision.split(";") if "=" in p)
    return parts if {"u", "p", "t"} <= parts.keys() else {}


def with_toc(revision: str, toc: str) -> str:
    parts = revision_parts(revision)
    parts["t"] = toc
    return _join(parts)


def with_listed_at(revision: str | None, listed_at: str, cursor: RepoCursor | None = None) -> str | None:
    """The revision, stamped with the listing that just vouched for it and the repo's cursor
    after that listing (see :mod:`.walk`)."""
    parts = revision_parts(revision)
    if not parts:
        return revision
    parts = {k: v for k, v in parts.items() if k not in ("n", "e")}
    parts.update(l=listed_at, **_cursor_parts(cursor))
    return _join(parts)


def repo_cursor(revisions: Iterable[str | None]) -> RepoCursor | None:
    """The cursor the latest listing of a repo stamped (on the versions with the newest ``l``;
    older ones are docs whose fetch failed since). None, so the repo is listed in full: no
    stamp yet (a version of an earlier release), an unreadable one, or two that disagree."""
    newest, cursors = "", set[RepoCursor | None]()
    for revision in revisions:
        parts = revision_parts(revision)
        listed = parts.get("l", "")
        if listed > newest:  # one fixed ISO-8601 form (``_iso``): strings order as times
            newest, cursors = listed, set()
        if listed and listed == newest:
            cursors.add(_cursor_of(parts))
    return next(iter(cursors)) if len(cursors) == 1 else None


def _cursor_of(parts: dict[str, str]) -> RepoCursor | None:
    try:
        since_full, offset = int(parts["n"]), int(parts["e"])
    except (KeyError, ValueError):
        return None
    return RepoCursor(since_full, offset) if since_full >= 0 else None


class Verdict(Enum):
    NEW = "new"
    UNCHANGED = "unchanged"
    CHANGED = "changed"
    MOVED = "moved"  # only the URL (slug / namespace) changed: the text may hash the same


@dataclass(frozen=True, slots=True)
class Comparison:
    verdict: Verdict
    evidence: VersionEvidence  # what to report (a ``t=-`` is replaced by the known path)
    reason: str


def compare(known: VersionEvidence | None, seen: VersionEvidence) -> Comparison:
    if known is None:
        return Comparison(Verdict.NEW, seen, "new")
    if known.modified_time != seen.modified_time:
        return Comparison(Verdict.CHANGED, seen, "content updated")
    old, new = revision_parts(known.revision), revision_parts(seen.revision)
    if not old or not new:
        # state of a release without the revision: the content time matched; the unchanged
        # report records this run's revision, so the next run compares all of it
        return Comparison(Verdict.UNCHANGED, seen, "not modified")
    if new["t"] == UNKNOWN and old["t"] != UNKNOWN:
        seen = VersionEvidence(modified_time=seen.modified_time, revision=with_toc(seen.revision or "", old["t"]))
        new["t"] = old["t"]
    if old["t"] != new["t"] and UNKNOWN not in (old["t"], new["t"]):
        return Comparison(Verdict.CHANGED, seen, "moved in the TOC")
    if old["p"] != new["p"]:
        return Comparison(Verdict.MOVED, seen, "URL changed (slug or repo renamed)")
    if old["u"] != new["u"]:
        return Comparison(Verdict.CHANGED, seen, "updated_at moved (metadata or autosave)")
    return Comparison(Verdict.UNCHANGED, seen, "not modified")
