"""Discovery of named items without walking the drive: a run limited to ``only_keys`` (the
items change events name) asks the batch meta query about those tokens only.

A named token the meta query answers is read from its meta (title, ``latest_modify_time``, URL,
owner): the run compares and re-fetches it as a walk would. One in the ``failed_list`` with the
codes the walk's re-check also trusts (970005 deleted, 970003 no longer shared with the app) is
an explicit deletion, unless the source syncs ``slides`` (which have no meta type: a slides
token fails every type as a deleted one does). Anything else (a token never indexed: it must be found in the configured
folders first; an undecided answer: a server error, a refused type, ``slides``; a source with
wiki spaces, whose items are keyed and linked through their nodes) makes the connector walk as
it always did, so a named run is never less careful than a full one.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from include.contract import Change, ChangeKind
from plugins.connectors.base import DiscoveryRequest
from plugins.connectors.feishu.client import FeishuClient
from plugins.connectors.feishu.discovery import GONE_CODES
from plugins.connectors.feishu.errors import FeishuError
from plugins.connectors.feishu.listing import DriveItem, Walk

__all__ = ["Named", "named_items", "named_walk"]

log = logging.getLogger(__name__)

# the documented doc_type values of the meta query, most common first (as discovery's re-check)
_TYPES = ("docx", "doc", "sheet", "bitable", "file")


@dataclass(slots=True)
class Named:
    items: dict[str, DriveItem] = field(default_factory=dict)
    gone: dict[str, str] = field(default_factory=dict)  # key -> reason
    undecided: set[str] = field(default_factory=set)
    requests: int = 0


def named_items(client: FeishuClient, keys: Iterable[str], wanted: Collection[str]) -> Named:
    """What the meta query says of each of ``keys`` (up to 200 a call, one call per type tried)."""
    out = Named()
    pending = list(dict.fromkeys(keys))
    codes: dict[str, set[int]] = {k: set() for k in pending}
    for doc_type in _TYPES:
        if not pending:
            break
        if doc_type not in wanted:
            continue
        for start in range(0, len(pending), 200):
            batch = pending[start : start + 200]
            out.requests += 1
            try:
                metas, failed = client.batch_query_metas([(k, doc_type) for k in batch])
            except FeishuError as exc:
                log.info("meta query for named items (%s) failed: %s", doc_type, exc)
                out.undecided.update(batch)
                continue
            for m in metas:
                token = str(m.get("doc_token"))
                if token in codes:
                    out.items[token] = _item(m, doc_type)
            for f in failed:
                if f.get("token") in codes:
                    codes[str(f["token"])].add(int(f.get("code", 0)))
        pending = [k for k in pending if k not in out.items and k not in out.undecided]
    # slides have no meta doc_type: a slides token fails every type asked, as a deleted one does,
    # so where slides are synced only a walk can tell them apart
    trust_gone = "slides" not in wanted
    for key in pending:
        seen = codes[key]
        if trust_gone and seen and seen <= GONE_CODES:
            out.gone[key] = "no permission (970003)" if 970005 not in seen else "deleted at source"
        else:
            out.undecided.add(key)
    return out


def _item(meta: dict[str, object], doc_type: str) -> DriveItem:
    owner = meta.get("owner_id")
    return DriveItem(
        token=str(meta.get("doc_token")),
        type=str(meta.get("doc_type") or doc_type),
        name=str(meta.get("title") or ""),
        modified_time=str(meta.get("latest_modify_time", "")),
        url=str(meta["url"]) if meta.get("url") else None,
        via="meta",
        owner_id=str(owner) if owner else None,
    )


def named_walk(
    client: FeishuClient, request: DiscoveryRequest, types: Collection[str], has_wiki: bool
) -> tuple[Walk, list[Change]] | None:
    """The walk and deletions of a run limited to indexed items (``only_keys``), read from their
    metas; None: the connector walks the drive, as for any other run (see the module's doc)."""
    keys = request.only_keys or []
    if not keys or request.full_resync or has_wiki or not set(keys) <= request.stored:
        return None
    named = named_items(client, keys, set(types))
    if named.undecided:
        log.info("%d named item(s) undecided by their metas: walking", len(named.undecided))
        return None
    walk = Walk(items=named.items, complete=False)
    deleted = [Change(item_key=k, kind=ChangeKind.DELETED, reason=r) for k, r in sorted(named.gone.items())]
    return walk, deleted
