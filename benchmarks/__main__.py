"""One runner for every benchmark: ``python -m benchmarks <name> [--quick]``.

Each benchmark is a module ``benchmarks/<name>.py`` exposing
``run(quick: bool) -> dict`` that returns::

    {"title": str, "peer": str, "rows": [ {column: value, ...}, ... ], "summary": str}

The runner writes the result to ``benchmarks/results/<name>.json`` and appends a Markdown
table (with date, machine and command) to ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _markdown(name: str, result: dict, quick: bool, real: bool = False) -> str:
    rows = result.get("rows") or []
    cols: list[str] = []
    for row in rows:
        cols.extend(c for c in row if c not in cols)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    cmd = f"python -m benchmarks {name}" + (" --quick" if quick else "") + (" --real" if real else "")
    lines = [
        f"### {result.get('title', name)} — {stamp}",
        "",
        f"Command: `{cmd}` · peer: {result.get('peer', 'n/a')} · "
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "",
    ]
    if cols:
        lines.append("| " + " | ".join(cols) + " |")
        lines.append("|" + "---|" * len(cols))
        for row in rows:
            lines.append("| " + " | ".join(_fmt(row.get(c, "")) for c in cols) + " |")
        lines.append("")
    if result.get("summary"):
        lines += [result["summary"], ""]
    return "\n".join(lines) + "\n"


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("name", help="benchmark module under benchmarks/")
    parser.add_argument("--quick", action="store_true", help="smaller corpus (smoke run)")
    parser.add_argument("--no-readme", action="store_true", help="do not append to benchmarks/README.md")
    parser.add_argument("--real", action="store_true", help="the real-document corpus (benchmarks that have one)")
    args = parser.parse_args(argv)
    module = importlib.import_module(f"benchmarks.{args.name}")
    result = module.run(quick=args.quick, real=True) if args.real else module.run(quick=args.quick)
    out = HERE / "results" / f"{args.name}{'_real' if args.real else ''}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    table = _markdown(args.name, result, args.quick, args.real)
    print(table)
    if not args.no_readme:
        readme = HERE / "README.md"
        if not readme.exists():
            readme.write_text(
                "# Benchmarks\n\nResults appended by `python -m benchmarks <name>`.\n\n", encoding="utf-8"
            )
        with readme.open("a", encoding="utf-8") as fh:
            fh.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
