"""The access fields of an Elasticsearch chunk and the filter on them (pure builders, no client).

Every chunk carries its document's entries (:mod:`include.acl`) in ``acl`` (keyword,
multi-valued; ``public`` among them when it is one) and ``public`` (boolean). A restricted
search puts :func:`access_query` in the bool query's ``filter`` and in the kNN clause's
``filter``: kNN applies it while it walks the HNSW graph, so ``k`` permitted neighbours come
back, not ``k`` neighbours thinned out afterwards. A chunk without ``acl`` (indexed before
chunks carried one) matches no restricted search: fail-closed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from include.acl import PUBLIC
from include.index.base import normalize_entries

__all__ = ["ACCESS_FIELDS", "access_fields", "access_query", "stored_access", "with_access"]

ACCESS_FIELDS = ("acl", "public")


def access_fields(entries: Iterable[str]) -> dict[str, Any]:
    """A chunk's access fields: its document's entries (``public`` among them when it is) and
    the ``public`` flag, the cheap first clause of the search filter."""
    acl = list(normalize_entries(entries))
    return {"acl": acl, "public": PUBLIC in acl}


def stored_access(src: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The entries a stored ``_source`` holds (None: stored before chunks carried them)."""
    acl = src.get("acl")
    if acl is None:
        return None
    return tuple(sorted(set([acl] if isinstance(acl, str) else acl)))  # _source is as written: one string if so


def with_access(update: Mapping[str, Any] | None, fields: dict[str, Any]) -> dict[str, Any]:
    """A kept chunk's partial update that also sets its access fields."""
    if update is None:
        return {"doc": fields}
    if "doc" in update:
        return {"doc": {**update["doc"], **fields}}
    script = update["script"]  # the drop-the-vector script: set them there too, by params
    return {
        "script": {
            **script,
            "source": script["source"] + "; ctx._source.acl = params.acl; ctx._source.public = params.public",
            "params": {**script["params"], **fields},
        }
    }


def access_query(access: Sequence[str]) -> dict[str, Any]:
    """The filter of a search restricted to ``access``: a chunk whose document holds one of the
    entries. ``public`` is matched on the boolean (a cheap clause most hits take) when the
    searcher has it, the rest on ``acl``; without ``public`` in ``access`` public documents are
    not matched (as in SQLite: the entries meet or they do not)."""
    should: list[dict[str, Any]] = []
    if PUBLIC in access:
        should.append({"term": {"public": True}})
    should.append({"terms": {"acl": list(access)}})
    return {"bool": {"should": should, "minimum_should_match": 1}}
