"""Options of a web source (``SourceConfig.options`` for ``kind: web``)."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, field_validator

from include.config import EngineOptions, url_secret
from plugins.connectors.web.urls import Scope, canonicalize

__all__ = ["DEFAULT_CONTENT_TYPES", "DEFAULT_USER_AGENT", "WebOptions", "canonical_page_url"]

DEFAULT_USER_AGENT = "Tributary/0.1 (knowledge-base sync crawler; operators set options.user_agent with a contact URL)"

# What the parser registry can turn into text. Anything else is skipped without downloading
# the body (images, archives, media).
DEFAULT_CONTENT_TYPES = [
    "text/html",
    "application/xhtml+xml",
    "text/plain",
    "text/markdown",
    "text/x-markdown",
    "text/csv",
    "application/pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
]


def canonical_page_url(url: str) -> str:
    """The canonical form of a page URL that may become an item key (a seed, an ``only_keys``
    entry): refused when it carries a credential, since item keys are shown in lineage, the UI
    and logs, and canonicalisation would keep a token query parameter (or silently drop userinfo).
    """
    secret = url_secret(url)
    if secret is None and urlsplit(url.strip()).username is not None:
        secret = "a user name (userinfo)"
    if secret is not None:
        raise ValueError(
            f"a page URL with {secret} is refused: it would become an item key shown in lineage and "
            "the UI; put the credential in the Airflow Connection named by conn_id (login/password for "
            'basic auth, extra {"headers": {...}} or {"cookies": {...}})'
        )
    return canonicalize(url)


class WebOptions(EngineOptions):
    """``options`` of a ``kind: web`` source.

    Scope: ``seeds`` (start URLs), ``scope`` (``host``: the seeds' hosts; ``domain``: their
    registrable domains; an https seed keeps them on https, an http one may be upgraded),
    ``include`` / ``exclude`` (regexes on canonical URLs),
    ``max_pages`` (a crawl cut by it is *incomplete* and deletes nothing), ``max_depth``
    (link hops from a seed or sitemap entry), ``use_sitemaps``, ``respect_robots``.
    Politeness: ``delay_seconds`` between the end of one request to a host and the start of
    the next (raised by robots.txt ``Crawl-delay``; shared through Redis when configured),
    ``concurrency`` (pages in flight, across hosts). Fetching: ``timeout_seconds`` (per
    network operation), ``total_timeout_seconds`` (per URL, retries included), ``max_body_bytes``,
    ``max_redirects``, ``retries`` / ``backoff_seconds``, ``user_agent``, ``headers``
    (non-secret; secrets belong in the Airflow Connection), ``content_types``.
    Safety: ``allow_private_networks`` / ``allowlist`` (IPs, CIDRs or host names the SSRF
    guard lets through), trap guards ``max_url_length`` / ``max_query_params`` /
    ``max_segment_repeats``. Rendering (``render: off|auto|always``, see ``render/``):
    ``render_timeout_seconds``, ``render_max_requests``, ``render_max_bytes`` (per page),
    ``render_recycle_pages`` (pages per browser), ``render_max_memory_mb`` (per renderer's
    JavaScript heap), ``render_concurrency`` (pages rendered at once). ``log_every``: a progress line every N pages.
    Parallel hosts: ``host_parallelism`` (default 4; 1 disables) splits a source whose seeds span
    several crawl-scope units (hosts, or registrable domains with ``scope: domain``) into at most
    that many partitions, each crawled by its own task and never splitting a unit; ``max_pages``
    then bounds each partition, and a link from one partition's host to another's is not
    followed (the other partition crawls from its own seeds). Plus the engine's
    options (:class:`~include.config.EngineOptions`: ``quarantine_after``, ...).
    """

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    seeds: list[str] = Field(min_length=1)
    scope: Literal["host", "domain"] = "host"
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    max_pages: int = Field(default=1000, ge=1)
    max_depth: int | None = Field(default=None, ge=0)
    delay_seconds: float = Field(default=1.0, ge=0)
    concurrency: int = Field(default=4, ge=1, le=64)
    timeout_seconds: float = Field(default=30.0, gt=0)
    total_timeout_seconds: float = Field(default=120.0, gt=0)
    max_body_bytes: int = Field(default=20 * 1024 * 1024, ge=1024)
    max_redirects: int = Field(default=5, ge=0, le=20)
    retries: int = Field(default=3, ge=0, le=10)
    backoff_seconds: float = Field(default=1.0, ge=0)
    user_agent: str = DEFAULT_USER_AGENT
    headers: dict[str, str] = Field(default_factory=dict)  # non-secret; secrets go in the Connection
    allow_private_networks: bool = False
    allowlist: list[str] = Field(default_factory=list)
    use_sitemaps: bool = True
    respect_robots: bool = True
    content_types: list[str] = Field(default_factory=lambda: list(DEFAULT_CONTENT_TYPES))
    max_url_length: int = Field(default=2048, ge=64)
    max_query_params: int = Field(default=12, ge=0)
    max_segment_repeats: int = Field(default=3, ge=1)
    log_every: int = Field(default=100, ge=1)
    host_parallelism: int = Field(default=4, ge=1, le=64)
    # JavaScript pages (render/): off (the parser skips a "javascript shell"), auto (render those
    # shells, and pages under a directory where one was found), always (every HTML page)
    render: Literal["off", "auto", "always"] = "off"
    render_timeout_seconds: float = Field(default=30.0, gt=0)
    render_max_requests: int = Field(default=100, ge=0)
    render_max_bytes: int = Field(default=20 * 1024 * 1024, ge=1024)
    render_recycle_pages: int = Field(default=50, ge=1)
    render_max_memory_mb: int = Field(default=512, ge=64)
    render_concurrency: int = Field(default=2, ge=1, le=16)
    # Where the link cache lives; default $TRIBUTARY_HOME/web-cache/<source>.sqlite
    cache_path: str | None = None
    # Redis for shared politeness; default TRIBUTARY_REDIS_URL / the connector context's.
    # "" forces the in-process fallback.
    redis_url: str | None = None

    @field_validator("seeds")
    @classmethod
    def _canonical_seeds(cls, seeds: list[str]) -> list[str]:
        return [canonical_page_url(s) for s in seeds]

    @field_validator("window_overlap_minutes")
    @classmethod
    def _no_scheduled_windows(cls, minutes: float | None) -> float | None:
        # A crawl finds changes by its validators (ETag / Last-Modified, RFC 9110 s13); a scheduled
        # window would also drop a page edited with an older Last-Modified, run after run.
        if minutes is not None:
            raise ValueError(
                "a web source takes no window_overlap_minutes: every crawl checks every page's validators; "
                "windows apply to backfills and to runs given window_start/window_end"
            )
        return minutes

    def scope_units(self) -> list[str]:
        """The seeds' crawl-scope units (``host[:port]``, or registrable domain), in seed order."""
        scope = Scope(self.seeds, self.scope)
        return list(dict.fromkeys(scope.key(seed) for seed in self.seeds))

    def partitions(self) -> list[str]:
        """At most ``host_parallelism`` groups of scope units, each a comma-joined string
        (``"a.example:8001,b.example"``), units dealt round-robin in seed order; ``[]`` when
        there is at most one unit or parallelism is 1 (one crawl, as before)."""
        units = self.scope_units()
        count = min(self.host_parallelism, len(units))
        if count <= 1:
            return []
        return [",".join(units[i::count]) for i in range(count)]

    @property
    def robots_agent(self) -> str:
        """The product token robots.txt groups are matched against (``Tributary``)."""
        return self.user_agent.split("/")[0].split()[0]
