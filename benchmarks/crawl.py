"""Web crawl: Tributary vs Scrapy, whole processes as a user runs them, on documentation sites
served by nginx on 127.0.0.1 (Debian ``python3-doc`` and ``postgresql-doc-15``).

Every number is the wall time of one process, start-up and shutdown included, timed from
outside (``time.perf_counter()`` around ``subprocess.run``):

- Scrapy: ``scrapy runspider spider.py -O urls.jl -s ...`` (``benchmarks/_crawl_scrapy.py``),
  RFC 2616 HTTP cache on;
- Tributary crawl only: ``python -m plugins.engine.cli sync web:bench --dry-run`` (discovery
  downloads every page to find links and plans; nothing is parsed or indexed);
- Tributary full sync: ``cli sync web:bench`` (crawl, parse, chunk, index into the embedded
  SQLite index), fresh ``TRIBUTARY_HOME``;
- no-change resync: the same sync again on the same home; Scrapy again on its cache. Measured
  with nginx's default headers and with ``Cache-Control: no-cache`` (the same nginx, reloaded):
  with defaults RFC 2616 heuristics let Scrapy serve old files from its cache without asking.

Bytes are what nginx sent (its access log, headers included), per crawler by user agent. URL sets
are canonicalised in this process, the same way for both. ``--quick``: the Python tutorial and
HOWTOs only (an include pattern for both crawlers).

    .venv-bench/bin/python -m benchmarks crawl [--quick] [--no-readme]
"""

from __future__ import annotations

import compileall
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from benchmarks._crawl_compare import Goal, agreement, judge_goals, relative_paths, settings_rows
from benchmarks._crawl_scrapy import USER_AGENT as SCRAPY_AGENT
from benchmarks._crawl_scrapy import ScrapyRun, run_scrapy, scrapy_settings
from benchmarks._crawl_tributary import SyncRun, run_items, run_sync, source_options, sources_yaml

CONCURRENCY = 8
QUICK_PATTERN = r"/(tutorial|howto)/"
TRIBUTARY_AGENT = "Tributary"  # prefix of the web source's default user agent
VARIANTS = (("nginx defaults", ""), ("Cache-Control: no-cache", 'add_header Cache-Control "no-cache";'))

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Corpus:
    name: str
    root: Path
    package: str  # the Debian package that installs it


CORPORA = (
    Corpus("Python docs", Path("/usr/share/doc/python3-doc/html"), "python3-doc"),
    Corpus("PostgreSQL 15 manual", Path("/usr/share/doc/postgresql-doc-15/html"), "postgresql-doc-15"),
)


@dataclass(frozen=True, slots=True)
class Traffic:
    requests: int
    bytes_sent: int
    statuses: dict[int, int]


@dataclass(slots=True)
class Measured:
    """One process of one crawler, with what nginx saw of it."""

    run: str
    crawler: str
    command: str
    pages: int
    wall: float
    cpu: float
    traffic: Traffic
    first_bytes: int | None = None  # the first crawl's bytes this run is compared with
    load: float = 0.0  # 1-minute load average just before the process started

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.wall if self.wall else 0.0

    @property
    def share(self) -> float | None:
        return self.traffic.bytes_sent / self.first_bytes if self.first_bytes else None

    def row(self, corpus: str) -> dict[str, Any]:
        return {
            "corpus": corpus,
            "run": self.run,
            "crawler": self.crawler,
            "command": self.command,
            "pages": self.pages,
            "wall_s": round(self.wall, 2),
            "cpu_s": round(self.cpu, 2),
            "pages_per_s": round(self.pages_per_s, 1),
            "requests": self.traffic.requests,
            "server_bytes": self.traffic.bytes_sent,
            "bytes_vs_first": "" if self.share is None else f"{100 * self.share:.2f}%",
            "statuses": " ".join(f"{s}:{n}" for s, n in sorted(self.traffic.statuses.items())),
            "load_1m": round(self.load, 1),
        }


def _traffic(server: Any, agent_prefix: str) -> Traffic:
    entries = [e for e in server.access_log() if e.user_agent.startswith(agent_prefix)]
    statuses: dict[int, int] = {}
    for e in entries:
        statuses[e.status] = statuses.get(e.status, 0) + 1
    return Traffic(len(entries), sum(e.bytes_sent for e in entries), statuses)


def _observed(server: Any, agent_prefix: str, action: Callable[[], T]) -> tuple[T, Traffic]:
    server.clear_log()
    result = action()
    return result, _traffic(server, agent_prefix)


@contextmanager
def _nginx(root: Path, workdir: Path) -> Iterator[tuple[Any, Callable[[str], None]]]:
    """nginx serving ``root``, and a function that switches its response headers in place (same
    port, so the URLs, and with them Tributary's item keys, stay the same)."""
    import httpx

    from tests.web.nginx import nginx_binary, serve_nginx

    variant = workdir / "variant.conf"
    variant.parent.mkdir(parents=True, exist_ok=True)
    variant.write_text("")
    with serve_nginx(root, workdir, extra=f"include {variant};") as server:

        def switch(directives: str) -> None:
            variant.write_text(directives)
            conf = str(workdir / "nginx.conf")
            reload = [str(nginx_binary()), "-p", str(workdir), "-c", conf, "-s", "reload"]
            subprocess.run(reload, check=True, capture_output=True)
            wanted = "no-cache" if "no-cache" in directives else None
            deadline = time.monotonic() + 10
            while httpx.head(server.base + "/").headers.get("cache-control") != wanted:
                if time.monotonic() > deadline:
                    raise RuntimeError("nginx did not pick up the new headers")
                time.sleep(0.05)

        yield server, switch


@dataclass(slots=True)
class CorpusResult:
    measured: list[Measured] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)


class _Bench:
    """The runs of one corpus against one nginx; each method is one timed process."""

    def __init__(self, server: Any, work: Path, include: str) -> None:
        self.server, self.work, self.include = server, work, include
        work.mkdir(parents=True, exist_ok=True)
        self.sources = work / "sources.yaml"
        self.scrapy_runs = 0
        self.sources.write_text(sources_yaml(source_options(server.base, CONCURRENCY, include)), encoding="utf-8")

    def scrapy(self, run: str, cache: str, first_bytes: int | None = None) -> tuple[Measured, ScrapyRun]:
        self.scrapy_runs += 1
        workdir = self.work / f"scrapy-run-{self.scrapy_runs}"
        action = lambda: run_scrapy(workdir, self.work / cache, self.server.base, self.include, CONCURRENCY)  # noqa: E731
        load = os.getloadavg()[0]
        done, traffic = _observed(self.server, SCRAPY_AGENT, action)
        return Measured(
            run, "scrapy", "scrapy runspider", len(done.urls), done.wall, done.cpu, traffic, first_bytes, load
        ), done

    def sync(self, run: str, home: str, dry_run: bool, first_bytes: int | None = None) -> tuple[Measured, SyncRun]:
        action = lambda: run_sync(self.work / home, self.sources, dry_run=dry_run)  # noqa: E731
        load = os.getloadavg()[0]
        done, traffic = _observed(self.server, TRIBUTARY_AGENT, action)
        # a site's dead links make a run partial (its reasons say http_404): every page was synced
        if done.status != "success" and not (done.status == "partial" and _only_dead_links(done.counts)):
            raise RuntimeError(f"tributary {run}: run {done.run_id} ended {done.status}: {done.counts}")
        command = "cli sync --dry-run" if dry_run else "cli sync"
        pages = _sync_pages(done)
        return Measured(run, "tributary", command, pages, done.wall, done.cpu, traffic, first_bytes, load), done

    def urls_of(self, home: str, run_id: str) -> set[str]:
        items = run_items(self.work / home, self.sources, run_id)
        return {key for key, action in items.items() if action not in ("deleted", "skipped")}


def _only_dead_links(counts: dict[str, Any]) -> bool:
    """No item failed and every reason is a 404/410 of a link (the Python docs have two dead links,
    which Scrapy meets as well)."""
    reasons = counts.get("reasons") or {}
    return not counts.get("failed") and bool(reasons) and set(reasons) <= {"http_404", "http_410"}


def _sync_pages(done: SyncRun) -> int:
    """Pages the run covered: crawled for the first time (new), or confirmed on a resync."""
    c = done.counts
    if c.get("dry_run"):
        return int(c["would_add"] + c["would_update"] + c["unchanged"])
    return int(c["new"] + c["changed"] + c["unchanged"] + c["failed"])


def _bench_corpus(corpus: Corpus, work: Path, include: str) -> CorpusResult:
    from plugins.connectors.web.urls import canonicalize

    out = CorpusResult()
    with _nginx(corpus.root.resolve(), work / "nginx") as (server, switch):
        bench = _Bench(server, work, include)
        scrapy_first, scrapy_done = bench.scrapy("first crawl", "scrapy-cache-defaults")
        crawl, crawl_done = bench.sync("crawl only", "home-dry", dry_run=True)
        sync, sync_done = bench.sync("full sync", "home", dry_run=False)
        out.measured += [scrapy_first, crawl, sync]
        base = server.base
        scrapy_urls = relative_paths(scrapy_done.urls, base, canonicalize)
        for label, home, run_id in (
            ("crawl only", "home-dry", crawl_done.run_id),
            ("full sync", "home", sync_done.run_id),
        ):
            ours = relative_paths(bench.urls_of(home, run_id), base, canonicalize)
            out.notes.append(f"{label} vs Scrapy: " + agreement(ours, scrapy_urls).text("Tributary", "Scrapy"))
        resyncs: dict[str, Measured] = {}
        for number, (variant, directives) in enumerate(VARIANTS):
            switch(directives)
            scrapy_base = scrapy_first
            if number:  # a cache filled under other headers would answer from them: start afresh
                scrapy_base, _ = bench.scrapy(f"first crawl ({variant})", f"scrapy-cache-{number}")
                out.measured.append(scrapy_base)
            cache = "scrapy-cache-defaults" if not number else f"scrapy-cache-{number}"
            resync, _ = bench.sync(f"no-change resync ({variant})", "home", False, sync.traffic.bytes_sent)
            recrawl, _ = bench.scrapy(f"no-change recrawl ({variant})", cache, scrapy_base.traffic.bytes_sent)
            out.measured += [resync, recrawl]
            resyncs[variant] = resync
        defaults = resyncs[VARIANTS[0][0]]
        rates = (scrapy_first.pages_per_s, crawl.pages_per_s, sync.pages_per_s, defaults.pages_per_s)
        out.goals = judge_goals(*rates, defaults.share or 0.0)
        out.notes.append(_cpu_note(scrapy_first, sync, defaults))
    return out


def _cpu_note(scrapy: Measured, sync: Measured, resync: Measured) -> str:
    """CPU seconds beside wall time: on a loaded machine wall time grows with the load, CPU time
    much less (Tributary's include its parse workers'; on two cores its wall can be below them)."""
    return (
        f"CPU seconds: Scrapy first crawl {scrapy.cpu:.2f}, full sync {sync.cpu:.2f} "
        f"(Scrapy's CPU s / ours {scrapy.cpu / sync.cpu:.2f}), no-change resync {resync.cpu:.2f} "
        f"({scrapy.cpu / resync.cpu:.2f})"
    )


def _summary(quick: bool, results: dict[str, CorpusResult], skipped: list[str], load: tuple[str, str]) -> str:
    trib = source_options("http://127.0.0.1:PORT", CONCURRENCY, QUICK_PATTERN if quick else "")
    settings = "; ".join(
        f"{r['concern']}: Scrapy {r['scrapy']} | Tributary {r['tributary']}"
        for r in settings_rows(scrapy_settings(Path("cache"), CONCURRENCY), trib)
    )
    parts = [
        ("Quick run (Python tutorial + HOWTOs only). " if quick else "")
        + "Whole processes timed from outside, start-up included, one run each, nginx on 127.0.0.1; "
        f"load average (1 min) {load[0]} before, {load[1]} after (2 cores shared).",
        f"Settings side by side: {settings}.",
    ]
    for name, result in results.items():
        parts.append(f"{name}: " + " ".join(f"{n}." for n in result.notes))
        parts.append(f"{name} goals: " + "; ".join(g.text() for g in result.goals) + ".")
    parts += [f"Skipped: {s}." for s in skipped]
    parts.append(
        "pages = pages the crawler handed on (Scrapy: items in its feed, from the server or its cache; "
        "Tributary: pages indexed, or confirmed unchanged on a resync). Bytes vs first = nginx bytes over the "
        "same crawler's first crawl (Tributary: its first full sync)."
    )
    return " ".join(parts)


def warm_up(workdir: Path) -> str:
    """One untimed start of each tool doing what it will be timed doing (a crawl and a sync of a
    site on a closed port, so both fail fast), so that neither pays for reading its code from disk
    first. Returns Scrapy's version.

    Our modules are compiled to bytecode first, as Scrapy's were when pip installed it: a checkout
    under ``PYTHONDONTWRITEBYTECODE`` (set on this machine) would otherwise compile 156 modules in
    every timed process, 0.27 s of a no-change resync that a user's second run never pays."""
    from benchmarks._crawl_scrapy import scrapy_version
    from benchmarks._crawl_tributary import run_sync

    workdir.mkdir(parents=True, exist_ok=True)
    repo = Path(__file__).resolve().parent.parent
    for package in ("include", "plugins"):
        compileall.compile_dir(repo / package, quiet=1)
    version = scrapy_version(workdir)
    dead = "http://127.0.0.1:9"  # discard port: nothing listens on loopback
    with contextlib.suppress(RuntimeError):  # a failed warm-up crawl has still loaded Scrapy
        run_scrapy(workdir / "scrapy", workdir / "scrapy-cache", dead, "", CONCURRENCY)
    sources = workdir / "sources.yaml"
    sources.write_text(sources_yaml(source_options(dead, CONCURRENCY, "")), encoding="utf-8")
    with contextlib.suppress(RuntimeError, ValueError, KeyError):  # the same for the CLI and pipeline
        run_sync(workdir / "home", sources, dry_run=False)
    return version


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def _selected(quick: bool) -> tuple[Corpus, ...]:
    """``BENCH_CRAWL_CORPUS`` (a word of a corpus's name, e.g. ``postgresql``) runs that one only."""
    wanted = os.environ.get("BENCH_CRAWL_CORPUS", "").strip().lower()
    if wanted:
        return tuple(c for c in CORPORA if wanted in c.name.lower())
    return CORPORA[:1] if quick else CORPORA


def run(quick: bool = False) -> dict[str, Any]:
    """``BENCH_CRAWL_ROUNDS=N``: every corpus N times over, each round's rows of their own."""
    from tests.web.nginx import nginx_binary

    if nginx_binary() is None:
        raise RuntimeError("nginx is required: apt-get install nginx-light")
    corpora = _selected(quick)
    rounds = max(1, int(os.environ.get("BENCH_CRAWL_ROUNDS") or 1))
    include = QUICK_PATTERN if quick else ""
    results: dict[str, CorpusResult] = {}
    skipped = [f"{c.name}: {c.root} absent (apt-get install {c.package})" for c in corpora if not c.root.exists()]
    if len(skipped) == len(corpora):
        raise RuntimeError("no corpus installed: " + "; ".join(skipped))
    work = Path(tempfile.mkdtemp(prefix="bench-crawl-"))
    try:
        version = warm_up(work / "warm-up")
        before = _load()
        present = [c for c in corpora if c.root.exists()]
        for number, (round_no, corpus) in enumerate((r, c) for r in range(rounds) for c in present):
            name = corpus.name if rounds == 1 else f"{corpus.name} (round {round_no + 1})"
            try:
                results[name] = _bench_corpus(corpus, work / f"corpus-{number}", include)
            except RuntimeError as exc:  # one corpus failing (a broken sync) keeps the other's numbers
                skipped.append(f"{name}: failed, {' '.join(str(exc).split())[-600:]}")
        if not results:
            raise RuntimeError("every corpus failed: " + "; ".join(skipped))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [m.row(name) for name, result in results.items() for m in result.measured]
    return {
        "title": f"Web crawl: Tributary vs Scrapy, whole processes ({', '.join(results)})",
        "peer": f"{version} (scrapy runspider)",
        "rows": rows,
        "summary": _summary(quick, results, skipped, (before, _load())),
        "settings": settings_rows(
            scrapy_settings(Path("<tmp>/cache"), CONCURRENCY), source_options("", CONCURRENCY, include)
        ),
        "goals": {name: [g.text() for g in r.goals] for name, r in results.items()},
    }


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(quick="--quick" in sys.argv), indent=2, default=str))  # BENCH_CRAWL_* as above
