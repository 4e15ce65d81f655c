"""Which of a rendered page's requests may go out: the crawler's own rules, per request.

The browser itself never connects anywhere (see ``browser.py``): the renderer hands each request
to :meth:`RequestGuard.refusal` and, when allowed, fetches it with the crawler's ``Fetcher`` (the
same SSRF check and address pinning, credentials only to the source's origins, politeness slot,
decoded-size cap). Checked here, before any byte is sent:

- only ``GET`` of ``http(s)``: a crawler reads, it never submits a form or calls an API that
  changes state;
- resource types the text does not need (images, fonts, media, style sheets) are not fetched;
- the address guard (``ssrf.AddressGuard``: 10.0.0.1, 169.254.169.254 ... are refused);
- the crawl scope (hosts and scheme; include/exclude patterns choose pages, not a page's
  scripts and data, so they are not applied; the allowlist is the SSRF guard's);
- robots.txt of the target host;
- the page's budgets: request count and response bytes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from plugins.connectors.web.robots import RobotsCache
from plugins.connectors.web.ssrf import AddressGuard, BlockedAddress
from plugins.connectors.web.urls import Scope, canonicalize

__all__ = ["SKIPPED_RESOURCE_TYPES", "PageBudget", "RequestGuard"]

# Not needed for the page's text: never fetched (counted as refused "resource_type").
SKIPPED_RESOURCE_TYPES = frozenset({"image", "media", "font", "stylesheet", "texttrack", "manifest"})
_NEVER = frozenset({"websocket", "eventsource", "ping", "beacon", "cspreport"})


@dataclass(slots=True)
class PageBudget:
    """What one page may still spend; ``refused`` counts every refusal by reason."""

    max_requests: int
    max_bytes: int
    requests: int = 0
    bytes: int = 0
    refused: Counter[str] = field(default_factory=Counter)

    def refuse(self, reason: str) -> str:
        self.refused[reason] += 1
        return reason


@dataclass(slots=True)
class RequestGuard:
    guard: AddressGuard
    scope: Scope
    robots: RobotsCache | None
    agent: str

    async def refusal(self, url: str, method: str, resource_type: str, budget: PageBudget) -> str | None:
        """The reason to refuse this request (already counted in ``budget``), or None."""
        reason = await self._reason(url, method, resource_type, budget)
        if reason:
            return budget.refuse(reason)
        budget.requests += 1
        return None

    async def _reason(self, url: str, method: str, resource_type: str, budget: PageBudget) -> str | None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            return "scheme"
        if method.upper() not in ("GET", "HEAD"):
            return "method"
        if resource_type in _NEVER:
            return resource_type
        if resource_type in SKIPPED_RESOURCE_TYPES:
            return "resource_type"
        if budget.requests >= budget.max_requests:
            return "max_requests"
        if budget.bytes >= budget.max_bytes:
            return "max_bytes"
        try:
            await self.guard.resolve(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
        except BlockedAddress:
            return "blocked_address"
        except OSError:
            return "dns"
        return await self._site_rules(url)

    async def _site_rules(self, url: str) -> str | None:
        try:
            canonical = canonicalize(url)
        except ValueError:
            return "bad_url"
        scope_refusal = self.scope.refusal(canonical)
        if scope_refusal:
            return scope_refusal  # "out_of_scope" or "downgrade"
        if self.robots is not None:
            rules = await self.robots.for_url(canonical)
            if not rules.allows(canonical, self.agent):
                return "robots"
        return None
