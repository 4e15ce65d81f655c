"""DOCX styles and numbering read from the package XML (python-docx exposes neither fully).

* heading level of a paragraph: its own ``w:outlineLvl``, else the style chain's (``basedOn``
  followed, so "My Heading" based on "Heading 2" is a level-2 heading), else a style named
  "heading N" / "Title";
* list numbering: ``w:numPr`` of the paragraph or its style chain, rendered with the level's
  ``numFmt`` and ``lvlText`` ("%1.%2.") and counters kept per list.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from lxml import etree

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_W = f"{{{W}}}"
_HEADING_NAME = re.compile(r"^heading\s*([1-9])$", re.I)
# ECMA-376 Part 1, 17.9.3 (ilvl) and 17.9.7 (lvl): list levels are 0..8; a larger ilvl is
# clamped to the deepest level, as Word renders it (the text is unchanged).
MAX_ILVL = 8
# Word refuses start values above 32767 (its "Start at" field); anything larger only serves to
# build unbounded markers.
MAX_START = 32_767
# Word's lvlText is at most 255 characters
_MAX_LVL_TEXT = 255
# a letter marker repeats its letter once per 26 (32767 -> 1261 "z"s): past this many letters
# the number is written in decimal instead, so that no marker carries more than a line
_MAX_LETTERS = 8

__all__ = ["MAX_ILVL", "Numbering", "Styles", "W", "clamp_ilvl", "wval"]


def clamp_ilvl(value: str | None) -> int | None:
    """A list level from its attribute, clamped to ECMA-376's 0..8 (None when absent or junk)."""
    if not value or not value.isdigit():
        return None
    digits = value.lstrip("0")
    return min(int(digits), MAX_ILVL) if 0 < len(digits) <= 2 else (0 if not digits else MAX_ILVL)


def _clamp_start(value: str | None) -> int:
    if not value or not value.lstrip("-").isdigit():
        return 1
    if value.startswith("-"):
        return 0
    digits = value.lstrip("0")
    return min(int(digits), MAX_START) if len(digits) <= 5 else MAX_START


def wval(el: etree._Element | None, child: str) -> str | None:
    """``w:val`` of ``el/w:<child>``, or None."""
    if el is None:
        return None
    found = el.find(f"{_W}{child}")
    return None if found is None else found.get(f"{_W}val")


@dataclass(slots=True)
class _Style:
    name: str
    based_on: str | None
    outline: int | None
    num_id: str | None
    ilvl: int | None


class Styles:
    def __init__(self, styles_root: etree._Element | None) -> None:
        self._styles: dict[str, _Style] = {}
        self.default_paragraph: str | None = None
        if styles_root is None:
            return
        for st in styles_root.iter(f"{_W}style"):
            sid = st.get(f"{_W}styleId")
            if not sid:
                continue
            ppr = st.find(f"{_W}pPr")
            outline = wval(ppr, "outlineLvl")
            numpr = ppr.find(f"{_W}numPr") if ppr is not None else None
            ilvl = wval(numpr, "ilvl")
            self._styles[sid] = _Style(
                name=(wval(st, "name") or sid).strip(),
                based_on=wval(st, "basedOn"),
                outline=int(outline) if outline and outline.isdigit() else None,
                num_id=wval(numpr, "numId"),
                ilvl=clamp_ilvl(ilvl),
            )
            if st.get(f"{_W}type") == "paragraph" and st.get(f"{_W}default") in ("1", "true"):
                self.default_paragraph = sid

    def _chain(self, sid: str | None) -> Iterator[_Style]:
        seen: set[str] = set()
        while sid and sid in self._styles and sid not in seen:
            seen.add(sid)
            yield self._styles[sid]
            sid = self._styles[sid].based_on

    def name(self, sid: str | None) -> str | None:
        st = self._styles.get(sid or "")
        return st.name if st else None

    def heading_level(self, sid: str | None, own_outline: str | None) -> int | None:
        if own_outline is not None and own_outline.isdigit():
            lvl = int(own_outline)
            return lvl + 1 if lvl < 9 else None  # 9 means "body text"
        for st in self._chain(sid):
            if st.outline is not None:
                return st.outline + 1 if st.outline < 9 else None
            m = _HEADING_NAME.match(st.name)
            if m:
                return int(m.group(1))
            if st.name.lower() == "title":
                return 1
        return None

    def numbering(self, sid: str | None) -> tuple[str | None, int | None]:
        for st in self._chain(sid):
            if st.num_id is not None:
                return st.num_id, st.ilvl
        return None, None


@dataclass(slots=True)
class _Level:
    fmt: str = "decimal"
    text: str = "%1."
    start: int = 1


@dataclass(slots=True)
class _List:
    levels: dict[int, _Level] = field(default_factory=dict)
    counters: dict[int, int] = field(default_factory=dict)


def _levels(parent: etree._Element) -> dict[int, _Level]:
    out: dict[int, _Level] = {}
    for lvl in parent.findall(f"{_W}lvl"):
        ilvl = clamp_ilvl(lvl.get(f"{_W}ilvl"))
        if ilvl is None:
            continue
        text = wval(lvl, "lvlText")
        out[ilvl] = _Level(
            fmt=wval(lvl, "numFmt") or "decimal",
            text=text[:_MAX_LVL_TEXT] if text is not None else "%1.",
            start=_clamp_start(wval(lvl, "start")),
        )
    return out


def _roman(n: int) -> str:
    if n > 3999:  # no roman numeral past MMMCMXCIX: the number itself, not 4,000+ "m"s
        return str(n)
    vals = (
        (1000, "m"),
        (900, "cm"),
        (500, "d"),
        (400, "cd"),
        (100, "c"),
        (90, "xc"),
        (50, "l"),
        (40, "xl"),
        (10, "x"),
        (9, "ix"),
        (5, "v"),
        (4, "iv"),
        (1, "i"),
    )
    out = ""
    for v, s in vals:
        while n >= v:
            out += s
            n -= v
    return out


def _letters(n: int) -> str:
    # Word repeats the letter: a..z, aa..zz
    if n <= 0:
        return ""
    repeat = (n - 1) // 26 + 1
    return chr(97 + (n - 1) % 26) * repeat if repeat <= _MAX_LETTERS else str(n)


def _format(n: int, fmt: str) -> str:
    if fmt in ("lowerLetter",):
        return _letters(n)
    if fmt == "upperLetter":
        return _letters(n).upper()
    if fmt == "lowerRoman":
        return _roman(n)
    if fmt == "upperRoman":
        return _roman(n).upper()
    if fmt == "decimalZero":
        return f"{n:02d}"
    return str(n)


class Numbering:
    def __init__(self, numbering_root: etree._Element | None) -> None:
        self._lists: dict[str, _List] = {}
        if numbering_root is None:
            return
        abstract = {a.get(f"{_W}abstractNumId"): _levels(a) for a in numbering_root.findall(f"{_W}abstractNum")}
        for num in numbering_root.findall(f"{_W}num"):
            nid = num.get(f"{_W}numId")
            aid = wval(num, "abstractNumId")
            levels = {k: _Level(v.fmt, v.text, v.start) for k, v in abstract.get(aid, {}).items()}
            for ov in num.findall(f"{_W}lvlOverride"):
                ilvl = clamp_ilvl(ov.get(f"{_W}ilvl"))
                if ilvl is None:
                    continue
                lvl_el = ov.find(f"{_W}lvl")
                if lvl_el is not None:
                    levels.update(_levels(ov))
                start = wval(ov, "startOverride")
                if start and start.isdigit():
                    levels.setdefault(ilvl, _Level()).start = _clamp_start(start)
            if nid:
                self._lists[nid] = _List(levels)

    def marker(self, num_id: str, ilvl: int) -> tuple[str, bool]:
        """Advance the list's counter at ``ilvl``; return (marker text, ordered?)."""
        lst = self._lists.get(num_id)
        if lst is None:
            return "-", False
        ilvl = max(0, min(ilvl, MAX_ILVL))
        level = lst.levels.get(ilvl, _Level())
        lst.counters[ilvl] = lst.counters.get(ilvl, level.start - 1) + 1
        for deeper in [k for k in lst.counters if k > ilvl]:
            del lst.counters[deeper]
        if level.fmt in ("bullet", "none"):
            return "-", False

        def sub(m: re.Match[str]) -> str:
            k = int(m.group(1)) - 1
            lv = lst.levels.get(k, _Level())
            return _format(lst.counters.get(k, lv.start), lv.fmt)

        text = re.sub(r"%([1-9])", sub, level.text).strip()
        return text or "-", True
