"""Lakesheet decode + .xlsx rebuild: zlib-ng vs stdlib zlib, rebuild throughput, bomb memory.

Peer: the standard library's ``zlib`` (what public lakesheet converters, MemoryBear's included,
call) for the inflate step, and its one-shot ``zlib.decompress`` for the bomb case, which holds
the whole inflated output before any check can run.
"""

from __future__ import annotations

import json
import time
import tracemalloc
import zlib
from typing import Any

from zlib_ng import zlib_ng

from plugins.connectors.yuque.lakesheet import (
    LakesheetError,
    decode_sheets,
    inflate_bounded,
    lakesheet_to_xlsx,
    workbook_from_sheets,
)


def _model(cells: int) -> list[dict[str, Any]]:
    cols = 20
    rows = cells // cols
    data: dict[str, dict[str, Any]] = {}
    for r in range(rows):
        row: dict[str, Any] = {}
        for c in range(cols):
            if c == 0:
                row[str(c)] = {"v": f"华东区第{r}号门店 销售记录", "s": r % 3}
            elif c == cols - 1:
                row[str(c)] = {"v": {"class": "formula", "formula": f"SUM(B{r + 1}:S{r + 1})", "value": r * 18}}
            else:
                row[str(c)] = {"v": str(r * c)}
        data[str(r)] = row
    merges = {str(i): {"row": i * 10, "col": 0, "rowCount": 1, "colCount": 2} for i in range(rows // 10)}
    return [
        {
            "name": "销售",
            "index": 0,
            "data": data,
            "mergeCells": merges,
            "columns": {"0": {"size": 200}},
            "vStore": {"style": ["z12w7h1b0", "h2", "c0"], "style_color": ["#C00000"], "style_backColor": ["#F8B881"]},
        }
    ]


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _inflate_with(module: Any, data: bytes) -> bytes:
    inflater = module.decompressobj()
    out = bytearray()
    pending = data
    while pending and not inflater.eof:
        out += inflater.decompress(pending, 1024 * 1024)
        pending = inflater.unconsumed_tail
    return bytes(out)


def run(quick: bool) -> dict:
    sizes = [2_000, 20_000] if quick else [2_000, 20_000, 100_000]
    repeat = 3 if quick else 5
    rows = []
    for cells in sizes:
        model = _model(cells)
        packed = zlib.compress(json.dumps(model, ensure_ascii=False, separators=(",", ":")).encode())
        wrapper = json.dumps({"format": "lakesheet", "sheet": packed.decode("latin-1")})
        ours = _best(lambda p=packed: _inflate_with(zlib_ng, p), repeat * 3)
        peer = _best(lambda p=packed: _inflate_with(zlib, p), repeat * 3)
        sheets = decode_sheets(json.loads(wrapper))
        build = _best(lambda s=sheets: workbook_from_sheets(s), repeat)
        total = _best(lambda w=wrapper: lakesheet_to_xlsx(w), repeat)
        rows.append(
            {
                "case": f"{cells:,} cells",
                "compressed KiB": round(len(packed) / 1024, 1),
                "inflate zlib-ng ms": round(ours * 1000, 2),
                "inflate stdlib zlib ms (peer)": round(peer * 1000, 2),
                "inflate speed-up": round(peer / ours, 2),
                "build workbook ms": round(build * 1000, 1),
                "full rebuild to .xlsx ms": round(total * 1000, 1),
                "cells/s": int(cells / total),
            }
        )

    bomb_size = 64 * 1024 * 1024 if quick else 256 * 1024 * 1024
    bomb = zlib.compress(b"\x00" * bomb_size, 9)
    cap = 8 * 1024 * 1024
    tracemalloc.start()
    try:
        inflate_bounded(bomb, cap)
        raise RuntimeError("the bomb was not rejected")
    except LakesheetError as exc:
        if exc.code != "bomb":
            raise
    _, bounded_peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    zlib.decompress(bomb)
    _, naive_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rows.append(
        {
            "case": f"zlib bomb {len(bomb) // 1024} KiB -> {bomb_size // 2**20} MiB, cap {cap // 2**20} MiB",
            "bounded peak MiB": round(bounded_peak / 2**20, 1),
            "zlib.decompress peak MiB (peer)": round(naive_peak / 2**20, 1),
        }
    )
    speedups = [r["inflate speed-up"] for r in rows if "inflate speed-up" in r]
    return {
        "title": "Yuque lakesheet decode and .xlsx rebuild",
        "peer": "stdlib zlib (inflate), zlib.decompress (bomb)",
        "rows": rows,
        "summary": (
            f"zlib-ng inflates lakesheet payloads {min(speedups)}-{max(speedups)}x as fast as stdlib zlib; "
            f"the workbook build (openpyxl) dominates a rebuild. A bomb is refused holding "
            f"{rows[-1]['bounded peak MiB']} MiB instead of {rows[-1]['zlib.decompress peak MiB (peer)']} MiB."
        ),
    }
