"""Access control (issue 35): ``python -m benchmarks acl [--quick]``, three parts in one run.

a. Search latency with the access filter vs without (the peer: an unfiltered search, what every
   search did before), 50,000 chunks in the SQLite index, BM25, vector and hybrid, p50/p95 and
   the filtered/unfiltered ratio (goal: p95 within 1.2x). :mod:`benchmarks._acl_search`.
b. A permission-only change on 1,000 documents: ``sync_permissions`` against a full re-sync (the
   system before: re-read every document's content) and a delete-and-re-embed; chunks embedded,
   rows written (by table, from a diff of the databases) and seconds. :mod:`benchmarks._acl_permsync`.
c. Permission-sync requests for 5,000 Feishu documents (simulator on 127.0.0.1, cold and warm)
   against one call per document (the naive reader), and the time the per-API budgets imply.
   :mod:`benchmarks._acl_feishu`.

Onyx (the best peer, its paid edition) filters in the query like ours (``public OR acl IN
principal``) and updates index metadata without re-embedding on a permission-only change; it is
named in the README, not run here.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from benchmarks._acl_feishu import run_feishu
from benchmarks._acl_permsync import run_permsync
from benchmarks._acl_search import run_search

GOAL_RATIO = 1.2


def _summary(search: dict[str, Any], perm: dict[str, Any], feishu: dict[str, Any]) -> str:
    worst = search["worst_ratio"]
    ours = perm["ours"]
    parts = [
        f"a. {search['chunks']:,} chunks, {search['queries']} queries per mode and searcher: the worst filtered p95 is "
        f"{worst:.2f}x unfiltered (goal <= {GOAL_RATIO}x: {'met' if worst <= GOAL_RATIO else 'NOT met'}); vectors "
        "are random 384-dimension unit vectors (latency does not depend on what they mean).",
        f"b. ACL of {perm['docs']} documents ({perm['chunks']} chunks) changed: sync_permissions embedded "
        f"{ours['chunks embedded']} chunks and wrote {ours['rows written']} rows ({ours['tables written']}) in "
        f"{ours['seconds']} s; a full re-sync re-read every document ({perm['resync']['seconds']} s, "
        f"{perm['resync']['chunks embedded']} embedded thanks to the vector cache), delete-and-re-embed embedded "
        f"{perm['fresh']['chunks embedded']} chunks and wrote {perm['fresh']['rows written']} rows.",
    ]
    if feishu.get("summary"):
        parts.append("c. " + feishu["summary"])
    return " ".join(parts)


def run(quick: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-acl-") as tmp:
        workdir = Path(tmp)
        (workdir / "search").mkdir()
        (workdir / "perm").mkdir()
        search_rows, search = run_search(workdir / "search", quick)
        perm_rows, perm = run_permsync(workdir / "perm", quick)
        feishu_rows, feishu = run_feishu(quick)
    perm.update(ours=perm_rows[0], resync=perm_rows[1], fresh=perm_rows[2])
    return {
        "title": "Access control: filtered search, permission-only change, Feishu permission sync",
        "peer": "unfiltered search; full re-sync and delete-and-re-embed; one permission call per document",
        "rows": [*search_rows, *perm_rows, *feishu_rows],
        "search": search,
        "permission_change": {k: v for k, v in perm.items() if k not in ("ours", "resync", "fresh")},
        "feishu": feishu,
        "summary": _summary(search, perm, feishu),
    }
