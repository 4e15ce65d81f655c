"""Excel number formats, enough to render cells "as shown": decimals, thousands, percent,
scientific, literal prefixes/suffixes and date/time patterns. Anything exotic (fractions,
conditions) falls back to the General rendering, which never loses digits that matter.
"""

from __future__ import annotations

import datetime as dt
import re

__all__ = ["format_value"]

_BRACKETS = re.compile(r"\[[^\]]*\]")
_QUOTED = re.compile(r'"([^"]*)"')
# Excel refuses format codes over 255 characters and shows at most 30 decimals: a longer code
# (or more decimals) only serves to make every cell of the sheet megabytes long
_MAX_FORMAT_LEN = 255
_MAX_DECIMALS = 30
_DATE_TOKENS = re.compile(r"(yyyy|yy|mmmmm|mmmm|mmm|mm|m|dddd|ddd|dd|d|hh|h|ss|s|am/pm|a/p|\.0+)", re.I)


def _general(value: float) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        return str(int(value))
    return format(value, ".15g")


def _literal(section: str) -> str:
    """The section with quoted text unquoted and escapes / padding / fill removed."""
    section = _QUOTED.sub(lambda m: m.group(1), section)
    section = re.sub(r"_.", "", section)
    section = re.sub(r"\*.", "", section)
    return section.replace("\\", "")


def _number(value: float, section: str) -> str:
    lit = _literal(_BRACKETS.sub("", section))
    m = re.search(r"[#0?][#0?,]*(?:\.[#0?]*)?(?:[eE][+-][0#]+)?%?", lit)
    if not m:
        return lit.replace("@", _general(value)) if "@" in lit else _general(value)
    core = m.group(0)
    prefix, suffix = lit[: m.start()], lit[m.end() :]
    if core.endswith("%"):
        suffix = "%" + suffix
    if "%" in core or "%" in suffix:
        value = value * 100
    decimals = len(core.split(".", 1)[1].rstrip("%").split("E")[0].split("e")[0]) if "." in core else 0
    decimals = min(decimals, _MAX_DECIMALS)
    if "E" in core.upper():
        body = f"{value:.{decimals}E}"
        mant, exp = body.split("E")
        body = f"{mant}E{exp[0]}{exp[1:].lstrip('0').rjust(2, '0')}"
    else:
        thousands = "," in core.split(".")[0]
        body = f"{abs(value):{',' if thousands else ''}.{decimals}f}"
        if value < 0 and float(body.replace(",", "")) != 0:
            body = "-" + body
    return f"{prefix}{body}{suffix}"


def _date(value: dt.date | dt.datetime | dt.time, section: str) -> str:
    fmt = _literal(_BRACKETS.sub("", section))
    tokens = _DATE_TOKENS.split(fmt)
    twelve = any(t.lower() in ("am/pm", "a/p") for t in tokens)
    out: list[str] = []
    for i, tok in enumerate(tokens):
        low = tok.lower()
        if not low or not _DATE_TOKENS.fullmatch(tok):
            out.append(tok)
            continue
        if low in ("m", "mm"):
            # minutes when after hours or before seconds, else months
            prev = next((t.lower() for t in reversed(tokens[:i]) if _DATE_TOKENS.fullmatch(t or "x")), "")
            nxt = next((t.lower() for t in tokens[i + 1 :] if _DATE_TOKENS.fullmatch(t or "x")), "")
            if prev.startswith("h") or nxt.startswith("s"):
                minute = getattr(value, "minute", 0)
                out.append(f"{minute:02d}" if low == "mm" else str(minute))
                continue
            month = getattr(value, "month", 1)
            out.append(f"{month:02d}" if low == "mm" else str(month))
            continue
        out.append(_date_token(value, low, twelve))
    return "".join(out)


def _date_token(value: dt.date | dt.datetime | dt.time, tok: str, twelve: bool) -> str:
    if tok == "yyyy":
        return f"{getattr(value, 'year', 1900):04d}"
    if tok == "yy":
        return f"{getattr(value, 'year', 1900) % 100:02d}"
    if tok in ("mmm", "mmmm", "mmmmm"):
        name = value.strftime("%B") if isinstance(value, dt.date) else ""
        return name[:3] if tok == "mmm" else (name[:1] if tok == "mmmmm" else name)
    if tok in ("d", "dd"):
        day = getattr(value, "day", 0)
        return f"{day:02d}" if tok == "dd" else str(day)
    if tok in ("ddd", "dddd"):
        name = value.strftime("%A") if isinstance(value, dt.date) else ""
        return name[:3] if tok == "ddd" else name
    if tok in ("h", "hh"):
        hour = getattr(value, "hour", 0)
        if twelve:
            hour = hour % 12 or 12
        return f"{hour:02d}" if tok == "hh" else str(hour)
    if tok in ("s", "ss"):
        sec = getattr(value, "second", 0)
        return f"{sec:02d}" if tok == "ss" else str(sec)
    if tok in ("am/pm", "a/p"):
        pm = getattr(value, "hour", 0) >= 12
        return ("PM" if pm else "AM") if tok == "am/pm" else ("P" if pm else "A")
    if tok.startswith("."):
        micro = getattr(value, "microsecond", 0)
        return "." + f"{micro:06d}"[: len(tok) - 1]
    return tok


def format_value(value: object, number_format: str | None) -> str:
    """Render a cell value the way a spreadsheet would display it."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    fmt = number_format or "General"
    if len(fmt) > _MAX_FORMAT_LEN:
        fmt = "General"
    section = (
        fmt.split(";")[0] if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else fmt
    )
    if ";" in fmt and isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        parts = fmt.split(";")
        section = parts[1] if len(parts) > 1 and parts[1] else parts[0]
        if len(parts) > 1 and parts[1]:
            value = abs(value)
    if isinstance(value, dt.timedelta):
        total = int(value.total_seconds())
        return f"{total // 3600}:{total % 3600 // 60:02d}:{total % 60:02d}"
    if isinstance(value, dt.datetime | dt.date | dt.time):
        if fmt.lower() == "general" or not _DATE_TOKENS.search(_BRACKETS.sub("", section)):
            return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()
        return _date(value, section)
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        if section.strip().lower() in ("general", "", "@"):
            return _general(value)
        try:
            return _number(float(value), section)
        except (ValueError, IndexError):
            return _general(value)
    return str(value)
