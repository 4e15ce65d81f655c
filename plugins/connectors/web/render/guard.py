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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

__all__ = ["SKIPPED_RESOURCE_TYPES", "Check", "PageBudget", "RequestGuard"]

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


# (url) -> a refusal reason or None. The crawler's own rules, handed in by
# ``plugins/connectors/web/rendering.py`` (this package imports nothing of the crawler's).
Check = Callable[[str], Awaitable[str | None]]


@dataclass(slots=True)
class RequestGuard:
    address_refusal: Check  # the SSRF guard: "blocked_address", "dns"
    site_refusal: Check  # scope and robots.txt: "out_of_scope", "downgrade", "robots", "bad_url"

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
        return await self.address_refusal(url) or await self.site_refusal(url)
