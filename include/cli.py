"""Command line: ``python -m include.cli <command>`` (``--json`` on any query for machine output).

sources                       configured sources and their DAG ids
sync SOURCE [--full-resync]   run a sync in-process (same stages as the DAG)
search QUERY [--source S]     BM25 search of the index, with each hit's lineage
runs [--source S]             recent runs with their counts
run RUN_ID [--action A]       one run: counts and per-item lineage
item SOURCE KEY               an item's stored state and its history across runs
chunk CHUNK_ID                a chunk and the run / source version it came from
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any

from include.config import load_sources
from include.settings import get_settings

__all__ = ["main"]


def _default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if hasattr(value, "__dataclass_fields__"):
        return {k: getattr(value, k) for k in value.__dataclass_fields__}
    return str(value)


def _emit(obj: Any, as_json: bool, text: str) -> None:
    print(json.dumps(obj, default=_default, ensure_ascii=False, indent=2) if as_json else text)


def _index_for(source: str | None):
    from include.config import IndexConfig
    from include.engine import get_source
    from include.index import open_index

    return open_index(get_source(source).index if source else IndexConfig())


def cmd_sources(args: argparse.Namespace) -> int:
    sources = load_sources(get_settings().sources_file)
    rows = [{"source": s.source_id, "dag_id": s.dag_id, "schedule": s.schedule, "index": s.index.name} for s in sources]
    _emit(rows, args.json, "\n".join(f"{r['source']:30} {r['dag_id']:35} {r['schedule']}" for r in rows))
    return 0


def cmd_sync(args: argparse.Namespace) -> int:
    from include.engine import get_source, run_pipeline

    params = {"full_resync": args.full_resync, "dry_run": args.dry_run, "max_items": args.max_items}
    summary = run_pipeline(get_source(args.source), params)
    _emit(summary, args.json, f"run {summary.run_id}: {summary.status}\n" + json.dumps(summary.counts, indent=2))
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    index = _index_for(args.source)
    try:
        hits = index.search(args.query, k=args.k, source=None)
    finally:
        index.close()
    lines = []
    for n, h in enumerate(hits, 1):
        where = " > ".join(h.heading_path) if h.heading_path else ""
        lines.append(f"{n}. [{h.score:.3f}] {h.title or ''} {where}\n   {h.url or h.doc_id}  (run {h.run_id})")
        lines.append("   " + " ".join(h.text.split())[:240])
    _emit(hits, args.json, "\n".join(lines) or "no hits")
    return 0 if hits else 1


def cmd_runs(args: argparse.Namespace) -> int:
    from include.stores import open_state_store

    store = open_state_store()
    try:
        runs = store.runs(args.source, limit=args.limit)
    finally:
        store.close()
    lines = [
        f"{r['run_id']:45} {r['source']:20} {r['status']:8} "
        + " ".join(
            f"{k}={v}"
            for k, v in (r["counts"] or {}).items()
            if k in ("new", "changed", "unchanged", "deleted", "failed")
        )
        for r in runs
    ]
    _emit(runs, args.json, "\n".join(lines) or "no runs")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from include.stores import open_state_store

    store = open_state_store()
    try:
        run = store.get_run(args.run_id)
        if run is None:
            print(f"no run {args.run_id}", file=sys.stderr)
            return 1
        items = store.run_items(args.run_id, args.action)
    finally:
        store.close()
    text = [f"run {run['run_id']} of {run['source']}: {run['status']}", json.dumps(run["counts"], indent=2)]
    if run.get("error"):
        text.append(f"error: {run['error']}")
    text += [
        f"  {i['action']:9} {i['item_key']}  {i['reason'] or ''}{'  ERROR ' + i['error'] if i['error'] else ''}"
        for i in items
    ]
    _emit({"run": run, "items": items}, args.json, "\n".join(text))
    return 0


def cmd_item(args: argparse.Namespace) -> int:
    from include.stores import open_state_store

    store = open_state_store()
    try:
        state = store.get_item(args.source, args.key)
        history = store.item_history(args.source, args.key)
    finally:
        store.close()
    if state is None and not history:
        print(f"no item {args.key!r} in {args.source}", file=sys.stderr)
        return 1
    text = [f"{args.source} {args.key}"]
    if state:
        text.append(f"  version {state.version.to_dict() if state.version else None}, {len(state.chunk_ids)} chunks")
        text.append(f"  failures {state.failure_count} {state.last_error or ''}")
    text += [f"  {h['run_id']}: {h['action']} {h['reason'] or ''}" for h in history]
    _emit({"state": state, "history": history}, args.json, "\n".join(text))
    return 0


def cmd_chunk(args: argparse.Namespace) -> int:
    index = _index_for(args.source)
    try:
        chunk = index.get_chunk(args.chunk_id)
    finally:
        index.close()
    if chunk is None:
        print(f"no chunk {args.chunk_id}", file=sys.stderr)
        return 1
    lineage = None
    if chunk.get("run_id"):
        from include.stores import open_state_store

        store = open_state_store()
        try:
            lineage = next((i for i in store.run_items(chunk["run_id"]) if i["item_key"] == chunk["item_key"]), None)
        finally:
            store.close()
    text = (
        f"{chunk['chunk_id']} of {chunk['source']} {chunk['item_key']}\n"
        f"  written by run {chunk['run_id']} from version {chunk['doc_version']} (content {chunk['doc_content_hash']})"
    )
    _emit({"chunk": chunk, "lineage": lineage}, args.json, text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m include.cli", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("sources", parents=[common]).set_defaults(fn=cmd_sources)
    p = sub.add_parser("sync", parents=[common])
    p.add_argument("source")
    p.add_argument("--full-resync", action="store_true")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--max-items", type=int)
    p.set_defaults(fn=cmd_sync)
    p = sub.add_parser("search", parents=[common])
    p.add_argument("query")
    p.add_argument("-k", type=int, default=5)
    p.add_argument("--source", help="source whose index to search (default: the default index)")
    p.set_defaults(fn=cmd_search)
    p = sub.add_parser("runs", parents=[common])
    p.add_argument("--source")
    p.add_argument("--limit", type=int, default=20)
    p.set_defaults(fn=cmd_runs)
    p = sub.add_parser("run", parents=[common])
    p.add_argument("run_id")
    p.add_argument("--action", choices=["new", "changed", "unchanged", "deleted", "failed", "skipped"])
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("item", parents=[common])
    p.add_argument("source", help="source id, e.g. web:demo")
    p.add_argument("key")
    p.set_defaults(fn=cmd_item)
    p = sub.add_parser("chunk", parents=[common])
    p.add_argument("chunk_id")
    p.add_argument("--source")
    p.set_defaults(fn=cmd_chunk)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
