"""Generations of the Elasticsearch backend's index: creation, the rebuild alias and the swap.

The configured name is an alias over one physical index (a generation, ``<alias>__v<gen>``,
created from the index template). A full rebuild writes a new generation behind a second alias
``<alias>__rebuild`` and swaps the main alias over atomically when the run succeeds. This mixin
holds that life cycle for :class:`~include.index.elasticsearch.ElasticsearchIndex`, which gives
it the client (``_es``), the retry policy (``_call``) and the layout settings.
"""

from __future__ import annotations

import abc
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from elasticsearch import BadRequestError, Elasticsearch, NotFoundError

from include.index._es_mapping import (
    RENAME_LEGACY_FIELDS,
    index_template,
    physical_index_name,
    rebuild_alias,
    vector_dims_of,
    vector_properties,
)

__all__ = ["Generations"]

log = logging.getLogger("include.index.elasticsearch")

T = TypeVar("T")

_REBUILD_META_KEY = "tributary_rebuild_source"


class Generations(abc.ABC):
    """The generations behind one alias; the index class provides ``_call`` (its requests under
    its retry policy) and the attributes below."""

    alias: str
    shards: int
    replicas: int
    _es: Elasticsearch

    @abc.abstractmethod
    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """One request under the index's retry policy (``ElasticsearchIndex._call``)."""

    def _put_template(self) -> None:
        self._call(
            self._es.indices.put_index_template,
            **index_template(self.alias, shards=self.shards, replicas=self.replicas),
        )

    def _create(
        self,
        index: str,
        aliases: dict[str, Any],
        meta: dict[str, Any] | None = None,
        properties: dict[str, Any] | None = None,
    ) -> None:
        # The template supplies settings and mappings; the explicit mapping _meta marks rebuilds
        # and explicit properties carry a live vector mapping over (merged with the template's).
        kwargs: dict[str, Any] = {"index": index, "aliases": aliases}
        if meta or properties:
            kwargs["mappings"] = {
                **({"_meta": meta} if meta else {}),
                **({"properties": properties} if properties else {}),
            }
        try:
            self._call(self._es.indices.create, **kwargs)
        except BadRequestError as exc:
            # Two workers opening a fresh cluster race to create generation 0: both are fine.
            if exc.error != "resource_already_exists_exception":
                raise

    def _rebuild_target(self) -> tuple[str, str | None] | None:
        """(physical index, source it rebuilds or None for all) when a rebuild is in progress."""
        try:
            found = self._call(self._es.indices.get_alias, name=rebuild_alias(self.alias))
        except NotFoundError:
            return None
        index = next(iter(found.body))
        mapping = self._call(self._es.indices.get_mapping, index=index).body
        meta = mapping.get(index, {}).get("mappings", {}).get("_meta", {}) or {}
        return index, meta.get(_REBUILD_META_KEY)

    def _vector_dims(self, index: str) -> int | None:
        """The vector size ``index`` (an alias or a generation) maps, None before any vector."""
        return vector_dims_of(dict(self._call(self._es.indices.get_mapping, index=index).body))

    # ------------------------------------------------------------------------------ rebuild
    def begin_rebuild(self, source: str | None = None) -> None:
        """Start writing a new generation; readers keep the live one until ``finish_rebuild``.

        ``source`` scopes the rebuild when several sources share the index: only that source's
        writes go to the new generation, the others keep writing the live index and are copied
        over when it is swapped in. Without it the whole index is rebuilt.
        """
        stale = self._rebuild_target()
        if stale is not None:  # a rebuild that never finished (crashed run): start over
            log.warning("dropping unfinished rebuild index %s", stale[0])
            self._call(self._es.indices.delete, index=stale[0])
        self._put_template()
        generation = dt.datetime.now(dt.UTC).strftime("%Y%m%d%H%M%S%f")
        meta = {_REBUILD_META_KEY: source} if source else None
        # a scoped rebuild carries the other sources' chunks over, vectors included: same mapping
        dims = self._vector_dims(self.alias) if source else None
        self._create(
            physical_index_name(self.alias, generation),
            {rebuild_alias(self.alias): {"is_write_index": True}},
            meta,
            vector_properties(dims) if dims else None,
        )

    def finish_rebuild(self, success: bool) -> None:
        rebuild = self._rebuild_target()
        if rebuild is None:
            return
        new, scoped_source = rebuild
        if not success:
            self._call(self._es.indices.delete, index=new)
            return
        old = list(self._call(self._es.indices.get_alias, name=self.alias).body)
        started = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        if scoped_source is not None:
            self._carry_over(old, new, scoped_source, None)
        self._call(self._es.indices.refresh, index=new)
        actions: list[dict[str, Any]] = [{"remove": {"index": o, "alias": self.alias}} for o in old if o != new]
        actions.append({"add": {"index": new, "alias": self.alias, "is_write_index": True}})
        actions.append({"remove": {"index": new, "alias": rebuild_alias(self.alias)}})
        self._call(self._es.indices.update_aliases, actions=actions)  # one atomic swap
        if scoped_source is not None:
            # Other sources kept writing the old generation until the swap: copy what changed
            # since the first copy started (newer versions win; the swap is already done).
            self._carry_over(old, new, scoped_source, started)
        for o in old:
            if o != new:
                self._call(self._es.indices.delete, index=o)

    def _carry_over(self, old: list[str], new: str, source: str, since: str | None) -> None:
        """Copy the other sources' chunks from the live generation into the rebuilt one."""
        query: dict[str, Any] = {"bool": {"must_not": [{"term": {"source": source}}]}}
        if since is not None:
            query["bool"]["filter"] = [{"range": {"updated_at": {"gte": since}}}]
        for o in old:
            self._call(self._es.indices.refresh, index=o)
            self._call(
                self._es.reindex,
                source={"index": o, "query": query},
                script=RENAME_LEGACY_FIELDS,  # the new generation's strict mapping lacks the old name
                # first pass: the new generation holds only the rebuilt source, so "create"
                # never clobbers; second pass: the old generation holds the newer version
                dest={"index": new, "op_type": "create" if since is None else "index"},
                conflicts="proceed",
                wait_for_completion=True,
                refresh=True,
            )
