"""Parse and chunk a crawl's pages while the crawl still fetches (the in-process runner).

A web source's discovery downloads every page before the run is planned, and the plan (what is
new, changed, deleted) needs the complete listing, so batches are cut only once the crawl ends.
Parsing used to wait for all of it. Here every page the crawl stages is handed over at once
(``DiscoveryRequest.prepare``) to forked worker processes that do what the fetch, parse and
chunk steps will later do with it: ``connector.fetch(change)`` (the staged bytes: no request),
``parse_document`` and ``chunk_for_source``. What they produce is no result of the run: it waits
in memory (in a private temporary directory past a bound), and after the plan the steps run batch by batch as before,
each asking here first:

- the parse step takes a prepared document only when the document its fetched manifest records
  is, field for field and by the bytes' SHA-256, the one the worker parsed (:func:`fingerprint`);
  otherwise, or when the worker failed or has not started on it, it parses itself;
- the chunk step takes prepared chunks only for a document the parse step took from here, under
  the doc id it would chunk with; the worker chunked the document as the chunk stage reads it
  back from staging (:func:`~plugins.engine.packed.decode_parsed`). Both outputs arrive encoded
  as their stages encode them (:func:`~plugins.engine.packed.encode_value`): the steps copy the
  bytes into their parts, and the parse step's record of the document is the worker's.

The plan (deletions from a complete listing only), the batches, the manifests, the index writes
and the state commits are therefore those of a serial run, with the same chunk ids and lineage.
A crash during the crawl leaves at most that directory (made only past the bound), which no run reads; the workers
leave with their parent. The Airflow DAG never sets this up (its discover task plans, mapped
tasks parse): only :func:`plugins.engine.runner.run_pipeline` does.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import pickle
import shutil
import tempfile
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from include.contract import Change, ParseError, RawDocument, document_id
from include.failpoints import failpoint
from include.stores import StateStore
from plugins.connectors.base import Connector, get_connector_class, source_partitions
from plugins.engine.chunk_budget import chunk_for_source
from plugins.engine.context import RunContext, log
from plugins.engine.discover import open_connector
from plugins.engine.overlap import exit_with_parent
from plugins.engine.packed import UnstageableError, decode_parsed, encode_value
from plugins.engine.process import chunk_outcome, parse_outcome
from plugins.engine.records import ChunkOutcome, ItemRecord, ParseOutcome, RawRef
from plugins.parsers.registry import parse_document

__all__ = ["EarlyWork", "Prepared", "early_workers", "fingerprint", "start_early"]

MAX_WORKERS = 2
# results held in memory, in all (pickled); past it they wait in files (a crawl of many pages)
HELD_BYTES = 256 * 1024 * 1024
GROUP = 8  # pages per task

# What a forked worker inherits (set before the pool forks, never pickled), and its connector.
_inherited: tuple[RunContext, StateStore] | None = None
_connector: Connector | None = None


def early_workers() -> int:
    """Worker processes for parsing during the crawl: ``TRIBUTARY_PARSE_WORKERS`` (0: none),
    else one per core beyond the runner's own, at most :data:`MAX_WORKERS`; 0 without two cores or
    ``fork`` (a spawned worker would re-import everything and lose the parent's registries)."""
    cores = os.cpu_count() or 1
    if cores < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return 0
    wanted = os.environ.get("TRIBUTARY_PARSE_WORKERS")
    if wanted is not None and wanted.strip():
        return max(0, min(int(wanted), MAX_WORKERS))
    return min(MAX_WORKERS, cores - 1)


def fingerprint(item_key: str, sha256: str, size: int, fields: RawRef | RawDocument) -> str:
    """The bytes (by digest) and every field the parser sees of one fetched document: equal
    only for the same document, whether read from a RawDocument or a fetched manifest's record."""
    text = json.dumps(
        [item_key, sha256, size, fields.file_name, fields.media_type, fields.url, fields.title,
         fields.version.to_dict(), fields.metadata],
        sort_keys=True, default=repr, ensure_ascii=True,
    )  # fmt: skip
    return hashlib.sha256(text.encode()).hexdigest()


def _recorded(item: ItemRecord) -> str | None:
    """The fingerprint of the document ``item``'s fetched manifest records (None: not fetched)."""
    raw = item.raw
    return None if raw is None else fingerprint(item.item_key, raw.file.sha256, raw.file.size, raw)


@dataclass(slots=True)
class Prepared:
    """A worker's result for one page: what it parsed and the doc id it chunked under.
    ``payload`` is the pickle of (the document's ParseOutcome, its encoding for the parsed part,
    (ChunkOutcome, the chunks' encoding) or None when chunking failed); once the
    results held pass :data:`HELD_BYTES` it is in the file at ``spilled`` instead."""

    fingerprint: str
    doc_id: str
    payload: bytes | None
    spilled: str | None = None


Group = list["Prepared | None"]  # one task's results, in the order of its changes


@dataclass(slots=True)
class EarlyWork:
    """The pool and the prepared pages of one run; :meth:`submit` during discovery, then
    :meth:`parsed` and :meth:`chunks` from the parse and chunk steps."""

    pool: ProcessPoolExecutor
    workdir: Path | None = None  # made at the first spill (mode 0700): most runs never need it
    # item key -> its group's task and its place in it (a task per GROUP pages: fewer wake-ups
    # of the pool's thread and the crawl's)
    jobs: dict[str, tuple[Future[Group], int]] = field(default_factory=dict)
    pending: list[Change] = field(default_factory=list)
    taken: dict[str, tuple[str, Any]] = field(default_factory=dict)  # key -> (doc id, chunked or None)
    stats: dict[str, int] = field(default_factory=lambda: {"submitted": 0, "parsed": 0, "chunked": 0, "missed": 0})
    held: int = 0  # payload bytes in memory
    lock: threading.Lock = field(default_factory=threading.Lock)

    def submit(self, change: Change) -> None:
        """Start on a staged change (called by the connector as the crawl stages it)."""
        if change.staged_path is None or change.item_key in self.jobs:
            return
        self.pending.append(change)
        failpoint("early:submit")  # a crash test kills the run here: mid-crawl, workers busy
        if len(self.pending) >= GROUP:
            self.flush()

    def flush(self) -> None:
        """Hand the changes not yet handed over to the pool (the crawl's last ones)."""
        if not self.pending:
            return
        group, self.pending = self.pending, []
        job = self.pool.submit(_prepare_all, group)
        for place, change in enumerate(group):
            self.jobs[change.item_key] = (job, place)
        job.add_done_callback(self._hold)
        self.stats["submitted"] += len(group)

    def _hold(self, job: Future[Group]) -> None:
        """A group arrived (the pool's thread): kept in memory up to :data:`HELD_BYTES` in all,
        then in files. Under the lock, as :meth:`_payload` may be taking one meanwhile."""
        group = [] if job.cancelled() or job.exception() is not None else job.result()
        with self.lock:
            for prepared in group:
                if prepared is None or prepared.payload is None:
                    continue
                if self.held + len(prepared.payload) <= HELD_BYTES:
                    self.held += len(prepared.payload)
                    continue
                if self.workdir is None:
                    self.workdir = Path(tempfile.mkdtemp(prefix="tributary-early-"))
                path = self.workdir / f"{prepared.fingerprint}.pickle"
                path.write_bytes(prepared.payload)
                prepared.spilled, prepared.payload = str(path), None

    def parsed(self, item: ItemRecord) -> tuple[ParseOutcome, bytes] | None:
        """What a worker parsed from exactly what ``item`` records: the parse outcome of the
        document alone and its encoding for the parsed part; None: parse it here."""
        self.flush()
        job, place = self.jobs.pop(item.item_key, (None, 0))
        if job is None:
            return None
        if job.cancel():  # not started yet: parsing here is sooner than waiting for a worker
            self.stats["missed"] += 1
            return None
        prepared = _result(job, place)
        if prepared is None or prepared.fingerprint != _recorded(item):
            self.stats["missed"] += 1
            return None
        outcome, parsed, chunked = pickle.loads(self._payload(prepared))  # our own worker's (memory, 0700 directory)
        self.taken[item.item_key] = (prepared.doc_id, chunked)
        self.stats["parsed"] += 1
        return outcome, parsed

    def _payload(self, prepared: Prepared) -> bytes:
        with self.lock:
            payload, spilled, prepared.payload = prepared.payload, prepared.spilled, None
            if payload is not None:
                self.held -= len(payload)
                return payload
        assert spilled is not None
        path = Path(spilled)
        data = path.read_bytes()
        path.unlink(missing_ok=True)
        return data

    def chunks(self, item_key: str, doc_id: str) -> tuple[ChunkOutcome, bytes] | None:
        """The chunk outcome and encoded chunks of the document :meth:`parsed` gave for
        ``item_key``, if chunked under ``doc_id``."""
        doc_id_then, chunked = self.taken.pop(item_key, ("", None))
        if chunked is None or doc_id_then != doc_id:
            return None
        self.stats["chunked"] += 1
        return chunked  # type: ignore[no-any-return]

    def close(self) -> None:
        self.pending.clear()
        for job, _place in self.jobs.values():
            job.cancel()
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.jobs.clear()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        log.info("%s", "parsed during the crawl: " + ", ".join(f"{k} {v}" for k, v in self.stats.items()))


def _result(job: Future[Group], place: int) -> Prepared | None:
    try:
        return job.result()[place]
    except Exception as exc:  # a worker that died or failed: this page is parsed by its step
        log.debug("early parse failed: %s: %s", type(exc).__name__, exc)
        return None


def start_early(ctx: RunContext, store: StateStore) -> EarlyWork | None:
    """The run's pool, forked now, before discovery starts any thread; None when not wanted
    (a dry run cuts no batches; a resumed run has its plan and crawls nothing)."""
    global _inherited
    workers = early_workers()
    if not workers or ctx.params.dry_run or not _hands_pages_over(ctx) or ctx.staging.has("discover.json"):
        return None
    _inherited = (ctx, store)
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=_worker_start)
    try:
        pool.submit(os.getpid).result()  # with fork every worker starts at the first submit: now
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        _inherited = None  # the workers have their copy
    return EarlyWork(pool)


def _hands_pages_over(ctx: RunContext) -> bool:
    """Will discovery hand staged pages over? Only a connector that does (the web's), in one
    crawl: a partitioned source's crawls run in threads and are merged (nothing handed over)."""
    return get_connector_class(ctx.source.kind).prepares and not source_partitions(ctx.source)


def _worker_start() -> None:
    assert _inherited is not None
    _inherited[1].engine.dispose(close=False)  # the parent's pooled connections are the parent's
    exit_with_parent()


def _prepare_all(changes: list[Change]) -> Group:
    return [_prepare(change) for change in changes]


def _prepare(change: Change) -> Prepared | None:
    """In a worker: fetch (the staged bytes), parse and chunk one page, and encode both outputs
    as their stages would (the parent only copies the bytes into its parts)."""
    global _connector
    assert _inherited is not None, "an early-parse worker started without the runner's context"
    ctx = _inherited[0]
    source = ctx.source
    if _connector is None:
        _connector = open_connector(ctx)
    raw = _connector.fetch(change)
    try:
        doc = parse_document(raw, source.parser)
        parsed = encode_value(doc)
    except (ParseError, UnstageableError):
        return None  # the parse step meets the same error and records it
    outcome = parse_outcome(doc, doc.content_hash())
    doc_id = document_id(source.source_id, change.item_key)
    chunked: tuple[ChunkOutcome, bytes] | None
    try:
        chunks = chunk_for_source(decode_parsed(parsed), doc_id, source)  # the chunk stage's input
        chunked = (chunk_outcome(chunks, doc_id, source), encode_value(chunks))
    except Exception:  # the chunk step meets it again and records it as that item's failure
        chunked = None
    digest = fingerprint(raw.item_key, hashlib.sha256(raw.data).hexdigest(), len(raw.data), raw)
    payload: tuple[Any, ...] = (outcome, parsed, chunked)
    return Prepared(digest, doc_id, pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))
