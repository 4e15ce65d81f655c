"""Walk the configured drive folders (and optional wiki spaces) into a flat item map.

The drive API lists one folder level at a time, so sub-folders are descended explicitly, each
in created-time ascending order so that an edit during the walk cannot move an item across the
page cursor (:meth:`FeishuClient.list_folder`). Shortcuts are resolved to their targets (keyed
by the target token, so a document reached twice is synced once); a shortcut's own
``modified_time`` says nothing about its target, so targets are looked up with the batch meta
query for their ``latest_modify_time``. A walk is *complete* only if every folder listed
without error: the engine derives deletions from absent keys, which must never come from a
listing that silently lost a folder.

URLs: a listing row carries its document's URL (a shortcut row carries its *target's*); the
meta query returns ``url`` only when asked with ``with_url: true``; wiki nodes have no URL, so
``<tenant>/wiki/<node_token>`` is built, as the public Feishu connectors do.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import urlsplit

from plugins.connectors.feishu.client import FeishuClient
from plugins.connectors.feishu.errors import FeishuError

_T = TypeVar("_T")

__all__ = ["DEFAULT_TYPES", "DriveItem", "Walk", "tenant_from_url", "walk_drive"]

log = logging.getLogger(__name__)

DEFAULT_TYPES = ("doc", "docx", "sheet", "bitable", "slides", "file")


@dataclass(slots=True)
class DriveItem:
    token: str
    type: str
    name: str
    modified_time: str
    url: str | None = None
    path: tuple[str, ...] = ()  # names of the enclosing folders, outermost first
    via: str = "folder"  # folder | shortcut | wiki | wiki_shortcut
    owner_id: str | None = None  # the owner's open_id (listings and metas carry it)
    space_id: str | None = None  # wiki items: the space, and the node whose permissions apply
    node_token: str | None = None


@dataclass(slots=True)
class Walk:
    items: dict[str, DriveItem] = field(default_factory=dict)
    complete: bool = True
    errors: list[str] = field(default_factory=list)
    skipped_types: dict[str, int] = field(default_factory=dict)
    folders: int = 0
    tenant_url: str | None = None  # https://<tenant>.feishu.cn: configured, or learnt from listing URLs
    site_url: str | None = None  # fallback for wiki links when no listing URL told the tenant


def tenant_from_url(url: str | None) -> str | None:
    """``https://acme.feishu.cn`` from any document URL of that tenant."""
    if not url:
        return None
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme in ("http", "https") and parts.netloc else None


def _chunks(seq: list[_T], n: int) -> Iterable[list[_T]]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


@dataclass(slots=True)
class _Shortcut:
    type: str
    path: tuple[str, ...]
    name: str
    url: str | None  # the shortcut row's url: its target's


def walk_drive(
    client: FeishuClient,
    folders: Iterable[str],
    *,
    wiki_spaces: Iterable[str] = (),
    types: Iterable[str] = DEFAULT_TYPES,
    max_depth: int = 64,
    tenant_url: str | None = None,
    site_url: str | None = None,
) -> Walk:
    wanted = set(types)
    out = Walk(tenant_url=tenant_url, site_url=site_url)

    def keep(item: DriveItem) -> None:
        if item.type not in wanted:
            out.skipped_types[item.type] = out.skipped_types.get(item.type, 0) + 1
        elif item.token not in out.items:
            out.items[item.token] = item

    shortcuts = _walk_folders(client, folders, out, keep, max_depth)
    _resolve_shortcuts(client, shortcuts, wanted, out, keep)
    for space in wiki_spaces:
        _walk_wiki(client, space, out, keep)
    return out


def _walk_folders(
    client: FeishuClient, folders: Iterable[str], out: Walk, keep: Callable[[DriveItem], None], max_depth: int
) -> dict[str, _Shortcut]:
    shortcuts: dict[str, _Shortcut] = {}
    queue: deque[tuple[str, tuple[str, ...], int]] = deque((f, (), 0) for f in folders)
    seen_folders: set[str] = set()
    while queue:
        folder, path, depth = queue.popleft()
        if folder in seen_folders:
            continue
        seen_folders.add(folder)
        out.folders += 1
        try:
            entries = list(client.list_folder(folder))
        except FeishuError as exc:
            out.complete = False
            out.errors.append(f"folder {folder}: {type(exc).__name__}: {exc}")
            log.warning("listing folder %s failed: %s", folder, exc)
            continue
        for e in entries:
            kind, token = e.get("type"), e.get("token")
            if not token or not kind:
                continue
            out.tenant_url = out.tenant_url or tenant_from_url(e.get("url"))
            if kind == "folder":
                if depth + 1 <= max_depth:
                    queue.append((token, (*path, e.get("name", "")), depth + 1))
                continue
            if kind == "shortcut":
                info = e.get("shortcut_info") or {}
                target, target_type = info.get("target_token"), info.get("target_type")
                if target and target_type:
                    shortcuts.setdefault(target, _Shortcut(target_type, path, e.get("name", ""), e.get("url")))
                continue
            modified, owner = str(e.get("modified_time", "")), e.get("owner_id")
            keep(DriveItem(token, kind, e.get("name", ""), modified, e.get("url"), path, owner_id=owner))
    return shortcuts


def _resolve_shortcuts(
    client: FeishuClient,
    shortcuts: dict[str, _Shortcut],
    wanted: set[str],
    out: Walk,
    keep: Callable[[DriveItem], None],
) -> None:
    pending = []
    for target, sc in shortcuts.items():
        if target in out.items:
            continue  # also listed directly; that entry carries the real modified_time
        if sc.type not in wanted:
            out.skipped_types[sc.type] = out.skipped_types.get(sc.type, 0) + 1
            continue
        pending.append((target, sc.type))
    for batch in _chunks(pending, 200):
        try:
            metas, failed = client.batch_query_metas(batch)
        except FeishuError as exc:
            out.complete = False
            out.errors.append(f"shortcut targets: {type(exc).__name__}: {exc}")
            continue
        for m in metas:
            sc = shortcuts[m["doc_token"]]
            url = m.get("url") or sc.url
            title = m.get("title") or sc.name
            modified = str(m.get("latest_modify_time", ""))
            keep(DriveItem(m["doc_token"], sc.type, title, modified, url, sc.path, "shortcut", m.get("owner_id")))
        # A target in failed_list is gone or unshared: it is simply not part of the drive now.
        for f in failed:
            log.info("shortcut target %s unavailable (code %s)", f.get("token"), f.get("code"))


def _wiki_url(out: Walk, node_token: str | None) -> str | None:
    base = out.tenant_url or out.site_url
    return f"{base}/wiki/{node_token}" if base and node_token else None


def _walk_wiki(client: FeishuClient, space: str, out: Walk, keep: Callable[[DriveItem], None]) -> None:
    """Breadth-first over one space. A ``shortcut`` node points at an ``origin`` node (maybe in
    another space): its document is the origin's, so an origin entry replaces a shortcut's, the
    URL names the origin node, and a shortcut's children (the origin's) are not walked twice."""
    queue: deque[tuple[str | None, tuple[str, ...]]] = deque([(None, ())])
    seen: set[str] = set()
    while queue:
        parent, path = queue.popleft()
        try:
            nodes = list(client.list_wiki_nodes(space, parent))
        except FeishuError as exc:
            out.complete = False
            out.errors.append(f"wiki {space}/{parent or ''}: {type(exc).__name__}: {exc}")
            continue
        for n in nodes:
            node_token = n.get("node_token")
            is_shortcut = n.get("node_type") == "shortcut"
            if n.get("has_child") and not is_shortcut and node_token and node_token not in seen:
                seen.add(node_token)
                queue.append((node_token, (*path, n.get("title", ""))))
            obj, kind = n.get("obj_token"), n.get("obj_type")
            if not obj or not kind:
                continue
            origin = n.get("origin_node_token") if is_shortcut else node_token
            item = DriveItem(
                obj, kind, n.get("title", ""), str(n.get("obj_edit_time", "")), _wiki_url(out, origin), path,
                "wiki_shortcut" if is_shortcut else "wiki", n.get("owner"),
                n.get("origin_space_id") if is_shortcut else space, origin,
            )  # fmt: skip
            if not is_shortcut and out.items.get(obj) is not None and out.items[obj].via == "wiki_shortcut":
                del out.items[obj]  # the origin node is the document's real place
            keep(item)
