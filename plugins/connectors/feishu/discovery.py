"""What a Feishu discovery walks, and how it decides that a known item is really gone.

Roots: ``folders`` may name ``root`` (the caller's own root folder, found with
``drive/explorer/v2/root_folder/meta``, so nobody has to copy a folder token), and
``wiki_spaces: all`` walks every space the caller can read (``GET /wiki/v2/spaces``).

Deletions: a walk can miss an item that still exists (a cursor that moved under it, a page the
server cut short), and the engine deletes what a complete walk does not list. So a known item
missing from a complete walk is re-checked first: the batch meta query tells *gone* (its
``failed_list``: 970005 deleted / 970003 unshared) from *still there*; an item still there is
looked for in a second walk, and only an item missing twice is left for the engine to delete
(it may have moved out of the configured folders).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from plugins.connectors.feishu.client import FeishuClient
from plugins.connectors.feishu.errors import FeishuError, FeishuParamError

__all__ = ["GONE_CODES", "MetaStatus", "meta_status", "resolve_folders", "resolve_spaces"]

log = logging.getLogger(__name__)

GONE_CODES = frozenset({970003, 970005})
# The stored type is not part of VersionEvidence: try the types in turn. Only values of the
# documented doc_type enum (drive-v1 meta batch_query: doc, sheet, bitable, mindnote, file,
# wiki, docx, folder, synced_block): ``slides`` is not one of them, and a value the API refuses
# must not cost the other types their answer.
_TYPES = ("docx", "doc", "sheet", "bitable", "file")


def resolve_folders(client: FeishuClient, folders: Iterable[str]) -> list[str]:
    """``root`` (case-insensitive) becomes the caller's root folder token."""
    out: list[str] = []
    for folder in folders:
        token = client.root_folder_token() if str(folder).lower() == "root" else str(folder)
        if token not in out:
            out.append(token)
    return out


def resolve_spaces(client: FeishuClient, spaces: Iterable[str] | str | None) -> list[str]:
    """``all`` (or a list containing it) becomes every readable space's id."""
    if spaces is None:
        return []
    wanted = [spaces] if isinstance(spaces, str) else [str(s) for s in spaces]
    if not any(s.lower() == "all" for s in wanted):
        return wanted
    found = [str(s["space_id"]) for s in client.list_wiki_spaces() if s.get("space_id")]
    return list(dict.fromkeys([*found, *(s for s in wanted if s.lower() != "all")]))


@dataclass(slots=True)
class MetaStatus:
    gone: dict[str, str] = field(default_factory=dict)  # key -> reason
    alive: set[str] = field(default_factory=set)
    unknown: set[str] = field(default_factory=set)  # the meta query failed: decide nothing
    refused_types: set[str] = field(default_factory=set)  # doc_type values the API refused


def meta_status(client: FeishuClient, keys: Iterable[str]) -> MetaStatus:
    """Ask the batch meta query about ``keys`` (200 per call, one call per candidate type).

    A type the API refuses as a parameter (400: a ``doc_type`` it does not take) is skipped and
    the others still decide; any other failure (server, network, budget) leaves the batch
    undecided: nothing is deleted on a guess."""
    out = MetaStatus()
    ordered = sorted(set(keys))
    for i in range(0, len(ordered), 200):
        batch = ordered[i : i + 200]
        try:
            codes = _query_types(client, batch, out)
        except FeishuError as exc:
            log.warning("meta re-check failed, deleting nothing from this batch: %s", exc)
            out.unknown.update(k for k in batch if k not in out.alive)
            continue
        for key, seen in codes.items():
            if seen and seen <= GONE_CODES:
                only_unshared = 970003 in seen and 970005 not in seen
                out.gone[key] = "no permission (970003)" if only_unshared else "deleted at source"
            else:
                out.unknown.add(key)
    return out


def _query_types(client: FeishuClient, batch: list[str], out: MetaStatus) -> dict[str, set[int]]:
    """The ``failed_list`` codes of every key of ``batch`` not found alive, type by type."""
    codes: dict[str, set[int]] = {k: set() for k in batch}
    for doc_type in _TYPES:
        try:
            metas, failed = client.batch_query_metas([(k, doc_type) for k in batch if k in codes])
        except FeishuParamError as exc:
            out.refused_types.add(doc_type)
            log.warning("meta query refused doc_type %s; the other types still decide: %s", doc_type, exc)
            continue
        for m in metas:
            if codes.pop(str(m.get("doc_token")), None) is not None:
                out.alive.add(m["doc_token"])
        for f in failed:
            if f.get("token") in codes:
                codes[f["token"]].add(int(f.get("code", 0)))
        if not codes:
            break
    return codes
