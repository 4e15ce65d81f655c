"""Rebuild a Yuque *lakesheet* document as a real .xlsx workbook.

A lakesheet doc's ``body`` (or ``body_draft``) is a JSON wrapper whose ``sheet`` string is a zlib
stream stored one byte per character (latin-1). Inflated, it is a JSON array of sheet models::

    {"name", "index", "data": {"<row>": {"<col>": {"v": ..., "s": <style index>}}},
     "rows": {"<row>": {"size": px}}, "columns": {"<col>": {"size": px}},
     "mergeCells": {...: {"row", "col", "rowCount", "colCount"}},
     "vStore": {"style": ["z11w7h1b0", ...], "style_color": [...], "style_backColor": [...]}}

(see the shared reference ``yuque-api.md`` §4; the keys above are the ones real payloads carry,
not the ``cell["value"]`` / inline ``style`` / list-shaped ``rows`` a well-known converter reads).

The inflate is bounded: the stream is decompressed in ``max_length`` steps and abandoned as soon
as the output passes the cap, so a zlib bomb costs at most the cap in memory. Without a wrapper,
the plain ``body_sheet`` table (values only) is used.

openpyxl writes formula cells without a cached value; the values Yuque computed are injected into
the saved sheet XML afterwards (:mod:`._xlsx_cache`).
"""

from __future__ import annotations

import io
import json
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from openpyxl import Workbook
from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE
from openpyxl.styles import Alignment, Font, PatternFill
from openpyxl.utils import get_column_letter
from zlib_ng import zlib_ng

from plugins.connectors.yuque._xlsx_cache import inject_cached_values

__all__ = [
    "DEFAULT_MAX_SHEET_BYTES",
    "XLSX_MEDIA_TYPE",
    "LakesheetError",
    "column_width",
    "decode_sheets",
    "find_wrapper",
    "inflate_bounded",
    "lakesheet_to_xlsx",
    "sanitize_sheet_names",
    "workbook_from_body_sheet",
    "workbook_from_sheets",
]

log = logging.getLogger(__name__)

XLSX_MEDIA_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
DEFAULT_MAX_SHEET_BYTES = 64 * 1024 * 1024
_MAX_ROW, _MAX_COL = 1_048_576, 16_384
_INFLATE_STEP = 1024 * 1024
_BAD_NAME_CHARS = re.compile(r"[\[\]:*?/\\]")
_STYLE_TOKEN = re.compile(r"([a-z])(\d+)")
_INT_RE = re.compile(r"-?(?:0|[1-9]\d{0,14})")
_FLOAT_RE = re.compile(r"-?(?:0|[1-9]\d*)\.\d+")
# an IEEE double holds 15 significant decimal digits exactly; more and the digits change
_MAX_DIGITS = 15
# Excel's column width is in characters of the default font's maximum digit width (7 px for
# Calibri 11) plus 5 px of cell padding: width = trunc((px - 5) / 7 * 100 + 0.5) / 100
# (ECMA-376 Part 1, 18.3.1.13 "col", the pixels-to-width formula)
_DIGIT_PX, _PADDING_PX = 7.0, 5.0
_H_ALIGN = {0: "left", 1: "center", 2: "right"}
_FILE_CLASSES = ("image", "file")


class LakesheetError(ValueError):
    """The sheet cannot be rebuilt. ``code`` is ``bomb``, ``corrupt`` or ``empty``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------- decoding


def find_wrapper(*bodies: str | None) -> dict[str, Any] | None:
    """The first body (in the order given: ``body``, then ``body_draft``) that is a lakesheet
    wrapper, i.e. a JSON object whose ``sheet`` is a string."""
    for body in bodies:
        if not body or not body.lstrip().startswith("{"):
            continue
        try:
            parsed = json.loads(body)
        except ValueError:
            continue
        if isinstance(parsed, dict) and isinstance(parsed.get("sheet"), str) and parsed["sheet"]:
            return parsed
    return None


def inflate_bounded(data: bytes, max_bytes: int = DEFAULT_MAX_SHEET_BYTES) -> bytes:
    """zlib-inflate ``data`` but never hold more than ``max_bytes`` (+ one step) of output."""
    inflater = zlib_ng.decompressobj()
    out = bytearray()
    pending = data
    try:
        while pending and not inflater.eof:
            # max_length must stay >= 1: zero would mean "unbounded" to zlib
            room = max(1, min(_INFLATE_STEP, max_bytes + 1 - len(out)))
            out += inflater.decompress(pending, room)
            if len(out) > max_bytes:
                raise LakesheetError("bomb", f"sheet inflates beyond the {max_bytes}-byte cap")
            pending = inflater.unconsumed_tail
    except zlib_ng.error as exc:  # type: ignore[misc]  # the stub declares ``error`` an instance, not a class
        raise LakesheetError("corrupt", f"sheet is not a valid zlib stream: {exc}") from None
    if not inflater.eof:
        raise LakesheetError("corrupt", "sheet zlib stream is truncated")
    return bytes(out)


def decode_sheets(wrapper: Mapping[str, Any], max_bytes: int = DEFAULT_MAX_SHEET_BYTES) -> list[dict[str, Any]]:
    """The sheet models inside a wrapper, as a list (some versions carry a single object)."""
    text = wrapper.get("sheet")
    if not isinstance(text, str) or not text:
        raise LakesheetError("empty", "wrapper has no 'sheet' string")
    try:
        raw = text.encode("latin-1")
    except UnicodeEncodeError:
        # already-decoded JSON (never seen from Yuque, but cheap to accept)
        raw = text.encode("utf-8")
    if raw[:1] == b"x":  # zlib header (78 01/5E/9C/DA)
        raw = inflate_bounded(raw, max_bytes)
    elif len(raw) > max_bytes:
        raise LakesheetError("bomb", f"sheet is larger than the {max_bytes}-byte cap")
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        decoded = raw.decode("gb18030", errors="replace")
    try:
        model = json.loads(decoded)
    except ValueError as exc:
        raise LakesheetError("corrupt", f"inflated sheet is not JSON: {exc}") from None
    sheets = [model] if isinstance(model, dict) else model
    if not isinstance(sheets, list):
        raise LakesheetError("corrupt", f"sheet model is {type(model).__name__}, not a list")
    return [s for s in sheets if isinstance(s, dict)]


# --------------------------------------------------------------------------- names, values


def sanitize_sheet_names(names: Sequence[object]) -> list[str]:
    """Excel rules: 1..31 chars, none of ``[]:*?/\\``, not starting/ending with an apostrophe,
    unique ignoring case, and not the reserved ``History``."""
    result: list[str] = []
    taken: set[str] = set()
    for i, name in enumerate(names):
        base = _BAD_NAME_CHARS.sub("_", ILLEGAL_CHARACTERS_RE.sub("", str(name or ""))).strip().strip("'").strip()
        base = base[:31] or f"Sheet{i + 1}"
        if base.lower() == "history":
            base = "History_"
        candidate, n = base, 1
        while candidate.lower() in taken:
            n += 1
            suffix = f" ({n})"
            candidate = base[: 31 - len(suffix)] + suffix
        taken.add(candidate.lower())
        result.append(candidate)
    return result


def _clean(text: str) -> str:
    cleaned: str = ILLEGAL_CHARACTERS_RE.sub("", text)  # openpyxl is untyped: its pattern is Any
    return cleaned


def _typed(text: str) -> Any:
    """Numbers typed in the Yuque UI arrive as strings; store them as numbers where that is
    lossless (no leading zeros, at most 15 significant digits)."""
    if _INT_RE.fullmatch(text):
        return int(text)
    if _FLOAT_RE.fullmatch(text) and _significant_digits(text) <= _MAX_DIGITS:
        return float(text)
    return _clean(text)


def _significant_digits(decimal: str) -> int:
    """Digits of ``-123.4500`` that a double must hold: all but the leading zeros."""
    return len(decimal.lstrip("-").replace(".", "").lstrip("0"))


def column_width(px: float) -> float:
    """Pixels (what Yuque stores) -> Excel's character-based column width."""
    return max(0.0, math.trunc((px - _PADDING_PX) / _DIGIT_PX * 100 + 0.5) / 100)


def _object_text(value: dict[str, Any]) -> str:
    """checkbox / select / link / image / file / unknown object -> the text a reader sees."""
    cls = value.get("class")
    if cls == "select":
        labels = {}
        for opt in value.get("options") or []:
            if isinstance(opt, dict) and "value" in opt:
                labels[str(opt["value"])] = str(opt.get("label") or opt.get("text") or opt["value"])
        chosen = value.get("value")
        chosen = chosen if isinstance(chosen, list) else [] if chosen is None else [chosen]
        return ", ".join(labels.get(str(c), str(c)) for c in chosen)
    if cls == "link":
        return str(value.get("text") or value.get("url") or "")
    if cls in ("image", "file"):
        return str(value.get("name") or value.get("src") or "")
    for key in ("text", "value", "name"):
        if value.get(key) not in (None, ""):
            inner = value[key]
            return ", ".join(map(str, inner)) if isinstance(inner, list) else str(inner)
    return ""


def _quote_sheet(name: str) -> str:
    return "'" + name.replace("'", "''") + "'"


def _renamer(originals: list[Any], titles: list[str]) -> Callable[[str], str]:
    """Rewrite ``'old name'!A1`` / ``old!A1`` references in formulas to the sanitised titles."""
    renames: dict[str, str] = {}
    for old, new in zip(originals, titles, strict=True):
        if isinstance(old, str) and old and old != new:
            renames.setdefault(old, new)  # duplicates: a reference can only have meant the first
    if not renames:
        return lambda formula: formula
    alternatives = []
    for old in sorted(renames, key=len, reverse=True):
        alternatives.append(re.escape(_quote_sheet(old)))
        if re.fullmatch(r"[^\W\d]\w*", old):  # unquoted references are only legal for plain names
            alternatives.append(r"(?<![\w.'])" + re.escape(old))
    pattern = re.compile("(" + "|".join(alternatives) + ")!")

    def rewrite(formula: str) -> str:
        def sub(m: re.Match[str]) -> str:
            ref = m.group(1)
            old = ref[1:-1].replace("''", "'") if ref.startswith("'") else ref
            return _quote_sheet(renames[old]) + "!"

        return pattern.sub(sub, formula)

    return rewrite


def _cell_value(v: Any, rename: Callable[[str], str] = lambda f: f) -> tuple[Any, str | None, Any, str | None]:
    """-> (value to write, formula or None, cached value for a formula, hyperlink or None)."""
    if isinstance(v, bool | int | float):
        return v, None, None, None
    if isinstance(v, str):
        return _typed(v), None, None, None
    if isinstance(v, dict):
        if v.get("class") == "formula":
            formula = str(v.get("formula") or "").strip()
            cached = v.get("value")
            if isinstance(cached, str):
                cached = _typed(cached)
            elif isinstance(cached, dict | list):
                cached = _object_text(cached) if isinstance(cached, dict) else ", ".join(map(str, cached))
            if not formula:
                return cached, None, None, None
            formula = "=" + rename(formula.lstrip("="))
            return formula, formula, cached, None
        if v.get("class") == "checkbox":
            # a real boolean cell, as Excel's own checkbox cells (and the public converters) hold
            return bool(v.get("value")), None, None, None
        # links, and image / file cells: the name stays the text, the target becomes the
        # hyperlink (gxr404/yuque-dl src/parse/sheet.ts writes image cells as ![name](src))
        link = v.get("url") if v.get("class") == "link" else v.get("src") if v.get("class") in _FILE_CLASSES else None
        if isinstance(link, str) and not re.match(r"(?i)^(https?:|mailto:)", link):
            link = None
        return _clean(_object_text(v)), None, None, link
    if isinstance(v, list):
        return _clean(", ".join(map(str, v))), None, None, None
    return None, None, None, None


# --------------------------------------------------------------------------- styles


def _argb(color: Any) -> str | None:
    if not isinstance(color, str):
        return None
    color = color.strip()
    m = re.fullmatch(r"#?([0-9a-fA-F]{6})", color)
    if m:
        return "FF" + m.group(1).upper()
    m = re.fullmatch(r"#([0-9a-fA-F])([0-9a-fA-F])([0-9a-fA-F])", color)
    if m:
        return "FF" + "".join(ch * 2 for ch in m.groups()).upper()
    m = re.fullmatch(r"rgba?\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*(?:,\s*[\d.]+\s*)?\)", color)
    if m:
        return "FF" + "".join(f"{min(int(x), 255):02X}" for x in m.groups())
    return None


class _StyleBook:
    """Turns ``cell.s`` indexes into openpyxl Font/Fill/Alignment, once per index."""

    def __init__(self, vstore: Any) -> None:
        vstore = vstore if isinstance(vstore, dict) else {}
        self._codes = vstore.get("style") if isinstance(vstore.get("style"), list) else []
        self._colors = vstore.get("style_color") if isinstance(vstore.get("style_color"), list) else []
        self._backs = vstore.get("style_backColor") if isinstance(vstore.get("style_backColor"), list) else []
        self._cache: dict[int, tuple[Font | None, PatternFill | None, str | None]] = {}

    def _pick(self, table: list[Any], index: int) -> str | None:
        return _argb(table[index]) if 0 <= index < len(table) else None

    def get(self, index: Any) -> tuple[Font | None, PatternFill | None, str | None]:
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(self._codes):
            return None, None, None
        if index not in self._cache:
            tokens = {k: int(n) for k, n in _STYLE_TOKEN.findall(str(self._codes[index]))}
            font_args: dict[str, Any] = {}
            if "z" in tokens and 1 <= tokens["z"] <= 409:
                font_args["size"] = tokens["z"]
            if "c" in tokens and (color := self._pick(self._colors, tokens["c"])):
                font_args["color"] = color
            if tokens.get("w", 0) >= 7:
                font_args["bold"] = True
            fill = None
            if "b" in tokens and (back := self._pick(self._backs, tokens["b"])):
                fill = PatternFill(fill_type="solid", start_color=back, end_color=back)
            self._cache[index] = (Font(**font_args) if font_args else None, fill, _H_ALIGN.get(tokens.get("h", -1)))
        return self._cache[index]


# --------------------------------------------------------------------------- building


def _index_items(mapping: Any, limit: int) -> list[tuple[int, Any]]:
    """``{"3": x, "12": y}`` -> [(3, x), (12, y)], dropping keys that are not in-range integers."""
    if not isinstance(mapping, dict):
        return []
    items = []
    for key, value in mapping.items():
        try:
            index = int(key)
        except (TypeError, ValueError):
            continue
        if 0 <= index < limit:
            items.append((index, value))
    return sorted(items, key=lambda kv: kv[0])


def _size(entry: Any) -> float | None:
    if not isinstance(entry, dict):
        return None
    size = entry.get("customSize", entry.get("size"))
    return float(size) if isinstance(size, int | float) and not isinstance(size, bool) and size > 0 else None


def _merges(raw: Any) -> list[tuple[int, int, int, int]]:
    """Valid, non-overlapping merge ranges as 1-based (r1, c1, r2, c2)."""
    values = raw.values() if isinstance(raw, dict) else raw if isinstance(raw, list) else []
    taken: list[tuple[int, int, int, int]] = []
    for m in values:
        if not isinstance(m, dict):
            continue
        try:
            r, c, rc, cc = (int(m["row"]), int(m["col"]), int(m.get("rowCount", 1)), int(m.get("colCount", 1)))
        except (KeyError, TypeError, ValueError):
            continue
        if r < 0 or c < 0 or rc < 1 or cc < 1 or rc * cc == 1 or r + rc > _MAX_ROW or c + cc > _MAX_COL:
            continue
        box = (r + 1, c + 1, r + rc, c + cc)
        if any(not (box[2] < t[0] or t[2] < box[0] or box[3] < t[1] or t[3] < box[1]) for t in taken):
            log.info("lakesheet: overlapping merge %s dropped", box)
            continue
        taken.append(box)
    return taken


def _ordered(sheets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def key(pair: tuple[int, dict[str, Any]]) -> tuple[int, int]:
        index = pair[1].get("index")
        return (index if isinstance(index, int) and not isinstance(index, bool) else 1 << 30, pair[0])

    return [s for _, s in sorted(enumerate(sheets), key=key)]


def workbook_from_sheets(sheets: list[dict[str, Any]]) -> tuple[Workbook, dict[int, dict[str, Any]]]:
    """Build the workbook; also returns {sheet position: {coordinate: cached formula value}}."""
    ordered = _ordered(sheets)
    if not ordered:
        raise LakesheetError("empty", "lakesheet has no sheets")
    wb = Workbook()
    wb.remove(wb.active)
    cached: dict[int, dict[str, Any]] = {}
    originals = [s.get("name") for s in ordered]
    titles = sanitize_sheet_names(originals)
    rename = _renamer(originals, titles)
    for pos, (sheet, title) in enumerate(zip(ordered, titles, strict=True)):
        ws = wb.create_sheet(title=title)
        styles = _StyleBook(sheet.get("vStore"))
        for r, row in _index_items(sheet.get("data"), _MAX_ROW):
            for c, cell in _index_items(row, _MAX_COL):
                if not isinstance(cell, dict) or not cell:
                    continue
                value, formula, cached_value, link = _cell_value(cell.get("v"), rename)
                font, fill, h_align = styles.get(cell.get("s"))
                if value is None and not (font or fill or h_align):
                    continue
                target = ws.cell(row=r + 1, column=c + 1)
                if value is not None:
                    target.value = value
                    if isinstance(value, str) and formula is None and value.startswith("="):
                        target.data_type = "s"  # a literal "=..." string, not a formula
                    elif isinstance(value, float) and isinstance(raw_v := cell.get("v"), str):
                        # "12.50" shows as typed, not as 12.5
                        target.number_format = "0." + "0" * len(raw_v.partition(".")[2])
                if formula is not None and cached_value is not None:
                    cached.setdefault(pos, {})[target.coordinate] = cached_value
                if link:
                    target.hyperlink = link
                if font:
                    target.font = font
                if fill:
                    target.fill = fill
                wrap = isinstance(value, str) and "\n" in value
                if h_align or wrap:
                    target.alignment = Alignment(horizontal=h_align, wrap_text=wrap or None)
        for c, entry in _index_items(sheet.get("columns"), _MAX_COL):
            if (px := _size(entry)) is not None:
                ws.column_dimensions[get_column_letter(c + 1)].width = column_width(px)
        for r, entry in _index_items(sheet.get("rows"), _MAX_ROW):
            if (px := _size(entry)) is not None:
                ws.row_dimensions[r + 1].height = round(px * 0.75, 2)
        for r1, c1, r2, c2 in _merges(sheet.get("mergeCells")):
            ws.merge_cells(start_row=r1, start_column=c1, end_row=r2, end_column=c2)
    return wb, cached


def workbook_from_body_sheet(body_sheet: str) -> Workbook:
    """The plain ``body_sheet`` fallback: ``{"data": [{"name", "index", "table": [[str]]}]}``."""
    try:
        parsed = json.loads(body_sheet)
    except ValueError as exc:
        raise LakesheetError("corrupt", f"body_sheet is not JSON: {exc}") from None
    sheets = parsed.get("data") if isinstance(parsed, dict) else None
    if not isinstance(sheets, list) or not sheets:
        raise LakesheetError("empty", "body_sheet has no sheets")
    sheets = _ordered([s for s in sheets if isinstance(s, dict)])
    wb = Workbook()
    wb.remove(wb.active)
    for sheet, title in zip(sheets, sanitize_sheet_names([s.get("name") for s in sheets]), strict=True):
        ws = wb.create_sheet(title=title)
        for r, row in enumerate(sheet.get("table") or [], start=1):
            for c, text in enumerate(row if isinstance(row, list) else [], start=1):
                if text in (None, ""):
                    continue
                value = _typed(text) if isinstance(text, str) else text
                cell = ws.cell(row=r, column=c, value=value)
                if isinstance(value, str) and value.startswith("="):
                    cell.data_type = "s"
    return wb


def _is_body_sheet(text: str | None) -> bool:
    """``{"data": [{"table": [...]}, ...]}``: the plain form, wherever a response put it."""
    if not text or not text.lstrip().startswith("{"):
        return False
    try:
        parsed = json.loads(text)
    except ValueError:
        return False
    data = parsed.get("data") if isinstance(parsed, dict) else None
    return isinstance(data, list) and any(isinstance(s, dict) and isinstance(s.get("table"), list) for s in data)


def lakesheet_to_xlsx(
    body: str | None,
    body_draft: str | None = None,
    body_sheet: str | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_SHEET_BYTES,
    modified: datetime | None = None,
) -> bytes:
    """The doc's sheets as .xlsx bytes: wrapper from ``body``, then ``body_draft``, then the plain
    ``body_sheet`` (or that plain form found in ``body``/``body_draft``). Raises
    :class:`LakesheetError` when none of them yields a sheet."""
    wrapper = find_wrapper(body, body_draft)
    cached: dict[int, dict[str, Any]] = {}
    if wrapper is not None:
        wb, cached = workbook_from_sheets(decode_sheets(wrapper, max_bytes))
    elif plain := next((b for b in (body_sheet, body, body_draft) if _is_body_sheet(b)), None):
        wb = workbook_from_body_sheet(plain)
    else:
        raise LakesheetError("empty", "neither body, body_draft nor body_sheet holds a sheet")
    if modified is not None:
        # stable document properties: the same sheet version rebuilds to the same metadata
        stamp = modified.replace(tzinfo=None, microsecond=0)
        wb.properties.created = wb.properties.modified = stamp
    buf = io.BytesIO()
    wb.save(buf)
    return inject_cached_values(buf.getvalue(), cached)
