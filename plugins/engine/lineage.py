"""Lineage queries over the run log, the item state and the index, as JSON-able dicts.

One function per question the people running Tributary ask; the CLI (``plugins.engine.cli``) and the
audit page in the Airflow UI (``plugins.tributary_airflow.ui``) both call these, so the two never disagree.

- :func:`list_runs`: recent runs, optionally of one source, with counts.
- :func:`run_report`: one run, its counts, a tally of item actions and the items (filterable).
- :func:`item_history`: an item's stored state and every run that touched it.
- :func:`chunk_lineage`: a chunk id to the run that wrote it, the source version it came from
  and the stages (parser, chunker, embedding model and whether its vector was computed or
  reused, timings) it went through.
- :func:`diff_runs`: what differs between two runs, item by item.
- :func:`parser_warnings`: what a parser said it could not do (``needs_ocr`` ...), as the
  ``warnings`` field of an item's lineage row.

Every value returned is plain JSON (datetimes as ISO strings), so callers can ``json.dumps`` it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from include.config import IndexConfig, load_sources_report
from include.index import open_index
from include.settings import get_settings
from include.stores import StateStore
from plugins.connectors.base import validate_source_options
from plugins.engine.access import who_can_see

__all__ = [
    "ACTIONS",
    "chunk_lineage",
    "diff_runs",
    "item_history",
    "jsonable",
    "list_runs",
    "parser_warnings",
    "run_report",
    "warnings_text",
]

ACTIONS = ("new", "changed", "unchanged", "deleted", "failed", "skipped")

# ParsedDocument.metadata keys that say the text in the index is not the whole document, or not
# read from the document's own text: pages that are only images (needs OCR, or OCR'd: its text is
# a recognition, ``ocr_used``), content cut at a size cap, parts left out (hidden sheets,
# unreadable lines, embedded files that failed), a file pdfium refused and a second reader read.
# By convention a parser may also report ``truncated*`` / ``*_skipped`` / ``skipped_*`` keys or a
# ``warnings`` list; those are carried too.
_WARNING_KEYS = (
    "needs_ocr",
    "ocr_pages",
    "ocr_used",
    "ocr_unavailable",
    "truncated",
    "invalid_lines",
    "hidden_sheets_skipped",
    "embedded_failed",
    "pdfium_refused",
    "rendered",  # a web page's text is what headless Chromium rendered ("chromium 812 ms")
    "warnings",
)
_MAX_WARNING_CHARS = 2000  # a lineage row stays small whatever a parser put in its metadata


def _is_warning_key(key: str) -> bool:
    return key in _WARNING_KEYS or key.startswith(("truncated", "skipped_")) or key.endswith("_skipped")


def parser_warnings(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The warnings in a parser's metadata, ``{}`` when it had none (falsy values are no warning)."""
    found: dict[str, Any] = {}
    for key, value in (metadata or {}).items():
        if not isinstance(key, str) or not _is_warning_key(key) or value in (None, False, 0, "", [], {}):
            continue
        value = jsonable(value)
        text = json.dumps(value, ensure_ascii=False, default=str)
        found[key] = value if len(text) <= _MAX_WARNING_CHARS else text[:_MAX_WARNING_CHARS] + "…"
    return found


def warnings_text(warnings: Mapping[str, Any] | None) -> str:
    """``needs_ocr, ocr_pages=[1, 3]``: one line for the CLI and the audit pages."""
    return ", ".join(k if v is True else f"{k}={v}" for k, v in (warnings or {}).items())


def jsonable(value: Any) -> Any:
    """Datetimes to ISO strings, dataclasses / version objects to dicts, recursively."""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v) for v in value]
    if hasattr(value, "to_dict"):
        return jsonable(value.to_dict())
    if hasattr(value, "__dataclass_fields__"):
        return {k: jsonable(getattr(value, k)) for k in value.__dataclass_fields__}
    return value


def _run_row(run: Mapping[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = jsonable(dict(run))
    row["counts"] = row.get("counts") or {}
    row["params"] = row.get("params") or {}
    row["trigger"] = row["params"].get("trigger")  # what started it: {"type": "events", ...} or None
    started, ended = run.get("started_at"), run.get("ended_at")
    row["duration_s"] = round((ended - started).total_seconds(), 3) if started and ended else None
    return row


def list_runs(store: StateStore, source: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """Most recent first. ``limit`` must be positive: SQL engines read a negative LIMIT as none."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    return [_run_row(r) for r in store.runs(source, limit=limit)]


_EMBEDDING_LISTS = ("chunks_embedded", "chunks_vector_reused", "chunks_truncated")


def _item_row(item: Mapping[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = jsonable(dict(item))
    for key in ("chunks_added", "chunks_kept", "chunks_removed", *_EMBEDDING_LISTS):
        row[key] = row.get(key) or []
    row["stage_ms"] = row.get("stage_ms") or {}
    row["warnings"] = row.get("warnings") or {}
    return row


def run_report(
    store: StateStore, run_id: str, action: str | None = None, source: str | None = None
) -> dict[str, Any] | None:
    """A run with its counts, how many items took each action, and its items (optionally one action).

    Airflow run ids repeat across DAGs; ``source`` picks one (default: the most recent run).
    """
    run = store.get_run(run_id, source)
    if run is None:
        return None
    all_items = store.run_items(run_id, source=run["source"])
    tally = Counter(i["action"] for i in all_items)
    warned = Counter(k for i in all_items for k in (i.get("warnings") or {}))
    items = [i for i in all_items if action is None or i["action"] == action]
    return {
        "run": _run_row(run),
        "index": {"backend": run.get("index_backend"), "name": run.get("index_name")},
        "actions": {a: tally.get(a, 0) for a in ACTIONS},
        # how many items carry each parser warning (e.g. {"needs_ocr": 3})
        "warnings": dict(sorted(warned.items())),
        "filter": action,
        "items": [_item_row(i) for i in items],
    }


def item_history(store: StateStore, source: str, item_key: str) -> dict[str, Any] | None:
    """The item's current state (None once deleted) and its lineage rows, oldest run first."""
    state = store.get_item(source, item_key)
    history = store.item_history(source, item_key)
    if state is None and not history:
        return None
    runs = {h["run_id"]: store.get_run(h["run_id"], source) for h in history}
    rows = []
    for h in history:
        row = _item_row(h)
        run = runs.get(h["run_id"]) or {}
        row["run_status"] = run.get("status")
        row["run_type"] = run.get("run_type")
        row["dag_id"] = run.get("dag_id")
        row["run_started_at"] = jsonable(run.get("started_at"))
        rows.append(row)
    return {
        "source": source,
        "item_key": item_key,
        "state": jsonable(state) if state else None,
        "access": who_can_see(store, source, item_key),
        "history": rows,
    }


def _index_configs(source: str | None) -> list[IndexConfig]:
    """The index a source writes to, or every distinct configured index (default first)."""
    valid = load_sources_report(get_settings().sources_file, validate_source_options)[
        0
    ]  # another source's typo must not fail this
    configs = [s.index for s in valid if source in (None, s.source_id, s.name)]
    if source is None:
        configs.insert(0, IndexConfig())
    seen, unique = set(), []
    for c in configs:
        key = (c.backend, c.name, repr(sorted(c.options.items())))
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return unique


def _find_chunk(chunk_id: str, configs: Iterable[IndexConfig]) -> tuple[dict[str, Any], IndexConfig] | None:
    for config in configs:
        index = open_index(config)
        try:
            chunk = index.get_chunk(chunk_id)
        finally:
            index.close()
        if chunk is not None:
            return chunk, config
    return None


def chunk_lineage(store: StateStore, chunk_id: str, source: str | None = None) -> dict[str, Any] | None:
    """Trace a chunk (e.g. a search hit) to the run that wrote it and the source version it is from."""
    found = _find_chunk(chunk_id, _index_configs(source))
    if found is None:
        return None
    chunk, config = found
    run_id = chunk.get("run_id")
    run = store.get_run(run_id, chunk["source"]) if run_id else None
    written = None
    if run_id:
        items = store.run_items(run_id, source=chunk["source"])
        written = next((i for i in items if i["item_key"] == chunk["item_key"]), None)
    state = store.get_item(chunk["source"], chunk["item_key"])
    lineage = _item_row(written) if written else None
    return {
        "chunk_id": chunk_id,
        "source": chunk["source"],
        "item_key": chunk["item_key"],
        "doc_id": chunk.get("doc_id"),
        "index": {"backend": config.backend, "name": config.name},
        "run": _run_row(run) if run else {"run_id": run_id},
        # the index keeps the strongest evidence as "kind:value"; the run log keeps all of it
        "doc_version": chunk.get("doc_version"),
        "source_version": lineage["version_after"] if lineage else None,
        "doc_content_hash": chunk.get("doc_content_hash"),
        # still the indexed version? (False when the item changed since and this chunk survived as kept)
        "current": bool(state and state.content_hash == chunk.get("doc_content_hash")),
        "stages": (
            {
                "parser": lineage["parser"],
                "parser_version": lineage["parser_version"],
                "parser_engine": lineage.get("parser_engine"),
                "blocks": lineage["blocks"],
                "chars": lineage["chars"],
                "chunker": lineage["chunker"],
                "chunker_options_hash": lineage["chunker_options_hash"],
                "stage_ms": lineage["stage_ms"],
                "byte_size": lineage["byte_size"],
                "warnings": lineage["warnings"],
                "embedding": _chunk_embedding(lineage, chunk_id),
            }
            if lineage
            else None
        ),
        "lineage": lineage,
        "chunk": jsonable({k: v for k, v in chunk.items() if k not in ("text",)}) | {"text": chunk.get("text")},
    }


def _chunk_embedding(lineage: Mapping[str, Any], chunk_id: str) -> dict[str, Any] | None:
    """The model that embedded the chunk and whether its vector was computed by the run that
    wrote it or reused from the index (None: the item was not embedded)."""
    model = lineage.get("embedding_model")
    if not model:
        return None
    computed, reused = lineage.get("chunks_embedded") or [], lineage.get("chunks_vector_reused") or []
    vector = "computed" if chunk_id in computed else "reused" if chunk_id in reused else None
    cut = next((t for t in lineage.get("chunks_truncated") or [] if t.get("chunk_id") == chunk_id), None)
    return {"model": model, "vector": vector, "truncated": cut}


def _version_key(version: Mapping[str, Any] | None) -> Any:
    return tuple(sorted((version or {}).items()))


def diff_runs(store: StateStore, run_a: str, run_b: str, source: str | None = None) -> dict[str, Any] | None:
    """Item-by-item difference between two runs (usually of one source, older first).

    ``changed`` lists items present in both runs whose action, resulting version or content
    hash differ; ``only_in_a`` / ``only_in_b`` items one run touched and the other did not.
    """
    a, b = store.get_run(run_a, source), store.get_run(run_b, source)
    if a is None or b is None:
        return None
    items_a = {i["item_key"]: i for i in store.run_items(run_a, source=a["source"])}
    items_b = {i["item_key"]: i for i in store.run_items(run_b, source=b["source"])}
    changed = []
    for key in sorted(items_a.keys() & items_b.keys()):
        ia, ib = items_a[key], items_b[key]
        fields = [
            f
            for f, same in (
                ("action", ia["action"] == ib["action"]),
                ("version", _version_key(ia["version_after"]) == _version_key(ib["version_after"])),
                ("content_hash", ia["content_hash"] == ib["content_hash"]),
            )
            if not same
        ]
        if fields:
            changed.append(
                {
                    "item_key": key,
                    "differs": fields,
                    "a": {"action": ia["action"], "version": jsonable(ia["version_after"]), "hash": ia["content_hash"]},
                    "b": {"action": ib["action"], "version": jsonable(ib["version_after"]), "hash": ib["content_hash"]},
                }
            )

    def _brief(items: dict[str, Any], keys: Iterable[str]) -> list[dict[str, Any]]:
        return [{"item_key": k, "action": items[k]["action"], "reason": items[k]["reason"]} for k in sorted(keys)]

    counts_a, counts_b = a.get("counts") or {}, b.get("counts") or {}
    numeric = {
        k
        for k in counts_a.keys() | counts_b.keys()
        if isinstance(counts_a.get(k, 0), int | float) and isinstance(counts_b.get(k, 0), int | float)
    }
    return {
        "a": _run_row(a),
        "b": _run_row(b),
        "same_source": a["source"] == b["source"],
        "counts_delta": {
            k: counts_b.get(k, 0) - counts_a.get(k, 0)
            for k in sorted(numeric)
            if not isinstance(counts_a.get(k, 0), bool) and counts_b.get(k, 0) != counts_a.get(k, 0)
        },
        "only_in_a": _brief(items_a, items_a.keys() - items_b.keys()),
        "only_in_b": _brief(items_b, items_b.keys() - items_a.keys()),
        "changed": changed,
    }
