"""URL canonicalisation, crawl scope and trap guards.

Canonical URLs are the crawler's item keys: two spellings of one page must map to one key, or
the same page is indexed twice and "missing" pages are deleted by mistake.
"""

from __future__ import annotations

import posixpath
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import parse_qsl, quote, unquote, urlencode, urljoin, urlsplit, urlunsplit

__all__ = ["Scope", "TrapGuard", "canonicalize", "file_name_for", "host_key", "registrable_domain", "resolve_link"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Parameters that identify a click, not a page (Google/Facebook/Microsoft/Mailchimp...).
_TRACKING_PARAMS = frozenset(
    {"fbclid", "gclid", "dclid", "gbraid", "wbraid", "msclkid", "yclid", "mc_cid", "mc_eid", "_ga", "_gl", "igshid"}
)
_TRACKING_PREFIXES = ("utm_",)
# Characters left as they are in a path / query when re-quoting (RFC 3986 reserved + unreserved).
_PATH_SAFE = "/:@!$&'()*+,;=-._~"
_QUERY_SAFE = ":@!$'()*+,;/?-._~"


def _is_tracking(name: str) -> bool:
    lowered = name.lower()
    return lowered in _TRACKING_PARAMS or lowered.startswith(_TRACKING_PREFIXES)


def _requote(part: str, safe: str) -> str:
    # Unquote then quote again so %7e / ~ and %41 / A spell the same, keeping escaped
    # reserved characters escaped (unquoting %2F in a path would change its meaning).
    out = []
    for piece in re.split(r"(%2[fF]|%3[fF]|%23|%25)", part):
        if re.fullmatch(r"%2[fF]|%3[fF]|%23|%25", piece or "x"):
            out.append(piece.upper())
        else:
            out.append(quote(unquote(piece), safe=safe))
    return "".join(out)


@lru_cache(maxsize=131072)
def canonicalize(url: str) -> str:
    """Canonical form of an absolute http(s) URL.

    Lower-cases scheme and host, drops default ports, fragments, empty queries and tracking
    parameters, sorts the remaining query parameters and normalises percent-escapes. Raises
    ValueError for anything that is not an absolute http(s) URL.
    """
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError(f"not an http(s) URL: {url!r}")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise ValueError(f"URL without host: {url!r}")
    try:
        host = host.encode("idna").decode("ascii") if not host.isascii() else host.lower()
    except UnicodeError as exc:
        raise ValueError(f"bad host in {url!r}") from exc
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"bad port in {url!r}") from exc
    netloc = host if port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    path = _requote(parts.path or "/", _PATH_SAFE)
    path = _remove_dot_segments(path)
    pairs = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if not _is_tracking(k)]
    pairs.sort()
    query = urlencode(pairs, quote_via=quote, safe=_QUERY_SAFE)
    return urlunsplit((scheme, netloc, path, query, ""))


def _remove_dot_segments(path: str) -> str:
    out: list[str] = []
    segments = path.split("/")
    for i, seg in enumerate(segments):
        if seg == ".":
            if i == len(segments) - 1:
                out.append("")
            continue
        if seg == "..":
            if len(out) > 1:
                out.pop()
            if i == len(segments) - 1:
                out.append("")
            continue
        out.append(seg)
    result = "/".join(out)
    return result if result.startswith("/") else "/" + result


def resolve_link(base: str, href: str) -> str | None:
    """Absolute canonical URL of ``href`` found on ``base``, or None for non-web links."""
    href = href.strip()
    if not href or href[0] == "#":
        return None
    # The fragment never matters; dropping it first lets "a.html#x" and "a.html#y" share the
    # canonicalisation cache (pages repeat the same navigation links thousands of times).
    href = href.split("#", 1)[0]
    colon = href.find(":")
    if colon > 0 and "/" not in href[:colon]:
        if href[:colon].lower() not in _DEFAULT_PORTS:
            return None  # mailto:, javascript:, tel:, data: ...
        absolute = href
    elif href.startswith("/") and not href.startswith("//"):
        parts = urlsplit(base)
        absolute = f"{parts.scheme}://{parts.netloc}{href}"
    else:
        absolute = urljoin(base, href) if href else base
    try:
        return canonicalize(absolute)
    except ValueError:
        return None


def host_key(url: str) -> str:
    """``host[:port]`` of a canonical URL: the unit of politeness and robots.txt."""
    return urlsplit(url).netloc


@lru_cache(maxsize=1)
def _psl():  # type: ignore[no-untyped-def]
    # publicsuffixlist ships the list inside the wheel: no download at run time.
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


def registrable_domain(host: str) -> str:
    """eTLD+1 of ``host`` (``docs.example.co.uk`` -> ``example.co.uk``); IPs map to themselves."""
    if re.fullmatch(r"[\d.]+", host) or ":" in host:  # IPv4 / IPv6 literal
        return host
    return _psl().privatesuffix(host) or host


@dataclass(slots=True)
class Scope:
    """Which URLs belong to the source: same host (default) or same registrable domain of any
    seed, then include / exclude regular expressions on the canonical URL.

    The scheme counts too. An https seed makes only https in scope on its host (or domain): a
    page or redirect that sends the crawl to ``http://`` on the same host is a downgrade, read
    and possibly altered by anyone on the path, so it is refused (RFC 6454: another scheme is
    another origin). An upgrade is always in scope: an http seed's host over https is the same
    site made safer (the common ``http://`` -> ``https://`` redirect). ``CredentialScope``
    builds on this rule, so the pages crawled and the requests given credentials cannot drift.
    """

    seeds: list[str]
    mode: str = "host"
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    # scope key (netloc or registrable domain) -> does a seed there use plain http?
    _plain: dict[str, bool] = field(init=False, default_factory=dict)
    _include: list[re.Pattern[str]] = field(init=False, default_factory=list)
    _exclude: list[re.Pattern[str]] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        if self.mode not in ("host", "domain"):
            raise ValueError(f"scope must be 'host' or 'domain', not {self.mode!r}")
        for seed in self.seeds:
            parts = urlsplit(seed)
            key = self.key(seed)
            self._plain[key] = self._plain.get(key, False) or parts.scheme.lower() == "http"
        self._include = [re.compile(p) for p in self.include]
        self._exclude = [re.compile(p) for p in self.exclude]

    def key(self, url: str) -> str:
        """What ``url`` (canonical) is matched on: ``host[:port]``, or the registrable domain."""
        parts = urlsplit(url)
        if self.mode == "host":
            return parts.netloc
        return registrable_domain(parts.hostname or "")

    def refusal(self, url: str) -> str | None:
        """Why ``url`` (canonical) is not the source's: ``out_of_scope`` (another host or
        domain), ``downgrade`` (plain http where the seeds are https), or None."""
        plain = self._plain.get(self.key(url))
        if plain is None:
            return "out_of_scope"
        if not plain and urlsplit(url).scheme != "https":
            return "downgrade"
        return None

    def in_scope(self, url: str) -> bool:
        """Is ``url`` (canonical) on the source's hosts, over an admitted scheme? Patterns are
        checked by ``allowed``."""
        return self.refusal(url) is None

    def allowed(self, url: str) -> bool:
        if self._include and not any(p.search(url) for p in self._include):
            return False
        return not any(p.search(url) for p in self._exclude)


@dataclass(frozen=True, slots=True)
class TrapGuard:
    """Cheap structural checks against infinite URL spaces (session ids, calendars, relative
    link loops like ``a/b/a/b/...``). Depth and page limits catch what gets past these."""

    max_url_length: int = 2048
    max_query_params: int = 12
    max_segment_repeats: int = 3
    max_path_segments: int = 32

    def reason(self, url: str) -> str | None:
        """Why ``url`` looks like a trap, or None."""
        if len(url) > self.max_url_length:
            return "url_too_long"
        parts = urlsplit(url)
        if parts.query and len(parse_qsl(parts.query, keep_blank_values=True)) > self.max_query_params:
            return "too_many_query_params"
        segments = [s for s in parts.path.split("/") if s]
        if len(segments) > self.max_path_segments:
            return "path_too_deep"
        if segments and Counter(segments).most_common(1)[0][1] > self.max_segment_repeats:
            return "repeated_path_segments"
        return None


_EXTENSION_FOR = {
    "text/html": ".html",
    "application/xhtml+xml": ".html",
    "text/plain": ".txt",
    "text/markdown": ".md",
    "text/csv": ".csv",
    "application/pdf": ".pdf",
}


def file_name_for(url: str, content_type: str | None) -> str:
    """A file name for the parser registry: the URL's last path segment, or ``index.html``."""
    name = unquote(posixpath.basename(urlsplit(url).path.rstrip("/") if urlsplit(url).path != "/" else ""))
    media = (content_type or "").split(";")[0].strip().lower()
    if not name:
        return "index" + _EXTENSION_FOR.get(media, ".html")
    if "." not in name and media in _EXTENSION_FOR:
        name += _EXTENSION_FOR[media]
    return name
