"""Typed views of Yuque list records, validated one record at a time.

Yuque's schema drifts (``status`` is a string in the spec and an int in practice, ``format`` is
missing from list items, TOC title nodes carry ``""`` for ids). Each ``from_api`` accepts the
known variants and raises :class:`RecordError` for a record it cannot use, so the caller skips
that record with a logged reason instead of failing the whole walk.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "DocDetail",
    "DocSummary",
    "RecordError",
    "Repo",
    "TocItem",
    "build_breadcrumbs",
    "parse_time",
    "public_level",
]


class RecordError(ValueError):
    """A list record Yuque sent is unusable. ``record_id`` is its id when that much was readable."""

    def __init__(self, reason: str, record_id: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.record_id = record_id


def parse_time(value: Any) -> datetime | None:
    """``2022-12-02T07:27:32.714Z`` (and other ISO-8601 forms) -> aware UTC datetime."""
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ValueError(f"timestamp is {type(value).__name__}, not a string")
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def _int_id(raw: dict[str, Any], key: str = "id") -> int:
    value = raw.get(key)
    if isinstance(value, bool) or value is None:
        raise RecordError(f"missing or invalid {key!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise RecordError(f"{key!r} is not an integer: {value!r}")


def _opt_str(raw: dict[str, Any], key: str, record_id: int | None) -> str | None:
    value = raw.get(key)
    if value is None or isinstance(value, str):
        return value
    raise RecordError(f"{key!r} is {type(value).__name__}, expected a string", record_id)


def _status(value: Any) -> int | None:
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def public_level(value: Any) -> int | None:
    """A ``public`` field (0 private, 1 public, 2 tenant-wide, per the 2.0.1 spec) or None for
    anything else: an unreadable level must never be guessed (the permission reader then makes
    the doc private). Booleans are refused too: ``True`` is not a documented level."""
    if isinstance(value, str) and value in ("0", "1", "2"):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1, 2):
        return value
    return None


def _owner(raw: dict[str, Any]) -> tuple[str | None, str | None]:
    """(login, type) of a repo's owner from its ``user`` object (``Group`` or ``User``)."""
    user = raw.get("user")
    if not isinstance(user, dict):
        return None, None
    login, kind = user.get("login"), user.get("type")
    return (login if isinstance(login, str) and login else None, kind if isinstance(kind, str) else None)


def _time(raw: dict[str, Any], key: str, record_id: int | None) -> str | None:
    value = raw.get(key)
    try:
        parse_time(value)
    except ValueError as exc:
        raise RecordError(f"{key!r} is not a timestamp: {exc}", record_id) from None
    return value or None


@dataclass(frozen=True, slots=True)
class Repo:
    id: int
    slug: str
    name: str
    namespace: str
    type: str
    updated_at: str | None
    items_count: int | None
    # permission data (:mod:`.permissions`): the repo's ``public`` level (None: unreadable) and
    # its owner, whose readers a private repo's docs are
    public: int | None = None
    owner_login: str | None = None
    owner_type: str | None = None  # "Group" | "User" (the owner's V2User ``type``)

    @classmethod
    def from_api(cls, raw: Any) -> Repo:
        if not isinstance(raw, dict):
            raise RecordError(f"repo record is {type(raw).__name__}, not an object")
        rid = _int_id(raw)
        slug = _opt_str(raw, "slug", rid)
        namespace = _opt_str(raw, "namespace", rid)
        if not namespace:
            login = (raw.get("user") or {}).get("login") if isinstance(raw.get("user"), dict) else None
            if not (login and slug):
                raise RecordError("repo has neither 'namespace' nor user.login + slug", rid)
            namespace = f"{login}/{slug}"
        if namespace.count("/") != 1:
            raise RecordError(f"namespace {namespace!r} is not 'login/slug'", rid)
        count = raw.get("items_count")
        owner_login, owner_type = _owner(raw)
        return cls(
            id=rid,
            slug=slug or namespace.split("/", 1)[1],
            name=_opt_str(raw, "name", rid) or namespace,
            namespace=namespace,
            type=_opt_str(raw, "type", rid) or "Book",
            updated_at=_time(raw, "updated_at", rid),
            items_count=count if isinstance(count, int) else None,
            public=public_level(raw.get("public")),
            owner_login=owner_login or namespace.split("/", 1)[0],
            owner_type=owner_type,
        )


@dataclass(frozen=True, slots=True)
class DocSummary:
    """One record of ``GET /repos/:id/docs`` (no body)."""

    id: int
    slug: str | None
    title: str
    type: str
    format: str | None
    updated_at: str | None
    content_updated_at: str | None
    status: int | None
    deleted_at: str | None = None
    public: int | None = None  # the doc's own level (None: unreadable); see :mod:`.permissions`

    @property
    def modified_time(self) -> str | None:
        """The version evidence: content time first, because ``updated_at`` also moves on
        metadata-only edits (moving the doc, renaming the slug)."""
        return self.content_updated_at or self.updated_at

    @classmethod
    def from_api(cls, raw: Any) -> DocSummary:
        if not isinstance(raw, dict):
            raise RecordError(f"doc record is {type(raw).__name__}, not an object")
        did = _int_id(raw)
        title = raw.get("title")
        if title is None:
            title = ""
        if not isinstance(title, str):
            raise RecordError(f"'title' is {type(title).__name__}, expected a string", did)
        status = _status(raw.get("status"))
        summary = cls(
            id=did,
            slug=_opt_str(raw, "slug", did),
            title=title,
            type=_opt_str(raw, "type", did) or "Doc",
            format=_opt_str(raw, "format", did),
            updated_at=_time(raw, "updated_at", did),
            content_updated_at=_time(raw, "content_updated_at", did),
            status=status,
            deleted_at=_time(raw, "deleted_at", did),
            public=public_level(raw.get("public")),
        )
        if summary.modified_time is None and summary.deleted_at is None:
            raise RecordError("record has no 'content_updated_at' or 'updated_at'", did)
        return summary


@dataclass(frozen=True, slots=True)
class DocDetail:
    """The fields of ``GET /repos/:ns/docs/:id`` the fetch step uses."""

    id: int
    slug: str | None
    title: str
    type: str
    format: str
    body: str
    body_draft: str
    body_html: str
    body_sheet: str
    body_table: str
    updated_at: str | None
    content_updated_at: str | None
    raw: dict[str, Any]
    status: int | None = None  # 0 draft, 1 published (an int in practice, a string in the spec)

    @classmethod
    def from_api(cls, raw: Any) -> DocDetail:
        if not isinstance(raw, dict):
            raise RecordError(f"doc detail is {type(raw).__name__}, not an object")
        did = _int_id(raw)

        def text(key: str) -> str:
            value = raw.get(key)
            return value if isinstance(value, str) else ""

        fmt = text("format")
        doc_type = text("type") or "Doc"
        if not fmt:
            # the format is sometimes absent; the type says enough for sheets and tables
            fmt = {"Sheet": "lakesheet", "Table": "laketable", "HtmlDoc": "html"}.get(doc_type, "markdown")
        return cls(
            id=did,
            slug=text("slug") or None,
            title=text("title"),
            type=doc_type,
            format=fmt,
            body=text("body"),
            body_draft=text("body_draft"),
            body_html=text("body_html"),
            body_sheet=text("body_sheet"),
            body_table=text("body_table"),
            updated_at=text("updated_at") or None,
            content_updated_at=text("content_updated_at") or None,
            raw=raw,
            status=_status(raw.get("status")),
        )


@dataclass(frozen=True, slots=True)
class TocItem:
    uuid: str
    type: str
    title: str
    doc_id: int | None
    parent_uuid: str | None

    @classmethod
    def from_api(cls, raw: Any) -> TocItem:
        if not isinstance(raw, dict) or not isinstance(raw.get("uuid"), str):
            raise RecordError("toc node without a 'uuid'")
        doc_id = raw.get("doc_id")
        # TITLE nodes carry "" for doc_id and level
        if isinstance(doc_id, str):
            doc_id = int(doc_id) if doc_id.isdigit() else None
        elif not isinstance(doc_id, int) or isinstance(doc_id, bool):
            doc_id = None
        return cls(
            uuid=raw["uuid"],
            type=str(raw.get("type") or "DOC"),
            title=str(raw.get("title") or ""),
            doc_id=doc_id,
            parent_uuid=raw.get("parent_uuid") or None,
        )


def build_breadcrumbs(toc: list[TocItem]) -> dict[int, list[str]]:
    """doc id -> titles of its ancestors in the TOC, outermost first (the doc itself excluded)."""
    by_uuid = {item.uuid: item for item in toc}
    crumbs: dict[int, list[str]] = {}
    for item in toc:
        if item.doc_id is None:
            continue
        path: list[str] = []
        seen = {item.uuid}
        parent = by_uuid.get(item.parent_uuid or "")
        while parent is not None and parent.uuid not in seen:  # a cyclic TOC must not hang us
            seen.add(parent.uuid)
            if parent.title:
                path.append(parent.title)
            parent = by_uuid.get(parent.parent_uuid or "")
        crumbs.setdefault(item.doc_id, list(reversed(path)))
    return crumbs
