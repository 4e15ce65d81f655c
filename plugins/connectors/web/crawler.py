"""The breadth-first crawl behind ``WebConnector.discover``.

Composes the small parts: frontier (``urls``), robots.txt and sitemaps (``site_files``),
``politeness``, ``fetcher``, ``links`` and the link ``cache``. Produces one Change per page:

- 200 -> bytes staged, NEW / CHANGED (the engine hashes the extracted text to decide whether
  anything is re-indexed; raw bytes are never compared here),
- 304 -> UNCHANGED, outlinks taken from the link cache so the crawl still covers the site,
- 404 / 410 of a known page -> DELETED,
- 5xx, timeouts, 429 -> nothing deleted; the key stays alive and the page's cached links
  keep the crawl going. A crawl that could not expand such a page is not *complete*.
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from include.contract import Change, ChangeKind, VersionEvidence
from include.staging.handoffs import HandoffSpool, Spill
from plugins.connectors.web.cache import CachedPage, LinkCache
from plugins.connectors.web.fetcher import Fetcher, FetchResult
from plugins.connectors.web.links import extract_links
from plugins.connectors.web.options import WebOptions
from plugins.connectors.web.render import RenderedPage, RenderStep
from plugins.connectors.web.site_files import SiteFiles
from plugins.connectors.web.urls import Scope, TrapGuard, canonicalize, file_name_for
from plugins.connectors.web.window import ModifiedWindow

__all__ = ["CrawlResult", "Crawler"]

log = logging.getLogger("tributary.web")

_HTML_TYPES = ("text/html", "application/xhtml+xml")
# Extensions never worth a request: the body could not be indexed anyway.
_SKIP_EXTENSIONS = frozenset(
    [
        "png",
        "jpg",
        "jpeg",
        "gif",
        "webp",
        "svg",
        "ico",
        "bmp",
        "tif",
        "tiff",
        "avif",
        "css",
        "js",
        "mjs",
        "map",
        "woff",
        "woff2",
        "ttf",
        "otf",
        "eot",
        "mp3",
        "mp4",
        "m4a",
        "wav",
        "ogg",
        "webm",
        "avi",
        "mov",
        "mkv",
        "flac",
        "zip",
        "gz",
        "tgz",
        "bz2",
        "xz",
        "7z",
        "rar",
        "tar",
        "exe",
        "dmg",
        "iso",
        "apk",
        "bin",
        "deb",
        "rpm",
        "jar",
        "whl",
    ]
)
_DOC_EXTENSIONS = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "csv": "text/csv",
    "md": "text/markdown",
    "markdown": "text/markdown",
    "txt": "text/plain",
    "html": "text/html",
    "htm": "text/html",
}
# Failures that say nothing about whether the page still exists: never a deletion, and the
# page's links must come from the cache for the crawl to stay complete.
_TRANSIENT = ("timeout", "connect", "network", "dns", "http_429", "http_5")
# A page's redirect into another partition's hosts: handed off like a link, not refused.
_REDIRECT_HANDED_OFF = "redirect_other_partition"


def _extension(url: str) -> str:
    return posixpath.splitext(urlsplit(url).path)[1].lstrip(".").lower()


def _media(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower()


def _is_transient(kind: str) -> bool:
    return kind.startswith(_TRANSIENT)


def _navigations(rendered: RenderedPage) -> list[str]:
    found = []
    for target in rendered.navigations:
        try:
            found.append(canonicalize(target))
        except ValueError:
            continue
    return found


def _render_facts(rendered: RenderedPage) -> dict[str, Any]:
    """Per-item metadata of a rendered page (carried to the document and its lineage)."""
    return {
        "rendered": True,
        "render_ms": rendered.ms,
        "render_requests": rendered.requests,
        "render_refused": dict(rendered.refused),
        "rendered_url": rendered.final_url,
    }


@dataclass(slots=True)
class CrawlResult:
    changes: list[Change] = field(default_factory=list)
    all_keys: set[str] = field(default_factory=set)
    complete: bool = True
    stats: dict[str, Any] = field(default_factory=dict)


class Crawler:
    def __init__(
        self,
        options: WebOptions,
        fetcher: Fetcher,
        cache: LinkCache,
        known: Mapping[str, VersionEvidence],
        stage: Callable[[str, bytes, str], str] | None,
        max_items: int | None = None,
        whole: Scope | None = None,
        render: RenderStep | None = None,
        spill: Spill | None = None,
        window: ModifiedWindow | None = None,
        progress: Callable[[Mapping[str, int]], None] | None = None,
        prepare: Callable[[Change], None] | None = None,
    ) -> None:
        """``whole``: the source's scope when this crawl is one partition of it (``options``
        then hold that partition's seeds): links and redirects into the rest of it are handed
        off (every one: ``spill`` stages the list past a bound), not followed."""
        self.o = options
        self.whole = whole
        self.window = window or ModifiedWindow()  # a backfill's [start, end), judged by Last-Modified
        self.render = render  # None: render off, pages staged as fetched
        self.progress = progress  # running counts for a watching terminal (None: nobody watches)
        self.prepare = prepare  # each staged page's change, as soon as it is final
        self.handoffs = HandoffSpool(spill)
        self.fetcher = fetcher
        self.cache = cache
        self.known = known
        self.stage = stage
        self.max_pages = min(options.max_pages, max_items) if max_items else options.max_pages
        self.scope = Scope(options.seeds, options.scope, options.include, options.exclude)
        self.traps = TrapGuard(
            max_url_length=options.max_url_length,
            max_query_params=options.max_query_params,
            max_segment_repeats=options.max_segment_repeats,
        )
        self.accepted = {t.lower() for t in options.content_types}
        self.result = CrawlResult()
        self.counts: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.site = SiteFiles(options, fetcher, self.scope, self._account, self.counts, self.errors)
        self.robots = self.site.robots
        # per-item records the engine turns into lineage: failed (retried, quarantined after N
        # runs) for transient errors, skipped for deliberate refusals
        self.failed: list[dict[str, Any]] = []
        self.refused: list[dict[str, Any]] = []
        self._queue: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
        self._seen: set[str] = set()  # URLs queued or fetched
        self._emitted: set[str] = set()  # item keys reported as documents
        self._processed = 0
        self._completed = 0
        self._truncated = False
        self._unexpanded = 0

    def delay_for(self, host: str) -> float:
        return self.site.delay_for(host)

    # ------------------------------------------------------------------ frontier

    def _scope_refusal(self, url: str) -> str | None:
        # "redirect_out_of_scope", or "redirect_downgrade": https seed, plain http target.
        reason = self.scope.refusal(url)
        return f"redirect_{reason}" if reason else None

    def _hop_refusal(self, url: str) -> str | None:
        """Redirect targets of pages must be in scope and allowed by the target host's
        robots.txt (when already loaded: same-host redirects, the common case)."""
        refusal = self._scope_refusal(url)
        if refusal is None and self.o.respect_robots:
            robots = self.robots.cached_for(url)
            if robots is not None and not robots.allows(url, self.o.robots_agent):
                return "redirect_disallowed_by_robots"
        return refusal

    def _page_hop_refusal(self, url: str) -> str | None:
        """A page's redirect target on another partition's host is that partition's page:
        handed off like a link (refusing it as out of scope lost the page, issue 32)."""
        return _REDIRECT_HANDED_OFF if self._hand_off(url) else self._hop_refusal(url)

    def _hand_off(self, url: str) -> bool:
        """Is ``url`` another partition's? Then it is recorded, by item key, for the merge to
        check that its partition reached it."""
        whole = self.whole
        if whole is None or self.scope.refusal(url) != "out_of_scope":
            return False
        if not (whole.in_scope(url) and whole.allowed(url)):
            return False
        self.handoffs.add(self._key_for(url))
        return True

    def _skip_reason(self, url: str, depth: int) -> str | None:
        if self._hand_off(url):
            return "skipped_other_partition"
        scope_refusal = self.scope.refusal(url)
        if scope_refusal:
            return "skipped_downgrade" if scope_refusal == "downgrade" else "skipped_scope"
        if not self.scope.allowed(url):
            return "skipped_pattern"
        if _extension(url) in _SKIP_EXTENSIONS:
            return "skipped_type"
        if self.traps.reason(url):
            return "skipped_trap"
        if self.o.max_depth is not None and depth > self.o.max_depth:
            return "skipped_depth"
        return None

    def _enqueue(self, url: str, depth: int, *, seed: bool = False) -> None:
        if url in self._seen:
            return
        reason = None if seed else self._skip_reason(url, depth)
        if reason:
            self.counts[reason] += 1
            return
        self._seen.add(url)
        self._queue.put_nowait((url, depth))

    async def _seed_from_sitemaps(self) -> None:
        async for link in self.site.sitemap_pages(self._scope_refusal):
            self._enqueue(link, 0)

    # ------------------------------------------------------------------ the crawl

    async def run(self) -> CrawlResult:
        if self.render is not None:  # directories earlier crawls had to render (render: auto)
            self.render.prefixes |= self.cache.render_prefixes()
        for seed in self.o.seeds:
            self._enqueue(seed, 0, seed=True)
        if self.o.use_sitemaps:
            await self._seed_from_sitemaps()
        workers = [asyncio.create_task(self._worker()) for _ in range(self.o.concurrency)]
        try:
            await self._queue.join()
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            self.cache.flush()
            if self.render is not None and self.render.prefixes:
                self.cache.remember_render_prefixes(self.render.prefixes)
        self.result.complete = not self._truncated and self._unexpanded == 0
        if self.result.complete and self.o.max_depth is None and not self.o.include and not self.o.exclude:
            # Forget pages that fell out of the site (only when this crawl saw all of it; a
            # partition's crawl saw its own hosts only).
            owned = self.scope.in_scope if self.whole is not None else None
            self.counts["cache_dropped"] = self.cache.retain(self._seen, owned)
        self.result.stats = self._stats()
        log.info("crawl finished: %s", self._summary_line())
        return self.result

    async def _worker(self) -> None:
        while True:
            url, depth = await self._queue.get()
            try:
                await self._process(url, depth)
            except Exception:  # one page must never end the crawl; count it and go on
                log.exception("crawling %s failed", url)
                self.errors["internal"] += 1
                self._unexpanded += 1
            finally:
                self._queue.task_done()

    def _validators(self, url: str) -> dict[str, str]:
        cached = self.cache.get(url)
        evidence = self.known.get(cached.item_key if cached else url)
        headers: dict[str, str] = {}
        if evidence is not None:
            if evidence.etag:
                headers["If-None-Match"] = evidence.etag
            if evidence.last_modified:
                headers["If-Modified-Since"] = evidence.last_modified
        return headers

    def _accept(self, url: str, content_type: str) -> bool:
        media = _media(content_type)
        if media in ("", "application/octet-stream", "binary/octet-stream"):
            return _extension(url) in _DOC_EXTENSIONS or _extension(url) == ""
        return media in self.accepted

    async def _process(self, url: str, depth: int) -> None:
        if self.o.respect_robots:
            robots = await self.robots.for_url(url)
            if robots.status == "unreachable":
                # Cannot know what is allowed: fetch nothing, delete nothing.
                self.counts["skipped_robots_unreachable"] += 1
                self._keep_alive(url)
                self._unexpanded += 1
                return
            if not robots.allows(url, self.o.robots_agent):
                self.counts["skipped_robots"] += 1
                return
        if url in self._emitted:
            # Another URL already delivered this page under its declared canonical address.
            self.counts["duplicate_canonical"] += 1
            return
        if self._processed >= self.max_pages:
            self._truncated = True
            return
        self._processed += 1
        result = await self.fetcher.fetch(
            url, conditional=self._validators, hop_allowed=self._page_hop_refusal, accept=self._accept
        )
        self._account(result)
        final = result.url
        if final != url:
            if final in self._seen:
                self.counts["duplicate_redirect"] += 1
                return
            self._seen.add(final)
        if result.error:
            await self._on_error(url, final, result, depth)
        elif result.skipped:
            self.counts[f"skipped_{result.skipped}"] += 1
        elif result.status == 304:
            await self._on_not_modified(final, result, depth)
        elif 200 <= result.status < 300:
            await self._on_fetched(final, result, depth)
        elif result.status in (404, 410):
            self._on_gone(final, result)
        else:
            self.errors[f"http_{result.status}"] += 1
            self.failed.append(
                {
                    "item_key": self._key_for(final),
                    "reason": f"fetch:http_{result.status}",
                    "error": f"HTTP {result.status}",
                }
            )
            self._keep_alive(final)
        self._completed += 1  # counted on completion: workers finish out of order
        if self.progress is not None:
            c = self.counts
            self.progress({"pages": self._completed, "fetched": c["fetched"], "bytes": c["bytes"]})
        if self._completed % self.o.log_every == 0:
            log.info("crawl progress: %s", self._summary_line())

    def _account(self, result: FetchResult) -> None:
        self.counts["bytes"] += result.wire_bytes
        self.counts["requests"] += result.attempts
        self.counts["redirects"] += len(result.redirects)

    def _key_for(self, url: str) -> str:
        cached = self.cache.get(url)
        return cached.item_key if cached else url

    def _keep_alive(self, url: str) -> None:
        key = self._key_for(url)
        if key in self.known:
            self.result.all_keys.add(key)

    async def _on_error(self, url: str, final: str, result: FetchResult, depth: int) -> None:
        kind = result.error or "error"
        if kind == _REDIRECT_HANDED_OFF:
            self.counts[kind] += 1  # neither an error nor a skip: the target's partition owns it
            return
        self.errors[kind] += 1
        log.info("fetch %s failed (%s): %s", url, kind, result.message)
        record = {"item_key": self._key_for(final), "reason": f"fetch:{kind}", "error": str(result.message or kind)}
        if not _is_transient(kind):
            self.refused.append(record)
            return  # refused on purpose (blocked address, out of scope, too large ...)
        self.failed.append(record)
        self._keep_transient_failure(final, depth)

    def _keep_transient_failure(self, url: str, depth: int) -> None:
        """A page that failed for now (it may well still exist): kept alive, and the crawl goes
        on through its cached links; without them the listing cannot be complete."""
        self._keep_alive(url)
        cached = self.cache.get(url)
        if cached is None:
            self._unexpanded += 1
            return
        self._follow(cached.links, depth)

    async def _on_not_modified(self, url: str, result: FetchResult, depth: int) -> None:
        cached = self.cache.get(url)
        key = cached.item_key if cached else url
        evidence = self.known.get(key)
        if cached is None or evidence is None or not cached.matches(evidence.etag, evidence.last_modified):
            # 304 but we do not hold the links of that version: read the page again.
            self.counts["refetched_for_links"] += 1
            again = await self.fetcher.fetch(url, hop_allowed=self._page_hop_refusal, accept=self._accept)
            self._account(again)
            if again.error:
                await self._on_error(url, again.url, again, depth)
            elif again.skipped:
                self.counts[f"skipped_{again.skipped}"] += 1
            elif 200 <= again.status < 300:
                await self._on_fetched(again.url, again, depth)
            elif again.status in (404, 410):
                self._on_gone(again.url, again)
            else:
                self.errors[f"http_{again.status}"] += 1
                self._keep_alive(url)
            return
        self.counts["not_modified"] += 1
        if key in self._emitted:
            self.counts["duplicate_canonical"] += 1
        elif not cached.noindex:
            self._emitted.add(key)
            self.result.all_keys.add(key)
            self.result.changes.append(
                Change(
                    item_key=key,
                    kind=ChangeKind.UNCHANGED,
                    version=evidence,
                    url=url,
                    metadata={"content_type": cached.content_type, "status": 304, "depth": depth},
                )
            )
        self._follow(cached.links, depth)

    async def _on_fetched(self, url: str, result: FetchResult, depth: int) -> None:
        """A 2xx page: rendered first when the render step wants it (see ``render/step.py``)."""
        outcome = await self.render.apply(url, result.body, result.content_type) if self.render else None
        if outcome is None:
            self._on_page(url, result, depth)
            return
        if outcome.failure is not None:
            kind, message = outcome.failure
            reason = kind if kind == "render_unavailable" else f"render:{kind.removeprefix('render_')}"
            record = {"item_key": self._key_for(url), "reason": reason, "error": message}
            if outcome.refused:  # this machine cannot render, or the page's DOM is over the cap
                self.counts[f"skipped_{kind}"] += 1
                self.refused.append(record)
                return
            self.errors[kind] += 1
            self.failed.append(record)  # a hung or crashed page: retried next run
            self._keep_transient_failure(url, depth)
            return
        assert outcome.page is not None
        headers = {**result.headers, "content-type": "text/html; charset=utf-8"}  # the DOM, serialised
        self._on_page(url, replace(result, body=outcome.page.html, headers=headers), depth, outcome.page)

    def _on_page(self, url: str, result: FetchResult, depth: int, rendered: RenderedPage | None = None) -> None:
        content_type = result.content_type
        media = _media(content_type) or _DOC_EXTENSIONS.get(_extension(url), "")
        self.counts["fetched"] += 1
        self.counts["bytes_body"] += len(result.body)
        key = url
        links: list[str] = []
        noindex = nofollow = False
        title = None
        if media in _HTML_TYPES:
            page = extract_links(result.body, url, content_type, result.headers.get("x-robots-tag"))
            links, noindex, nofollow, title = page.links, page.noindex, page.nofollow, page.title
            if rendered is not None:  # where the page's script tried to go: pages of the site
                links = list(dict.fromkeys([*links, *_navigations(rendered)]))
            if page.canonical and page.canonical != url and self.scope.in_scope(page.canonical):
                # The page names its own canonical address: file it there, and do not fetch
                # that address again as a separate document.
                key = page.canonical
                self._seen.add(page.canonical)
        etag = result.headers.get("etag")
        last_modified = result.headers.get("last-modified")
        self.cache.put(CachedPage(url, key, etag, last_modified, content_type, [] if nofollow else links, noindex))
        if not nofollow:
            self._follow(links, depth)
        if noindex:
            self.counts["skipped_noindex"] += 1
            return
        if key in self._emitted:
            self.counts["duplicate_canonical"] += 1
            return
        self._emitted.add(key)
        self.result.all_keys.add(key)  # listed even when outside the window: it exists
        if not self.window.admits(last_modified, self.counts):
            return
        stored_type = content_type or media
        # The name fetch gives the document (same key, same extension): one staged file.
        staged = self.stage(key, result.body, file_name_for(url, stored_type)) if self.stage else None
        self.result.changes.append(
            Change(
                item_key=key,
                kind=ChangeKind.CHANGED if key in self.known else ChangeKind.NEW,
                version=VersionEvidence(etag=etag, last_modified=last_modified),
                url=url,
                title=title,
                staged_path=staged,
                metadata={
                    "content_type": stored_type,
                    "status": result.status,
                    "depth": depth,
                    "requested_url": result.requested,
                    "size": len(result.body),
                    **(_render_facts(rendered) if rendered is not None else {}),
                },
            )
        )
        if staged is not None and self.prepare is not None:
            self.prepare(self.result.changes[-1])

    def _on_gone(self, url: str, result: FetchResult) -> None:
        key = self._key_for(url)
        self.cache.forget(url)
        if key in self.known:
            self.counts["gone"] += 1
            self.result.changes.append(
                Change(item_key=key, kind=ChangeKind.DELETED, url=url, reason=f"http_{result.status}")
            )
        else:
            self.errors[f"http_{result.status}"] += 1

    def _follow(self, links: list[str], depth: int) -> None:
        for link in links:
            self._enqueue(link, depth + 1)

    # ------------------------------------------------------------------ reporting

    def _stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = {
            "pages": self._processed,
            "fetched": self.counts["fetched"],
            "not_modified": self.counts["not_modified"],
            "gone": self.counts["gone"],
            "bytes": self.counts["bytes"],
            "requests": self.counts["requests"],
            "retries": self.fetcher.retries,
            "truncated": self._truncated,
            "unexpanded": self._unexpanded,
            "errors": dict(self.errors),
            "failed": self.failed,
            "skipped": self.refused,
        }
        for name, value in self.counts.items():
            stats.setdefault(name, value)
        if self.render is not None:
            stats["render"] = dict(self.render.counts)
        if self.whole is not None:
            stats.update(self.handoffs.to_stats())
        stats["robots"] = {origin: entry.status for origin, entry in self.robots.loaded().items()}
        # named counters of the shared retry policy and host limiter: retry/web/*, ratelimit/web/*
        stats["limits"] = {**self.fetcher.retry_stats, **self.fetcher.politeness.limiter.stats}
        return stats

    def _summary_line(self) -> str:
        c = self.counts
        skipped = {k: v for k, v in c.items() if k.startswith("skipped_")}
        return (
            f"pages={self._processed} fetched={c['fetched']} not_modified={c['not_modified']} "
            f"gone={c['gone']} skipped={skipped} errors={dict(self.errors)} bytes={c['bytes']}"
        )
