"""Ruled grids on PDF pages: path segments -> rules -> crossings -> cells -> corner-sharing groups.

Private to ``_pdf_tables`` (the lattice method described there). Every pass is linear or
n log n in the page's segments and crossings: a 300 x 300 grid is ~90k crossings.
"""

from __future__ import annotations

import bisect
import ctypes
import heapq
import itertools
from typing import Any

from plugins.parsers._common import Deadline

__all__ = ["GridCut", "ruled_cell_groups"]

_SNAP = 3.0  # points: rules this close are the same rule (pdfplumber's snap_tolerance)
_JOIN = 3.0  # points: collinear pieces this close join (join_tolerance)
_MIN_RULE = 3.0  # shorter segments are glyph or chart details, not rules
_MAX_SEGMENTS = 50_000  # per page: a vector drawing is not a table, and its segments cost time
_MAX_RULES = 600  # per direction after joining: crossings are checked pairwise


class GridCut(Exception):
    """Ruled-table detection gives up on the page: a grid past a cap (the message says which)."""


_Matrix = tuple[float, float, float, float, float, float]
_IDENTITY: _Matrix = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)


def _then(inner: _Matrix, outer: _Matrix) -> _Matrix:
    """The matrix applying ``inner`` and then ``outer`` (ISO 32000-1 8.3.4, row-vector convention)."""
    a, b, c, d, e, f = inner
    A, B, C, D, E, F = outer
    return (a * A + b * C, a * B + b * D, c * A + d * C, c * B + d * D, e * A + f * C + E, e * B + f * D + F)


def _path_objects(pdfium_c: Any, count: Any, get: Any, holder: Any, matrix: _Matrix, depth: int) -> Any:
    """(path object, its matrix to page space) for the paths of a page or a form XObject, nested forms too.

    Through pdfium's C API rather than pypdfium2's object wrappers (a third of the page's time
    on a drawing-heavy file); a form's objects carry matrices relative to the form, composed here.
    """
    fs = pdfium_c.FS_MATRIX()
    for i in range(count(holder)):
        obj = get(holder, i)
        kind = pdfium_c.FPDFPageObj_GetType(obj)
        if kind not in (pdfium_c.FPDF_PAGEOBJ_PATH, pdfium_c.FPDF_PAGEOBJ_FORM):
            continue
        own = _IDENTITY
        if pdfium_c.FPDFPageObj_GetMatrix(obj, fs):
            own = (fs.a, fs.b, fs.c, fs.d, fs.e, fs.f)
        if kind == pdfium_c.FPDF_PAGEOBJ_PATH:
            yield obj, _then(own, matrix)
        elif depth > 0:
            yield from _path_objects(
                pdfium_c,
                pdfium_c.FPDFFormObj_CountObjects,
                pdfium_c.FPDFFormObj_GetObject,
                obj,
                _then(own, matrix),
                depth - 1,
            )


def _segments(page: Any, height: float, deadline: Deadline) -> tuple[list[tuple[float, float, float]], ...]:
    """Horizontal ``(y, x0, x1)`` and vertical ``(x, y0, y1)`` straight pieces of the page's paths."""
    import pypdfium2.raw as pdfium_c  # pdfium's native library loads with the first PDF only

    horizontal: list[tuple[float, float, float]] = []
    vertical: list[tuple[float, float, float]] = []
    fill, stroke = ctypes.c_int(), ctypes.c_int()
    px, py = ctypes.c_float(), ctypes.c_float()
    count = 0
    objects = _path_objects(
        pdfium_c, pdfium_c.FPDFPage_CountObjects, pdfium_c.FPDFPage_GetObject, page.raw, _IDENTITY, 2
    )
    for obj, (a, b, c, d, e, f) in objects:
        if not pdfium_c.FPDFPath_GetDrawMode(obj, fill, stroke) or not (fill.value or stroke.value):
            continue
        n = pdfium_c.FPDFPath_CountSegments(obj)
        count += n
        if count > _MAX_SEGMENTS:
            raise GridCut(f"more than {_MAX_SEGMENTS} path segments")
        deadline.check("pdf table rules")
        start = current = None
        for i in range(n):
            seg = pdfium_c.FPDFPath_GetPathSegment(obj, i)
            pdfium_c.FPDFPathSegment_GetPoint(seg, px, py)
            point = (a * px.value + c * py.value + e, height - (b * px.value + d * py.value + f))
            kind = pdfium_c.FPDFPathSegment_GetType(seg)
            if kind == pdfium_c.FPDF_SEGMENT_LINETO and current is not None:
                _add_piece(current, point, horizontal, vertical)
            elif kind == pdfium_c.FPDF_SEGMENT_MOVETO:
                start = point
            current = point
            if pdfium_c.FPDFPathSegment_GetClose(seg) and start is not None:
                _add_piece(current, start, horizontal, vertical)
                current = start
    return horizontal, vertical


def _add_piece(
    p: tuple[float, float],
    q: tuple[float, float],
    horizontal: list[tuple[float, float, float]],
    vertical: list[tuple[float, float, float]],
) -> None:
    (x0, y0), (x1, y1) = p, q
    if abs(y0 - y1) <= 1.0 and abs(x1 - x0) >= _MIN_RULE:
        horizontal.append(((y0 + y1) / 2, min(x0, x1), max(x0, x1)))
    elif abs(x0 - x1) <= 1.0 and abs(y1 - y0) >= _MIN_RULE:
        vertical.append(((x0 + x1) / 2, min(y0, y1), max(y0, y1)))


def _merge(pieces: list[tuple[float, float, float]]) -> list[tuple[float, float, float]]:
    """Snap pieces at nearly the same position together, then join collinear overlapping ones."""
    pieces.sort()
    snapped: list[list[tuple[float, float, float]]] = []
    for piece in pieces:
        if snapped and piece[0] - snapped[-1][0][0] <= _SNAP:
            snapped[-1].append(piece)
        else:
            snapped.append([piece])
    out: list[tuple[float, float, float]] = []
    for group in snapped:
        pos = sum(p[0] for p in group) / len(group)
        spans = sorted((p[1], p[2]) for p in group)
        lo, hi = spans[0]
        for s0, s1 in spans[1:]:
            if s0 <= hi + _JOIN:
                hi = max(hi, s1)
            else:
                out.append((pos, lo, hi))
                lo, hi = s0, s1
        out.append((pos, lo, hi))
    return out


def ruled_cell_groups(page: Any, height: float, deadline: Deadline) -> list[list[tuple[float, ...]]]:
    """Cells ``(x0, top, x1, bottom)`` grouped into tables (corner-sharing components)."""
    horizontal, vertical = _segments(page, height, deadline)
    hs, vs = _merge(horizontal), _merge(vertical)
    if len(hs) < 2 or len(vs) < 2:
        return []
    if len(hs) > _MAX_RULES or len(vs) > _MAX_RULES:
        raise GridCut(f"more than {_MAX_RULES} rules one way")
    # crossing point -> the rules through it
    points: dict[tuple[float, float], tuple[set[int], set[int]]] = {}
    for vi, (x, y0, y1) in enumerate(vs):
        for hi, (y, x0, x1) in enumerate(hs):
            if x0 - _JOIN <= x <= x1 + _JOIN and y0 - _JOIN <= y <= y1 + _JOIN:
                hset, vset = points.setdefault((x, y), (set(), set()))
                hset.add(hi)
                vset.add(vi)
    deadline.check("pdf table crossings")
    cells = _cells(points)
    return _group_cells(cells)


def _cells(points: dict[tuple[float, float], tuple[set[int], set[int]]]) -> list[tuple[float, ...]]:
    """For each crossing, the smallest rectangle below and right of it with all four sides drawn.

    The crossings below one are walked along its own vertical rules (and those right of it
    along its horizontal ones), lazily, from a bisected start: the first candidates close a
    cell in a grid, so a crossing costs a few steps, not a scan of its whole column and row."""
    on_v: dict[int, list[float]] = {}  # vertical rule -> the ys of its crossings, ascending
    on_h: dict[int, list[float]] = {}
    for (x, y), (h_here, v_here) in sorted(points.items()):
        for v in v_here:
            on_v.setdefault(v, []).append(y)
        for h in h_here:
            on_h.setdefault(h, []).append(x)
    for run in on_h.values():
        run.sort()
    cells: list[tuple[float, ...]] = []
    for (x, y), (h_here, v_here) in points.items():
        right = _after([on_h[h] for h in h_here], x)
        seen: list[float] = []  # right of it, as far as the search went
        found = None
        for yy in _after([on_v[v] for v in v_here], y):
            h_left = points[(x, yy)][0]
            for xx in itertools.chain(seen, _record(right, seen)):
                corner = points.get((xx, yy))
                if corner and corner[1] & points[(xx, y)][1] and corner[0] & h_left:
                    found = (x, y, xx, yy)
                    break
            if found:
                break
        if found:
            cells.append(found)
    return cells


def _after(runs: list[list[float]], start: float) -> Any:
    """The values past ``start`` in ascending ``runs``, merged, each once."""
    tails = [_tail(run, start) for run in runs]
    last = None
    for value in tails[0] if len(tails) == 1 else heapq.merge(*tails):
        if value != last:
            yield value
            last = value


def _tail(run: list[float], start: float) -> Any:
    return (run[i] for i in range(bisect.bisect_right(run, start), len(run)))


def _record(values: Any, seen: list[float]) -> Any:
    for value in values:
        seen.append(value)
        yield value


def _group_cells(cells: list[tuple[float, ...]]) -> list[list[tuple[float, ...]]]:
    """Corner-sharing components, by union-find: cell ``t`` founds group ``t`` and absorbs the
    groups its corners touch, newest first; groups come out in the order they were last merged
    and each lists its founder, then its absorbed groups' cells (the order ruled tables fill in)."""
    parent: list[int] = []
    absorbed: list[list[int]] = []
    group_at: dict[tuple[float, float], int] = {}  # corner -> a group that has it
    for t, cell in enumerate(cells):
        corners = ((cell[0], cell[1]), (cell[2], cell[1]), (cell[0], cell[3]), (cell[2], cell[3]))
        roots = {_root(parent, group_at[c]) for c in corners if c in group_at}
        parent.append(t)
        absorbed.append(sorted(roots, reverse=True))
        for r in roots:
            parent[r] = t
        for c in corners:
            group_at[c] = t
    groups = []
    for g in range(len(cells)):
        if parent[g] != g:
            continue
        members, stack = [], [g]
        while stack:
            node = stack.pop()
            members.append(cells[node])
            stack.extend(reversed(absorbed[node]))
        groups.append(members)
    return groups


def _root(parent: list[int], g: int) -> int:
    top = g
    while parent[top] != top:
        top = parent[top]
    while parent[g] != top:  # path compression: later look-ups take one step
        parent[g], g = top, parent[g]
    return top
