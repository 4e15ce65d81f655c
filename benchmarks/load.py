"""Load figures (issue 10, item 5): a generated static site, a simulated Feishu drive and a
simulated Yuque space, each synced, resynced with no change and resynced with 1% changed.

``python -m benchmarks load`` (full: 10,000 pages, 5,000 Feishu docs, 2,000 Yuque docs) or
``--quick`` (500 / 250 / 100). Servers run in this process on 127.0.0.1 (Python's
``ThreadingHTTPServer`` for the site, the uvicorn simulators for Feishu and Yuque); every sync
runs ``plugins.engine.run_pipeline`` in a fresh worker process (``python -m benchmarks.load
--worker spec.json``), so its peak RSS (``VmHWM``) is that of one worker and not of the
servers. After each run the index is opened and counted: the number of documents must equal the
number of items exactly, the chunk total must not move on a resync
(nothing doubled or lost), and a 1% resync must write exactly the changed documents' chunks. The peer is our own first sync.

Rate limits: the simulators enforce Feishu's and Yuque's documented limits, and so does our
client by default (e.g. 100 Feishu export tasks a minute would make 5,000 docs a 50-minute
first sync by design). This benchmark measures the engine, so it raises the client budgets and
the simulators' limits; the time a real tenant's limits impose is ``items / limit``.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

FULL = {"web": 10_000, "feishu": 5_000, "yuque": 2_000}
QUICK = {"web": 500, "feishu": 250, "yuque": 100}
_UNLIMITED = [[1_000_000, 1.0]]
_FEISHU_APIS = (
    "list",
    "meta",
    "export_create",
    "export_poll",
    "export_download",
    "file_download",
    "wiki_nodes",
    "docx_get",
)


# --------------------------------------------------------------------------- worker process


def _worker(spec_path: str) -> None:
    """Run one sync in this (fresh) process and print its figures as JSON."""
    spec = json.loads(Path(spec_path).read_text())
    os.environ.update(spec["env"])
    from include.config import SourceConfig
    from plugins.engine import run_pipeline

    source = SourceConfig(**spec["source"])
    started = time.perf_counter()
    summary = run_pipeline(source)
    wall = time.perf_counter() - started
    print(
        json.dumps(
            {"status": summary.status, "wall_s": wall, "rss_mib": _peak_rss_mib(), "counts": dict(summary.counts)}
        )
    )


def _peak_rss_mib() -> float:
    """This process's own peak RSS: ``VmHWM`` of its address space. (``ru_maxrss`` is no good
    here: Linux carries it across fork+exec, so a worker started by a large parent reports the
    parent's size.)"""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _sync(home: Path, source: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    spec = home / f"spec-{uuid.uuid4().hex[:8]}.json"
    spec.write_text(json.dumps({"source": source, "env": {"TRIBUTARY_HOME": str(home), **env}}))
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.load", "--worker", str(spec)],
        capture_output=True,
        text=True,
        env={**os.environ, "TRIBUTARY_TASK_RETRIES": "0"},
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"worker failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _index_counts(home: Path, source: dict[str, Any]) -> tuple[int, dict[str, int]]:
    """(chunks, chunks per document) of the source, read from the index after the run."""
    from include.config import SourceConfig
    from include.index import open_index

    os.environ["TRIBUTARY_HOME"] = str(home)
    config = SourceConfig(**source)
    index = open_index(config.index)
    try:
        ids = index.chunk_ids(source=config.source_id)
        total = index.count(source=config.source_id)
    finally:
        index.close()
    per_doc: dict[str, int] = {}
    for chunk_id in ids:
        doc_id = chunk_id.rsplit("-", 1)[0]
        per_doc[doc_id] = per_doc.get(doc_id, 0) + 1
    assert total == len(ids), (total, len(ids))
    return total, per_doc


def _db_mib(home: Path) -> float:
    return sum(p.stat().st_size for p in home.glob("state.db*")) / (1 << 20)


def _scenario(
    kind: str, n: int, home: Path, source: dict[str, Any], env: dict[str, str], change: Callable[[int], int]
) -> list[dict[str, Any]]:
    """First sync, no-change resync, 1%-changed resync; exact index checks after each."""
    rows: list[dict[str, Any]] = []
    first_chunks = 0
    for run in ("first sync", "no-change resync", "1% changed resync"):
        changed = change(max(1, n // 100)) if run.startswith("1%") else 0
        result = _sync(home, source, env)
        counts = result["counts"]
        chunks, per_doc = _index_counts(home, source)
        # exact: every item is one document in the index, no more, no fewer, none empty
        assert result["status"] == "success", result
        assert len(per_doc) == n, (kind, run, len(per_doc), n)
        assert min(per_doc.values()) >= 1
        # the typical document (a leaf page / a doc): every changed item is one of these
        typical = max(set(per_doc.values()), key=list(per_doc.values()).count)
        assert counts.get("failed", 0) == 0, counts
        if run == "first sync":
            first_chunks = chunks
            assert counts["new"] == n and counts["chunks_written"] == chunks, counts
        elif run == "no-change resync":
            assert counts["new"] == counts["changed"] == counts["chunks_written"] == 0, counts
            assert chunks == first_chunks  # nothing doubled, nothing lost
        else:
            assert counts["changed"] == changed and counts["new"] == 0, (counts, changed)
            assert counts["chunks_written"] == changed * typical, (counts, typical)
            assert chunks == first_chunks
        rows.append(
            {
                "source": kind,
                "run": run,
                "items": n,
                "changed": changed,
                "wall_s": round(result["wall_s"], 2),
                "items_per_s": round(n / result["wall_s"], 1),
                "worker_peak_rss_mib": round(result["rss_mib"], 1),
                "state_db_mib": round(_db_mib(home), 2),
                "index_docs": len(per_doc),
                "index_chunks": chunks,
                "chunks_written": counts["chunks_written"],
                "fetched": counts.get("fetched", 0),
            }
        )
    return rows


# --------------------------------------------------------------------------- web


_PAGE = (
    "<!doctype html><html><head><meta charset=utf-8><title>{title}</title></head><body>"
    "<nav>{nav}</nav><main><h1>{title}</h1><p>{body}</p></main></body></html>"
)


def _write_site(root: Path, n: int) -> list[Path]:
    """``n`` pages exactly: index -> sections -> leaves. Returns the leaf files."""
    sections = max(1, int(n**0.5) - 1)
    leaves_total = n - 1 - sections
    leaves: list[Path] = []
    section_links = []
    for s in range(sections):
        links = []
        for i in range(s, leaves_total, sections):
            name = f"p{i:05d}.html"
            body = f"Page {i} of section {s}. Unique term lp{i:05d}x. 第{i}页的正文，讲述增量同步。"
            (root / name).write_text(_PAGE.format(title=f"Page {i}", nav="", body=body), encoding="utf-8")
            leaves.append(root / name)
            links.append(f'<a href="/{name}">Page {i}</a>')
        (root / f"s{s:03d}.html").write_text(
            _PAGE.format(title=f"Section {s}", nav=" ".join(links), body=f"Section {s} index."), encoding="utf-8"
        )
        section_links.append(f'<a href="/s{s:03d}.html">Section {s}</a>')
    (root / "index.html").write_text(
        _PAGE.format(title="Load site", nav=" ".join(section_links), body="Home."), encoding="utf-8"
    )
    return leaves


def _web(n: int) -> list[dict[str, Any]]:
    from plugins.tributary_airflow.demo.serve import serve_directory

    with tempfile.TemporaryDirectory() as tmp:
        site, home = Path(tmp) / "site", Path(tmp) / "home"
        site.mkdir()
        home.mkdir()
        leaves = _write_site(site, n)
        server, _ = serve_directory(site)
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        source = {
            "kind": "web",
            "name": "load",
            "batch_size": 200,
            "options": {
                "seeds": [url],
                "delay_seconds": 0,
                "concurrency": 8,
                "allowlist": ["127.0.0.1"],
                "use_sitemaps": False,
                "max_pages": n + 100,
                "total_timeout_seconds": 600,
                "log_every": 1000,
            },
        }

        def change(k: int) -> int:
            later = time.time() + 120  # a clearly newer Last-Modified than the first crawl saw
            for path in leaves[:: max(1, len(leaves) // k)][:k]:
                path.write_text(path.read_text(encoding="utf-8").replace("讲述", "修订后讲述"), encoding="utf-8")
                os.utime(path, (later, later))
            return k

        try:
            return _scenario("web (static site)", n, home, source, {}, change)
        finally:
            server.shutdown()


# --------------------------------------------------------------------------- Feishu


def _feishu(n: int) -> list[dict[str, Any]]:
    from tests.simulators.feishu import FeishuSimulator
    from tests.support.server import serve_asgi

    secret = "load-" + uuid.uuid4().hex
    sim = FeishuSimulator(app_id=f"cli_{uuid.uuid4().hex[:12]}", app_secret=secret, export_pending_polls=0)
    root = sim.add_folder("负载测试")
    folders = [sim.add_folder(f"目录{f:02d}", root) for f in range(max(1, n // 100))]
    tokens = [
        sim.add("docx", f"文档{i:05d}", folders[i % len(folders)], f"# 文档{i:05d}\n第{i}篇文档，唯一词 fs{i:05d}x。")
        for i in range(n)
    ]
    with tempfile.TemporaryDirectory() as tmp, serve_asgi(sim.app) as url:
        home = Path(tmp)
        conn = {"conn_type": "http", "login": sim.app_id, "password": secret, "host": url}
        source = {
            "kind": "feishu",
            "name": "load",
            "conn_id": "feishu_default",
            "batch_size": 200,
            "options": {
                "folders": [root],
                "export_poll_interval": 0.05,
                "export_poll_max_interval": 0.2,
                "rate_limits": {api: _UNLIMITED for api in _FEISHU_APIS},
            },
        }

        def change(k: int) -> int:
            for i in range(0, n, max(1, n // k))[:k]:
                sim.edit(tokens[i], f"# 文档{i:05d}\n第{i}篇文档已修订，唯一词 fs{i:05d}x。")
            return k

        return _scenario("Feishu (simulated drive, docx)", n, home, source,
                         {"AIRFLOW_CONN_FEISHU_DEFAULT": json.dumps(conn)}, change)  # fmt: skip


# --------------------------------------------------------------------------- Yuque


def _yuque(n: int) -> list[dict[str, Any]]:
    from tests.simulators.yuque import YuqueSimulator
    from tests.support.server import serve_asgi

    token = "load-" + uuid.uuid4().hex
    sim = YuqueSimulator()
    sim.hourly_limit = 10**9
    sim.add_account("loader", token=token)
    repos = [sim.add_repo("loader", f"kb{r}", f"知识库{r}") for r in range(max(1, n // 500))]
    docs = [
        sim.add_doc(repos[i % len(repos)], f"文档{i:05d}", body=f"第{i}篇语雀文档，唯一词 yq{i:05d}x。")
        for i in range(n)
    ]
    with tempfile.TemporaryDirectory() as tmp, serve_asgi(sim.app) as url:
        home = Path(tmp)
        extra = {"hourly_budget": 10**9, "backoff_initial": 0.01, "backoff_max": 0.05}
        conn = {"conn_type": "yuque", "host": url, "password": token, "extra": extra}
        source = {"kind": "yuque", "name": "load", "conn_id": "yuque_default", "batch_size": 200, "options": {}}

        def change(k: int) -> int:
            for i in range(0, n, max(1, n // k))[:k]:
                sim.edit_doc(docs[i], body=f"第{i}篇语雀文档已修订，唯一词 yq{i:05d}x。")
            return k

        return _scenario("Yuque (simulated space)", n, home, source,
                         {"AIRFLOW_CONN_YUQUE_DEFAULT": json.dumps(conn)}, change)  # fmt: skip


# --------------------------------------------------------------------------- entry point


def run(quick: bool = False) -> dict[str, Any]:
    sizes = dict(QUICK if quick else FULL)
    only = [s for s in os.environ.get("TRIBUTARY_LOAD_ONLY", "").split(",") if s]
    rows: list[dict[str, Any]] = []
    for kind, fn in (("web", _web), ("feishu", _feishu), ("yuque", _yuque)):
        if not only or kind in only:
            rows += fn(sizes[kind])
    return {
        "title": "Load: first sync, no-change resync, 1% changed resync",
        "peer": "our own first sync",
        "rows": rows,
        "summary": (
            "Each sync runs in a fresh worker process (peak RSS = that worker); servers on 127.0.0.1 in "
            "the parent; SQLite state DB and SQLite FTS index. Index counts are asserted exactly after "
            "every run (documents = items, chunk total unchanged by resyncs, chunks written = changed "
            "items' chunks). Client budgets and simulator rate limits are raised: the figures are engine "
            f"throughput, not a tenant's API limits. Sizes: {sizes}."
        ),
    }


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker(sys.argv[2])
    else:
        print(json.dumps(run(quick="--quick" in sys.argv), indent=2, ensure_ascii=False))
