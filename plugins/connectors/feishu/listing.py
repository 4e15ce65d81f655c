"""Walk the configured drive folders (and optional wiki spaces) into a flat item map.

The drive API lists one folder level at a time, so sub-folders are descended explicitly.
Shortcuts are resolved to their targets (keyed by the target token, so a document reached twice
is synced once); a shortcut's own ``modified_time`` says nothing about its target, so targets
are looked up with the batch meta query for their ``latest_modify_time``. A walk is *complete*
only if every folder listed without error: the engine derives deletions from absent keys, which
must never come from a listing that silently lost a folder.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from plugins.connectors.feishu.client import FeishuClient
from plugins.connectors.feishu.errors import FeishuError

__all__ = ["DriveItem", "Walk", "walk_drive"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class DriveItem:
    token: str
    type: str
    name: str
    modified_time: str
    url: str | None = None
    path: tuple[str, ...] = ()  # names of the enclosing folders, outermost first
    via: str = "folder"  # folder | shortcut | wiki


@dataclass(slots=True)
class Walk:
    items: dict[str, DriveItem] = field(default_factory=dict)
    complete: bool = True
    errors: list[str] = field(default_factory=list)
    skipped_types: dict[str, int] = field(default_factory=dict)
    folders: int = 0


def _chunks(seq: list, n: int) -> Iterable[list]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


def walk_drive(
    client: FeishuClient,
    folders: Iterable[str],
    *,
    wiki_spaces: Iterable[str] = (),
    types: Iterable[str] = ("doc", "docx", "sheet", "bitable", "file"),
    max_depth: int = 64,
) -> Walk:
    wanted = set(types)
    out = Walk()
    shortcuts: dict[str, tuple[str, tuple[str, ...], str]] = {}  # target -> (type, path, name)

    def keep(item: DriveItem) -> None:
        if item.type not in wanted:
            out.skipped_types[item.type] = out.skipped_types.get(item.type, 0) + 1
        elif item.token not in out.items:
            out.items[item.token] = item

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
            if kind == "folder":
                if depth + 1 <= max_depth:
                    queue.append((token, (*path, e.get("name", "")), depth + 1))
                continue
            if kind == "shortcut":
                info = e.get("shortcut_info") or {}
                target, target_type = info.get("target_token"), info.get("target_type")
                if target and target_type:
                    shortcuts.setdefault(target, (target_type, path, e.get("name", "")))
                continue
            keep(DriveItem(token, kind, e.get("name", ""), str(e.get("modified_time", "")), e.get("url"), path))

    _resolve_shortcuts(client, shortcuts, wanted, out, keep)
    for space in wiki_spaces:
        _walk_wiki(client, space, out, keep)
    return out


def _resolve_shortcuts(client: FeishuClient, shortcuts: dict, wanted: set[str], out: Walk, keep) -> None:
    pending = []
    for target, (kind, _path, _name) in shortcuts.items():
        if target in out.items:
            continue  # also listed directly; that entry carries the real modified_time
        if kind not in wanted:
            out.skipped_types[kind] = out.skipped_types.get(kind, 0) + 1
            continue
        pending.append((target, kind))
    for batch in _chunks(pending, 200):
        try:
            metas, failed = client.batch_query_metas(batch)
        except FeishuError as exc:
            out.complete = False
            out.errors.append(f"shortcut targets: {type(exc).__name__}: {exc}")
            continue
        for m in metas:
            kind, path, name = shortcuts[m["doc_token"]]
            title = m.get("title") or name
            keep(
                DriveItem(
                    m["doc_token"], kind, title, str(m.get("latest_modify_time", "")), m.get("url"), path, "shortcut"
                )
            )
        # A target in failed_list is gone or unshared: it is simply not part of the drive now.
        for f in failed:
            log.info("shortcut target %s unavailable (code %s)", f.get("token"), f.get("code"))


def _walk_wiki(client: FeishuClient, space: str, out: Walk, keep) -> None:
    queue: deque[tuple[str | None, tuple[str, ...]]] = deque([(None, ())])
    while queue:
        parent, path = queue.popleft()
        try:
            nodes = list(client.list_wiki_nodes(space, parent))
        except FeishuError as exc:
            out.complete = False
            out.errors.append(f"wiki {space}/{parent or ''}: {type(exc).__name__}: {exc}")
            continue
        for n in nodes:
            if n.get("has_child"):
                queue.append((n.get("node_token"), (*path, n.get("title", ""))))
            if n.get("obj_token") and n.get("obj_type"):
                keep(
                    DriveItem(
                        n["obj_token"],
                        n["obj_type"],
                        n.get("title", ""),
                        str(n.get("obj_edit_time", "")),
                        None,
                        path,
                        "wiki",
                    )
                )
