"""State-DB growth over many runs, with and without run-log retention (issue 19, point 11).

    python -m benchmarks.state_growth --docs 500 --runs 25 --keep 10

Syncs a folder of ``--docs`` small markdown notes ``--runs`` times in-process (a tenth of the
notes edited before each run, so runs have new, changed and unchanged lineage rows), once with
retention off (every run kept) and once with ``retention_days: 0`` and ``retention_keep_runs:
--keep``; prints the SQLite state file size (WAL checkpointed) after every run. SQLite does not
return freed pages to the file system: with retention the file stops growing once it holds
``--keep`` runs (deleted rows' pages are reused), it does not shrink.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
from pathlib import Path

from include.config import SourceConfig
from plugins.engine import run_pipeline


def _write(root: Path, docs: int, run: int) -> None:
    for i in range(docs):
        if run and i % 10 != run % 10:
            continue  # a tenth of the notes change each run
        body = "\n\n".join(f"Paragraph {j} of note {i}, edit {run}: locks, weirs and sluices." for j in range(6))
        (root / f"note{i:05d}.md").write_text(f"# Note {i}\n\n{body}\n", encoding="utf-8")
        os.utime(root / f"note{i:05d}.md", (1_700_000_000 + run, 1_700_000_000 + run))


def _size(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return db.stat().st_size


def measure(docs: int, runs: int, keep: int | None) -> list[int]:
    with tempfile.TemporaryDirectory(prefix="state-growth-") as tmp:
        home, root = Path(tmp) / "home", Path(tmp) / "docs"
        root.mkdir()
        os.environ["TRIBUTARY_HOME"] = str(home)
        retention = {"retention_days": 0, "retention_keep_runs": keep} if keep is not None else {}
        options = {"root": str(root), **retention, **({} if keep is not None else {"retention_days": 10_000})}
        src = SourceConfig(kind="files", name="growth", options=options, batch_size=100)
        sizes = []
        for run in range(runs):
            _write(root, docs, run)
            run_pipeline(src, run_id=f"run{run:03d}")
            sizes.append(_size(home / "state.db"))
        return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--keep", type=int, default=10)
    args = parser.parse_args()
    for var in ("TRIBUTARY_STATE_URL", "TRIBUTARY_INDEX_PATH", "TRIBUTARY_STAGING_DIR"):
        os.environ.pop(var, None)
    without = measure(args.docs, args.runs, None)
    with_retention = measure(args.docs, args.runs, args.keep)
    print(f"{'run':>4} {'no retention (KiB)':>19} {f'keep {args.keep} (KiB)':>15}")
    for i, (a, b) in enumerate(zip(without, with_retention, strict=True)):
        print(f"{i:>4} {a / 1024:>19.0f} {b / 1024:>15.0f}")
    per_run = (without[-1] - without[0]) / max(len(without) - 1, 1)
    print(f"growth without retention: {per_run / 1024:.1f} KiB/run = {per_run / args.docs:.0f} B per lineage row")
    tail = with_retention[args.keep + 2 :]
    if tail:
        print(
            f"with retention, runs {args.keep + 2}..{args.runs - 1}: {min(tail) / 1024:.0f}..{max(tail) / 1024:.0f} KiB"
        )


if __name__ == "__main__":
    main()
