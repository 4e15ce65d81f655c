"""Reading the manifests of schema version 1: the untyped dicts staged before records existed.

A run planned by that engine and resumed by this one (a deploy between two of its tasks) keeps
its staging area, so its ``discover.json`` and batch manifests are upgraded on read into the
layout of :mod:`plugins.engine.records` (which then validates them). Version 1 kept every stage's
outcome as flat keys of one entry (``raw_path``/``raw_digest``/``raw``, ``content_hash`` ...
``parsed_path``, ``chunks_path`` ... ``chunk_ids``, ``written`` ... ``chunks_removed``); here
each group becomes its stage's outcome record.

Plain dicts in and out: this module knows the old layout only, so the records module can use it
without an import cycle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

__all__ = ["upgrade_v1"]


def upgrade_v1(kind: Literal["plan", "batch"], data: dict[str, Any], path: str) -> dict[str, Any]:
    """A version 1 plan or batch manifest (read from ``path``) in the current layout."""
    if kind == "plan":
        return {**data, "unchanged": [_item(e) for e in data.get("unchanged") or []]}
    return {
        "run_id": data.get("run_id"),
        "source": data.get("source"),
        "batch": data.get("batch"),
        # version 1 named the stage only in the file name (``parsed-0003.json``)
        "stage": Path(path).stem.rsplit("-", 1)[0],
        "items": [_item(e) for e in data.get("items") or []],
        "unchanged": [_item(e) for e in data.get("unchanged") or []],
        "failures": list(data.get("failures") or []),
    }


def _ref(path: Any, digest: Any) -> dict[str, Any] | None:
    if not path or not isinstance(digest, dict):
        return None
    return {"path": path, "size": digest.get("size"), "sha256": digest.get("sha256")}


def _item(entry: dict[str, Any]) -> dict[str, Any]:
    change = entry.get("change") or {}
    item: dict[str, Any] = {
        "change": change,
        "prior": entry.get("prior"),
        "forced": bool(entry.get("forced")),
        "staged": _ref(change.get("staged_path"), entry.get("staged")),
        "stage_ms": dict(entry.get("stage_ms") or {}),
        "unchanged_reason": entry.get("reason"),
    }
    if (raw := entry.get("raw")) is not None:
        file = _ref(entry.get("raw_path"), entry.get("raw_digest"))
        item.update(raw={**raw, "file": file, "byte_size": entry.get("byte_size", 0)})
    if "content_hash" in entry:
        item["parsed"] = {
            **{k: entry.get(k) for k in ("content_hash", "parser", "parser_version", "blocks", "chars", "title")},
            "warnings": dict(entry.get("warnings") or {}),
            "file": _ref(entry.get("parsed_path"), entry.get("parsed_digest")),
        }
    if "chunks_path" in entry:
        item["chunked"] = {
            **{k: entry.get(k) for k in ("doc_id", "chunk_ids", "chunker", "chunker_options_hash")},
            "file": _ref(entry.get("chunks_path"), entry.get("chunks_digest")),
        }
    if "written" in entry:
        keys = ("written", "unchanged_chunks", "deleted_chunks", "chunks_added", "chunks_kept", "chunks_removed")
        item["upserted"] = {k: entry.get(k) for k in keys}
    return item
