"""Part (b) of ``python -m benchmarks acl``: a permission-only change on 1,000 documents.

A files source of 1,000 Markdown notes (``--quick``: 200) declares its readers in an ``acl``
block; it is synced once through :func:`plugins.engine.run_pipeline` (chunks embedded by a
deterministic hash embedder that counts every text it is sent), then the block changes for
every document (alice out, bob in) and three ways of bringing the index up to date are measured,
each from the same starting copy of the home directory:

- ``sync_permissions`` (ours): reads the permissions, writes the changed entries;
- a full re-sync (the peer path, what the system did before issue 35: permissions only travelled
  with content, so a change meant re-reading, re-parsing and re-chunking every document; the
  vector cache spares the model);
- delete-and-re-embed (Onyx's open edition and most ingestion pipelines without permission sync:
  drop the documents and index them again): a fresh sync of the same 1,000 documents.

Rows written are counted by comparing every table of the state database and the index file
before and after (a row counts when it is new or changed; a removed one in "rows removed"), so
nothing the code under test reports is trusted. The hash embedder makes the peers' seconds a floor:
a real model adds its time for every chunk embedded.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from include.config import AclConfig, ChunkerConfig, EmbeddingConfig, SourceConfig
from include.index import open_index
from include.stores import open_state_store
from include.stores.access import AccessStore
from plugins.connectors.files.connector import FilesConnector
from plugins.embedders.base import EmbeddedTexts, Embedder
from plugins.engine import run_pipeline
from plugins.engine.permissions import sync_permissions

DIMS = 64
_TOPICS = ["reservoir", "sluice", "weir", "towpath", "canal", "lock", "gate", "ladder", "culvert", "spillway", "basin"]


class CountingHashEmbedder(Embedder):
    """Unit vectors from each text's SHA-256, counting every text it is asked to embed."""

    def __init__(self, tally: list[int]) -> None:
        self.model_id, self.dimensions, self.batch_size, self.tally = "bench/hash-64", DIMS, 64, tally

    @staticmethod
    def vector(text: str) -> npt.NDArray[np.float32]:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
        return (v / np.linalg.norm(v)).astype(np.float32)

    def embed_documents(self, texts: Sequence[str]) -> EmbeddedTexts:
        self.tally.append(len(texts))
        return EmbeddedTexts(np.stack([self.vector(t) for t in texts]), [])

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        return self.vector(text)


def _notes(root: Path, n: int) -> None:
    root.mkdir(parents=True)
    for i in range(n):
        paras = [
            f"Paragraph {j} of note {i}: the {_TOPICS[(i + j) % len(_TOPICS)]} inspection found item{i}x{j}."
            for j in range(6)
        ]
        (root / f"note{i:04d}.md").write_text(f"# Note {i}\n\n" + "\n\n".join(paras) + "\n", encoding="utf-8")


def _source(root: Path, reader: str) -> SourceConfig:
    return SourceConfig(
        kind="files", name="aclbench", options={"root": str(root)}, batch_size=100,
        chunker=ChunkerConfig(name="token", options={"chunk_token_num": 48}),
        embedding=EmbeddingConfig(provider="local"),
        acl=AclConfig(users=[reader], groups=["engineering"]),
    )  # fmt: skip


def _snapshot(home: Path) -> dict[str, Counter[tuple[Any, ...]]]:
    """Every row of every table of the home's SQLite files, by ``file:table``."""
    rows: dict[str, Counter[tuple[Any, ...]]] = {}
    for db in sorted(home.glob("*.db")):
        con = sqlite3.connect(db)
        try:
            names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            for name in names:
                try:
                    rows[f"{db.name}:{name}"] = Counter(con.execute(f'SELECT * FROM "{name}"'))
                except sqlite3.Error:
                    continue  # a vec0 table needs its extension: its shadow tables (plain ones) are read instead
        finally:
            con.close()
    return rows


def _diff(before: dict[str, Counter[tuple[Any, ...]]], after: dict[str, Counter[tuple[Any, ...]]]) -> dict[str, Any]:
    written: dict[str, int] = {}
    removed = 0
    for table in sorted(set(before) | set(after)):
        old, new = before.get(table, Counter()), after.get(table, Counter())
        added, gone = sum((new - old).values()), sum((old - new).values())
        removed += gone
        if added:
            written[table.split(":", 1)[1]] = added
    return {"written": written, "removed": removed}


def _measured(home: Path, step: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    before = _snapshot(home)
    start = time.perf_counter()
    out = step()
    seconds = time.perf_counter() - start
    rows = _diff(before, _snapshot(home))
    by_table = ", ".join(f"{t} {n}" for t, n in rows["written"].items()) or "none"
    return {
        **out,
        "rows written": sum(rows["written"].values()),
        "rows removed": rows["removed"],
        "tables written": by_table,
        "seconds": round(seconds, 2),
    }


def _permission_sync(source: SourceConfig) -> dict[str, Any]:
    state = open_state_store()
    index = open_index(source.index)
    try:
        result = sync_permissions(source, store=AccessStore(state), index=index, connector=FilesConnector(source))
    finally:
        index.close()
        state.close()
    return {"docs changed": result.changed, "chunks embedded": 0, "reads": result.requests}


def _pipeline(source: SourceConfig, params: dict[str, Any]) -> dict[str, Any]:
    tally: list[int] = []
    summary = run_pipeline(source, params, embedder_factory=lambda: CountingHashEmbedder(tally))
    assert summary.status == "success", summary.error
    return {"docs changed": summary.counts["acl_changed"], "chunks embedded": sum(tally), "reads": "every doc"}


def _copy_home(first: Path, dest: Path) -> Path:
    shutil.copytree(first, dest)
    os.environ["TRIBUTARY_HOME"] = str(dest)
    return dest


def run_permsync(workdir: Path, quick: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    n = 200 if quick else 1_000
    root = workdir / "notes"
    _notes(root, n)
    saved = os.environ.get("TRIBUTARY_HOME")
    try:
        first = workdir / "home-first"
        os.environ["TRIBUTARY_HOME"] = str(first)
        tally: list[int] = []
        start = time.perf_counter()
        summary = run_pipeline(
            _source(root, "alice@example.com"), {}, embedder_factory=lambda: CountingHashEmbedder(tally)
        )
        first_s = time.perf_counter() - start
        assert summary.status == "success", summary.error
        changed = _source(root, "bob@example.com")  # every document: alice out, bob in
        cases: list[tuple[str, Callable[[], dict[str, Any]], Path]] = [
            ("sync_permissions (ours)", lambda: _permission_sync(changed), _copy_home(first, workdir / "h1")),
            ("full re-sync (peer: re-read content)", lambda: _pipeline(changed, {"full_resync": True}),
             _copy_home(first, workdir / "h2")),
        ]  # fmt: skip
        rows = []
        for label, step, home in cases:
            os.environ["TRIBUTARY_HOME"] = str(home)
            rows.append({"part": f"b. ACL of {n} docs changed", "case": label, **_measured(home, step)})
        fresh = workdir / "h3"
        shutil.copytree(first, fresh, ignore=shutil.ignore_patterns("*.db", "*.db-*"))
        os.environ["TRIBUTARY_HOME"] = str(fresh)
        rows.append(
            {"part": f"b. ACL of {n} docs changed", "case": "delete-and-re-embed (peer)",
             **_measured(fresh, lambda: _pipeline(changed, {}))}
        )  # fmt: skip
    finally:
        if saved is None:
            os.environ.pop("TRIBUTARY_HOME", None)
        else:
            os.environ["TRIBUTARY_HOME"] = saved
    facts = {"docs": n, "chunks": sum(tally), "first_sync_s": round(first_s, 1)}
    return rows, facts
