"""``kind: web`` — a polite, incremental, SSRF-safe breadth-first crawler of one site.

Example source::

    - kind: web
      name: docs
      conn_id: docs_site          # optional: headers / cookies / basic auth for a login
      delete_after_missing_runs: 2
      options:
        seeds: ["https://docs.example.com/"]
        max_pages: 5000
        delay_seconds: 1.0

Options are read only through :class:`.options.WebOptions`. Secrets come from the Connection
``conn_id`` (``include.connections``; :func:`.auth.credentials_from_conn`): ``login``/``password``
become HTTP basic auth, ``extra`` may hold ``{"headers": {...}, "cookies": {...}}``. They are sent
only to the source's own origins (``CredentialScope``) and never logged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

from include.config import SourceConfig
from include.connections import get_connection
from include.contract import Change, RawDocument
from include.settings import get_settings
from include.staging import StagingArea
from plugins.connectors.base import (
    Connector,
    ConnectorContext,
    Discovery,
    DiscoveryRequest,
    FetchError,
    register_connector,
)
from plugins.connectors.web.auth import Credentials, CredentialScope, credentials_from_conn
from plugins.connectors.web.cache import LinkCache
from plugins.connectors.web.crawler import Crawler
from plugins.connectors.web.fetcher import Fetcher, FetcherConfig
from plugins.connectors.web.options import WebOptions, canonical_page_url
from plugins.connectors.web.politeness import make_politeness
from plugins.connectors.web.rendering import make_render_step
from plugins.connectors.web.ssrf import AddressGuard
from plugins.connectors.web.urls import Scope, file_name_for
from plugins.connectors.web.window import ModifiedWindow

__all__ = ["WebConnector"]

T = TypeVar("T")

# Change metadata a fetched document keeps (a rendered page says so, and how long it took).
_DOCUMENT_METADATA = ("content_type", "depth", "requested_url", "rendered", "render_ms", "rendered_url")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code, even inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


@register_connector
class WebConnector(Connector):
    kind = "web"
    options_model = WebOptions
    prepares = True  # each staged page, as the crawl stages it

    def __init__(self, source: SourceConfig, context: ConnectorContext | None = None) -> None:
        super().__init__(source, context)
        self.options = WebOptions.model_validate(source.options)

    def canonical_key(self, key: str) -> str:
        """A page's key is its canonical URL (the crawler's, ``urls.canonicalize``): the fragment
        and dot segments go, so ``faq.html#answers`` and ``/./faq.html`` name ``/faq.html``. A
        key without a scheme is resolved against the first seed (RFC 3986 s5.2)."""
        text = key.strip()
        if not text:
            raise ValueError("an empty page URL")
        if not urlsplit(text).scheme:
            text = urljoin(self.options.seeds[0], text)
        return canonical_page_url(text)

    # ------------------------------------------------------------------ wiring

    def _credentials(self) -> Credentials:
        """Headers, cookies and basic auth from the source's Connection, read when a fetcher is
        built (never at import: DAG parsing must not reach the secrets backends)."""
        if not self.source.conn_id:
            return Credentials()
        return credentials_from_conn(get_connection(self.source.conn_id))

    def _redis_url(self) -> str | None:
        if self.options.redis_url is not None:
            return self.options.redis_url or None
        return self.context.redis_url or get_settings().redis_url

    def _cache_path(self) -> Path:
        if self.options.cache_path:
            return Path(self.options.cache_path)
        return get_settings().home / "web-cache" / f"{self.source.name}.sqlite"

    def _fetcher(self, delay_for: Any = None) -> Fetcher:
        credentials = self._credentials()
        o = self.options
        config = FetcherConfig(
            user_agent=o.user_agent,
            timeout_seconds=o.timeout_seconds,
            total_timeout_seconds=o.total_timeout_seconds,
            max_body_bytes=o.max_body_bytes,
            max_redirects=o.max_redirects,
            retries=o.retries,
            backoff_seconds=o.backoff_seconds,
            headers={**o.headers, **credentials.headers},
            cookies=dict(credentials.cookies),
            auth=credentials.auth,
            credential_scope=CredentialScope(o.seeds, o.scope),
        )
        guard = AddressGuard(allow=o.allowlist, allow_private=o.allow_private_networks)
        fetcher = Fetcher(config, guard, make_politeness(self._redis_url()))
        if delay_for is not None:
            fetcher.delay_for = delay_for
        else:
            fetcher.delay_for = lambda host: o.delay_seconds
        return fetcher

    # ------------------------------------------------------------------ Connector API

    def discover(self, request: DiscoveryRequest) -> Discovery:
        return _run(self._discover(request))

    def _partition_seeds(self, partition: str, seeds: list[str]) -> list[str]:
        """The seeds of ``seeds`` whose scope unit is in ``partition``. Seeds of no current
        partition (an ``only_keys`` page on another host) go to the first partition, so every
        named page is fetched exactly once."""
        units = set(partition.split(","))
        scope = Scope(self.options.seeds, self.options.scope)
        partitions = self.partitions()
        current = {u for p in partitions for u in p.split(",")}
        first = bool(partitions) and partition == partitions[0]
        return [s for s in seeds if scope.key(s) in units or (first and scope.key(s) not in current)]

    def _crawl_options(self, request: DiscoveryRequest) -> WebOptions | None:
        """The options of this crawl: the named pages only (``only_keys``), and/or the seeds of
        one partition; None when the partition has no seed (a partition of an older config)."""
        options = self.options
        changes: dict[str, Any] = {}
        seeds = list(options.seeds)
        if request.only_keys:
            # Re-process named pages only: fetch exactly those, follow nothing. The listing is
            # then partial by construction, so it never drives deletions.
            seeds = [self.canonical_key(k) for k in request.only_keys]
            changes.update(max_depth=0, use_sitemaps=False)
        if request.partition is not None:
            seeds = self._partition_seeds(request.partition, seeds)
            if not seeds:
                return None
        if seeds == options.seeds and not changes:
            return options
        # Validated, not model_copy'd: the seeds validator canonicalises each key.
        return WebOptions.model_validate({**options.model_dump(), **changes, "seeds": seeds})

    async def _discover(self, request: DiscoveryRequest) -> Discovery:
        options = self._crawl_options(request)
        if options is None:
            return Discovery(changes=[], complete=True, all_keys=set(), stats={"pages": 0})
        fetcher = self._fetcher()
        cache = LinkCache(self._cache_path())
        try:
            known = {} if request.full_resync else request.known
            # a partition's crawl leaves the other partitions' hosts (and their cache rows) alone
            o = self.options
            whole = Scope(o.seeds, o.scope, o.include, o.exclude) if request.partition is not None else None
            crawler = Crawler(
                options,
                fetcher,
                cache,
                known,
                request.stage,
                request.max_items,
                whole,
                spill=request.spill,
                window=ModifiedWindow(request.window_start, request.window_end),
                progress=request.progress,
                prepare=request.prepare,
            )
            fetcher.delay_for = crawler.delay_for
            crawler.render = make_render_step(options, fetcher, crawler.robots, crawler._hop_refusal)
            try:
                result = await crawler.run()
            finally:
                if crawler.render is not None:
                    await crawler.render.close()
        finally:
            cache.close()
            await fetcher.politeness.close()
            await fetcher.aclose()
        if self.context.log is not None:
            self.context.log.info("web crawl of %s: %s", self.source.name, result.stats)
        return Discovery(
            changes=result.changes,
            complete=result.complete and not request.only_keys,
            all_keys=result.all_keys,
            stats=result.stats,
        )

    def fetch(self, change: Change) -> RawDocument:
        url = change.url or change.item_key
        content_type = change.metadata.get("content_type")
        if change.staged_path:
            data = StagingArea.read_bytes(change.staged_path)
        else:
            data, content_type = _run(self._fetch_live(url))
        return RawDocument(
            item_key=change.item_key,
            data=data,
            file_name=file_name_for(url, content_type),
            media_type=content_type,
            url=url,
            title=change.title,
            version=change.version,
            metadata={k: v for k, v in change.metadata.items() if k in _DOCUMENT_METADATA},
        )

    async def _fetch_live(self, url: str) -> tuple[bytes, str | None]:
        """Fetch one URL outside a crawl (a change that was not staged)."""
        scope = Scope(self.options.seeds, self.options.scope)
        fetcher = self._fetcher()
        try:
            result = await fetcher.fetch(
                url, hop_allowed=lambda u: None if scope.in_scope(u) else "redirect_out_of_scope"
            )
        finally:
            await fetcher.politeness.close()
            await fetcher.aclose()
        if result.error:
            transient = result.error.startswith(("timeout", "connect", "network", "dns", "http_5", "http_429"))
            raise FetchError(f"{url}: {result.message}", reason=result.error, retryable=transient)
        if not 200 <= result.status < 300:
            raise FetchError(f"{url}: HTTP {result.status}", reason=f"http_{result.status}", retryable=False)
        return result.body, result.content_type or None

    def input_dataset(self) -> tuple[str, str]:
        parts = urlsplit(self.options.seeds[0])
        return (f"{parts.scheme}://{parts.netloc}", parts.path or "/")
