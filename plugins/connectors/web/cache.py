"""The crawler's own memory of pages: outlinks and validators per fetched URL.

A 304 answer has no body, yet the crawl must go on through that page's links, or a no-change
recrawl would stop at the seed. So every page's outlinks are kept here (SQLite, one file per
source under ``$TRIBUTARY_HOME/web-cache/``) together with the validators of the version they
were read from. On 304 the links are used only if the stored validators are the ones we sent;
otherwise (cache lost or out of step) the page is fetched again unconditionally.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CachedPage", "LinkCache"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pages (
    url TEXT PRIMARY KEY,
    item_key TEXT NOT NULL,
    etag TEXT,
    last_modified TEXT,
    content_type TEXT,
    links TEXT NOT NULL,
    noindex INTEGER NOT NULL DEFAULT 0,
    updated REAL NOT NULL
);
-- render: auto: directories where a page needed the browser (render/step.py), so later crawls
-- render their pages directly instead of fetching a shell and testing it first
CREATE TABLE IF NOT EXISTS render_prefixes (
    prefix TEXT PRIMARY KEY,
    updated REAL NOT NULL
)
"""


@dataclass(slots=True)
class CachedPage:
    url: str
    item_key: str
    etag: str | None
    last_modified: str | None
    content_type: str | None
    links: list[str] = field(default_factory=list)
    noindex: bool = False

    def matches(self, etag: str | None, last_modified: str | None) -> bool:
        """Were these links read from the version identified by these validators?"""
        if etag is None and last_modified is None:
            return False
        return (etag is None or etag == self.etag) and (last_modified is None or last_modified == self.last_modified)


_OPENING = threading.Lock()
_SETUP_TRIES = 50  # 0.1 s apart: how long a peer's set-up of the same file is waited for


def _connect(path: Path) -> sqlite3.Connection:
    """The cache file opened in WAL mode with its table. Partitions of one source crawl in
    parallel (threads here, tasks on one machine) and open one file together; switching the
    journal mode does not wait on SQLite's busy handler, so set-up is serialised in this process
    and retried while another process holds the file."""
    db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=60)
    for attempt in range(_SETUP_TRIES):
        try:
            with _OPENING:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.executescript(_SCHEMA)
            return db
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == _SETUP_TRIES - 1:
                db.close()
                raise
            time.sleep(0.1)
    raise AssertionError("unreachable")


class LinkCache:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = _connect(path)
        self._pending: list[tuple[Any, ...]] = []

    def get(self, url: str) -> CachedPage | None:
        with self._lock:
            row = self._db.execute(
                "SELECT url, item_key, etag, last_modified, content_type, links, noindex FROM pages WHERE url = ?",
                (url,),
            ).fetchone()
        if row is None:
            return None
        return CachedPage(row[0], row[1], row[2], row[3], row[4], json.loads(row[5]), bool(row[6]))

    def put(self, page: CachedPage) -> None:
        # Buffered: written in one transaction by flush(), so a large crawl does not pay one
        # fsync per page.
        with self._lock:
            self._pending.append(
                (
                    page.url,
                    page.item_key,
                    page.etag,
                    page.last_modified,
                    page.content_type,
                    json.dumps(page.links),
                    int(page.noindex),
                    time.time(),
                )
            )
            if len(self._pending) >= 500:
                self._flush_locked()

    def render_prefixes(self) -> set[str]:
        with self._lock:
            return {row[0] for row in self._db.execute("SELECT prefix FROM render_prefixes")}

    def remember_render_prefixes(self, prefixes: set[str]) -> None:
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "INSERT OR REPLACE INTO render_prefixes VALUES (?, ?)", ((p, now) for p in sorted(prefixes))
            )
            self._db.execute("COMMIT")

    def forget(self, url: str) -> None:
        with self._lock:
            self._flush_locked()
            self._db.execute("DELETE FROM pages WHERE url = ?", (url,))

    def retain(self, urls: set[str], owned: Callable[[str], bool] | None = None) -> int:
        """Drop pages not in ``urls`` (after a complete crawl: they left the site's link graph).
        With ``owned`` (a partition's crawl), only pages it owns are candidates: the other
        partitions' rows stay. Returns how many were dropped."""
        with self._lock:
            self._flush_locked()
            if owned is not None:
                rows = [r[0] for r in self._db.execute("SELECT url FROM pages")]
                gone = [(u,) for u in rows if u not in urls and owned(u)]
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany("DELETE FROM pages WHERE url = ?", gone)
                self._db.execute("COMMIT")
                return len(gone)
            self._db.execute("CREATE TEMP TABLE IF NOT EXISTS keep (url TEXT PRIMARY KEY)")
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM keep")
            self._db.executemany("INSERT OR IGNORE INTO keep VALUES (?)", ((u,) for u in urls))
            dropped = self._db.execute("DELETE FROM pages WHERE url NOT IN (SELECT url FROM keep)").rowcount
            self._db.execute("COMMIT")
            return dropped

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._pending:
            return
        # IMMEDIATE: partitions crawled in parallel write one file; take the write lock up front
        # so a busy peer is waited for (busy timeout), never a deadlocked upgrade
        self._db.execute("BEGIN IMMEDIATE")
        self._db.executemany("INSERT OR REPLACE INTO pages VALUES (?, ?, ?, ?, ?, ?, ?, ?)", self._pending)
        self._db.execute("COMMIT")
        self._pending.clear()

    def close(self) -> None:
        self.flush()
        with self._lock:
            self._db.close()
