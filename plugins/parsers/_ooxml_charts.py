"""DrawingML charts (``c:chartSpace`` parts of DOCX/XLSX/PPTX) as tables of their cached data.

A chart part carries, beside the formulas pointing into its workbook, a cache of what it plots
(ECMA-376 Part 1, 21.2.2: ``c:ser`` with ``c:tx`` the series name, ``c:cat``/``c:xVal`` the
categories and ``c:val``/``c:yVal`` the values, each a ``c:strRef``/``c:numRef`` holding a
``c:strCache``/``c:numCache`` of ``c:pt idx=...``). That cache is what the chart shows, so it is
what a reader searching the document should find: one table per chart, a row per category,
a column per series (header: the chart's title or "", then the series names).

Points are placed by their ``idx`` (a cache may omit empty points); ``idx`` and the number of
rows are capped so that a ``ptCount`` of a billion or an ``idx`` of 2**31 cannot size a table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lxml import etree

from include.contract import Position
from plugins.parsers._common import BlockBuilder, Deadline, clean_text
from plugins.parsers._numfmt import format_value

__all__ = ["C_NS", "ChartTable", "add_chart_block", "chart_table"]

C_NS = "http://schemas.openxmlformats.org/drawingml/2006/chart"
_C = f"{{{C_NS}}}"
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
# Excel charts plot at most 32,000 points per series (Excel's specification and limits) and 255
# series per chart; more only serves to inflate a table from a small part
MAX_POINTS = 32_000
MAX_SERIES = 255


@dataclass(slots=True)
class ChartTable:
    title: str
    kinds: list[str] = field(default_factory=list)  # "barChart", "lineChart" ...
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)


def _points(ref: etree._Element | None) -> dict[int, str]:
    """``idx -> text`` of a ``c:cat``/``c:val``-like element's cached points."""
    if ref is None:
        return {}
    out: dict[int, str] = {}
    for cache in ref.iter(f"{_C}strCache", f"{_C}numCache", f"{_C}strLit", f"{_C}numLit"):
        code = cache.findtext(f"{_C}formatCode")
        for pt in cache.iter(f"{_C}pt"):
            idx_text = pt.get("idx") or ""
            if not idx_text.isdigit() or len(idx_text) > 6 or int(idx_text) >= MAX_POINTS:
                continue
            out[int(idx_text)] = _point_text(pt.findtext(f"{_C}v") or "", pt.get("formatCode") or code, cache)
        break  # a multi-level category cache lists its levels in turn: the first is enough
    return out


def _point_text(raw: str, code: str | None, cache: etree._Element) -> str:
    text = raw.strip()
    if cache.tag in (f"{_C}numCache", f"{_C}numLit") and text:
        try:
            return format_value(float(text), code)
        except ValueError:
            return text
    return clean_text(text)


def _series_name(ser: etree._Element, n: int) -> str:
    tx = ser.find(f"{_C}tx")
    if tx is not None:
        # c:tx holds a literal c:v, a c:strRef whose cache has it (beside the c:f formula) or rich text
        value = " ".join(t.text or "" for t in tx.iter(f"{_C}v", f"{_A}t"))
        if value.strip():
            return clean_text(value)
    return f"Series {n}"


def _title(root: etree._Element) -> str:
    title = root.find(f"{_C}chart/{_C}title")
    if title is None:
        return ""
    return clean_text(" ".join(t.text or "" for t in title.iter(f"{_A}t", f"{_C}v")))


def chart_table(root: etree._Element, deadline: Deadline) -> ChartTable | None:
    """The chart's cached data as a table, or None when it caches nothing."""
    if root.tag != f"{_C}chartSpace":
        return None
    plot = root.find(f"{_C}chart/{_C}plotArea")
    if plot is None:
        return None
    table = ChartTable(_title(root))
    categories: dict[int, str] = {}
    series: list[tuple[str, dict[int, str]]] = []
    for group in plot:
        tag = group.tag if isinstance(group.tag, str) else ""
        if not tag.endswith("Chart"):
            continue
        table.kinds.append(tag.rsplit("}", 1)[-1])
        for ser in group.findall(f"{_C}ser"):
            if len(series) >= MAX_SERIES:
                break
            deadline.check("chart series")
            cat = ser.find(f"{_C}cat")
            categories = categories or _points(cat if cat is not None else ser.find(f"{_C}xVal"))
            val = ser.find(f"{_C}val")
            values = _points(val if val is not None else ser.find(f"{_C}yVal"))
            series.append((_series_name(ser, len(series) + 1), values))
    if not series or not any(values for _, values in series):
        return None
    indexes = sorted(set(categories).union(*(values for _, values in series)))
    table.header = [table.title, *(name for name, _ in series)]
    table.rows = [[categories.get(i, str(i + 1)), *(values.get(i, "") for _, values in series)] for i in indexes]
    return table


def add_chart_block(
    builder: BlockBuilder,
    root: etree._Element | None,
    deadline: Deadline,
    positions: list[Position] | None = None,
    **metadata: object,
) -> bool:
    """Append the chart's table block (``metadata["chart"]`` names its kinds); whether one was added."""
    if root is None:
        return False
    table = chart_table(root, deadline)
    if table is None:
        return False
    if table.title:
        metadata["chart_title"] = table.title
    block = builder.table(table.rows, table.header, positions, chart=",".join(table.kinds), **metadata)
    return block is not None
