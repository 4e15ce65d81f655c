"""Excel number formats, enough to render cells "as shown": decimals, thousands, percent,
scientific, literal prefixes/suffixes and date/time patterns. Anything exotic (fractions,
conditions) falls back to the General rendering, which never loses digits that matter.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

__all__ = ["BUILTIN_FORMATS", "excel_serial_to_datetime", "format_value", "is_date_format", "is_duration_format"]

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


def _decimal(value: float) -> Decimal:
    """The value as Excel holds it for display: 15 significant digits (Excel's precision)."""
    return Decimal(format(value, ".15g"))


def _round(value: Decimal, decimals: int) -> Decimal:
    # Excel rounds halves away from zero ("0%" shows 0.025 as 3%, "0.00" shows 2.675 as
    # 2.68), where Python's format() rounds the binary double half to even
    return value.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)


def _scientific(value: Decimal, core: str, decimals: int) -> str:
    """``0.00E+00`` and engineering ``##0.0E+0``: mantissa digits, exponent step and width.

    The exponent is a multiple of the number of integer placeholders when there are several
    ("##0.0E+0" writes 45000 as 45.0E+3, as Excel does); it has at least as many digits as
    zeros follow ``E+``; ``E+`` shows the exponent's sign always, ``E-`` only when negative.
    """
    mantissa_spec, exp_spec = re.split(r"[eE]", core, maxsplit=1)
    step = max(1, len(re.sub(r"[^#0?]", "", mantissa_spec.split(".")[0]))) if "#" in mantissa_spec else 1
    exp_width = max(1, exp_spec.count("0"))
    exponent = 0 if value == 0 else value.adjusted()
    exponent -= exponent % step
    mantissa = _round(value.scaleb(-exponent), decimals)
    if value != 0 and abs(mantissa) >= 10**step:  # 9.995 rounded up to 10.00: one step further
        exponent += step
        mantissa = _round(value.scaleb(-exponent), decimals)
    sign = "-" if exponent < 0 else ("+" if exp_spec.startswith("+") else "")
    return f"{mantissa:.{decimals}f}E{sign}{abs(exponent):0{exp_width}d}"


_FRACTION = re.compile(r"(?:([#0?,]+)([ ]+))?([#0?]+)/([#0?]+|[1-9][0-9]*)")


def _fraction(value: float, lit: str, match: re.Match[str]) -> str:
    """``# ?/?`` (built-in 12), ``# ??/??`` (13), ``?/8`` ...: a mixed or improper fraction.

    The denominator is the closest one with as many digits as its placeholders (ECMA-376
    Part 1, 18.8.31: "?/?" up to 9, "??/??" up to 99), or the fixed one written; "?" pads with
    spaces, which are trimmed here. Without an integer part the fraction is improper (5/2).
    """
    whole_spec, gap, _num_spec, den_spec = match.groups()
    magnitude = Fraction(_decimal(abs(value)))
    if den_spec.isdigit():
        frac = Fraction(round(magnitude * int(den_spec)), int(den_spec))
        numerator, denominator = frac.numerator * int(den_spec) // frac.denominator, int(den_spec)
    else:
        frac = magnitude.limit_denominator(10 ** len(den_spec) - 1)
        numerator, denominator = frac.numerator, frac.denominator
    sign = "-" if value < 0 and numerator else ""
    if whole_spec is None:
        body = f"{numerator}/{denominator}"
    else:
        whole, numerator = divmod(numerator, denominator)
        whole_text = str(whole) if whole or "0" in whole_spec or not numerator else ""
        body = f"{whole_text}{gap}{numerator}/{denominator}" if numerator else whole_text
    prefix, suffix = lit[: match.start()], lit[match.end() :]
    return f"{prefix}{sign}{body}{suffix}".strip()


def _fixed(number: Decimal, core: str, decimals: int) -> str:
    """Digits for a ``#,##0.00``-like placeholder run (ECMA-376 Part 1, 18.8.31).

    ``0`` shows a digit always; ``#`` and ``?`` only significant ones, so "#.##" writes 0.5 as
    ".5" and "0.0#" writes 1.5 as "1.5" (a ``?`` would pad with a space, not reproduced).
    """
    int_spec, _, dec_spec = core.partition(".")
    rounded = _round(abs(number), decimals)
    body = f"{rounded:{',' if ',' in int_spec else ''}.{decimals}f}"
    if decimals:
        keep = dec_spec.rfind("0") + 1  # digits up to the last "0" placeholder always show
        whole, frac = body.split(".")
        body = f"{whole}.{frac[:keep] + frac[keep:].rstrip('0')}"
    if "0" not in int_spec and body.split(".")[0] == "0":
        body = body[1:]
    if number < 0 and rounded != 0:
        body = "-" + body
    return body


def _number(value: float, section: str) -> str:
    lit = _literal(_BRACKETS.sub("", section))
    fraction = _FRACTION.search(lit)
    if fraction:
        return _fraction(value, lit, fraction)
    m = re.search(r"[#0?][#0?,]*(?:\.[#0?]*)?(?:[eE][+-][0#]+)?%?", lit)
    if not m:
        if "@" in lit:
            return lit.replace("@", _general(value))
        if "general" in lit.lower():
            return re.sub("(?i)general", _general(value), lit)
        # a section of text only (the "-" of an accounting format's zero section) shows as is
        return lit.strip() or _general(value)
    core = m.group(0)
    prefix, suffix = lit[: m.start()], lit[m.end() :]
    if core.endswith("%"):
        suffix = "%" + suffix
    number = _decimal(value)
    if "%" in core or "%" in suffix:
        number = number * 100
    decimals = len(core.split(".", 1)[1].rstrip("%").split("E")[0].split("e")[0]) if "." in core else 0
    decimals = min(decimals, _MAX_DECIMALS)
    if "E" in core.upper():
        body = _scientific(number, core.rstrip("%"), decimals)
    else:
        body = _fixed(number, core.rstrip("%"), decimals)
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


# The built-in formats a numFmtId below 164 stands for when the styles part has no numFmt
# element of that id (ECMA-376 Part 1, 18.8.30), as openpyxl tabulates them. The table
# differs from what Excel shows for three of them: 44 lost its section
# separators, 47 its colon (ECMA-376 Part 1, 18.8.30 lists "mm:ss.0"), and 14 and 22 are the
# locale's short date, which Excel and LibreOffice show with a four-digit year in en-US
_BUILTIN_FIXES = {
    '_("$"* #,##0.00_)_("$"* \\(#,##0.00\\)_("$"* "-"??_)_(@_)': (
        '_("$"* #,##0.00_);_("$"* \\(#,##0.00\\);_("$"* "-"??_);_(@_)'
    ),
    "mmss.0": "mm:ss.0",
    "mm-dd-yy": "m/d/yyyy",
    "m/d/yy h:mm": "m/d/yyyy h:mm",
}


def _section(fmt: str, value: object) -> tuple[str, object]:
    """The format section for ``value`` (positive;negative;zero;text, ECMA-376 Part 1, 18.8.31)
    and the value to render with it (a negative number's own section shows its magnitude)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return fmt, value
    parts = fmt.split(";")
    if value < 0 and len(parts) > 1 and parts[1]:
        return parts[1], abs(value)
    if value == 0 and len(parts) > 2 and parts[2]:
        return parts[2], value
    return parts[0], value


def format_value(value: object, number_format: str | None) -> str:
    """Render a cell value the way a spreadsheet would display it."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    fmt = number_format or "General"
    if len(fmt) > _MAX_FORMAT_LEN:
        fmt = "General"
    fmt = _BUILTIN_FIXES.get(fmt, fmt)
    section, value = _section(fmt, value)
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


BUILTIN_FORMATS: dict[int, str] = {
    0: "General", 1: "0", 2: "0.00", 3: "#,##0", 4: "#,##0.00",
    5: '"$"#,##0_);("$"#,##0)', 6: '"$"#,##0_);[Red]("$"#,##0)',
    7: '"$"#,##0.00_);("$"#,##0.00)', 8: '"$"#,##0.00_);[Red]("$"#,##0.00)',
    9: "0%", 10: "0.00%", 11: "0.00E+00", 12: "# ?/?", 13: "# ??/??",
    14: "mm-dd-yy", 15: "d-mmm-yy", 16: "d-mmm", 17: "mmm-yy", 18: "h:mm AM/PM", 19: "h:mm:ss AM/PM",
    20: "h:mm", 21: "h:mm:ss", 22: "m/d/yy h:mm",
    37: "#,##0_);(#,##0)", 38: "#,##0_);[Red](#,##0)", 39: "#,##0.00_);(#,##0.00)", 40: "#,##0.00_);[Red](#,##0.00)",
    41: r'_(* #,##0_);_(* \(#,##0\);_(* "-"_);_(@_)',
    42: r'_("$"* #,##0_);_("$"* \(#,##0\);_("$"* "-"_);_(@_)',
    43: r'_(* #,##0.00_);_(* \(#,##0.00\);_(* "-"??_);_(@_)',
    44: r'_("$"* #,##0.00_)_("$"* \(#,##0.00\)_("$"* "-"??_)_(@_)',
    45: "mm:ss", 46: "[h]:mm:ss", 47: "mmss.0", 48: "##0.0E+0", 49: "@",
}  # fmt: skip

# quoted literals and bracketed locale or colour codes, but not the elapsed-time [h] [m] [s]
_NOT_DATE_PARTS = re.compile(r'".*?"|\[(?!hh?\]|mm?\]|ss?\])[^\]]*\]')
_DATE_LETTER = re.compile(r"(?<![_\\])[dmhysDMHYS]")
_DURATION = re.compile(r"\[hh?\](:mm(:ss(\.0*)?)?)?|\[mm?\](:ss(\.0*)?)?|\[ss?\](\.0*)?", re.I)
# serials from 61 on count Lotus's phantom 1900-02-29, so the epoch that makes them right
# is 1899-12-30 (ECMA-376 Part 1, 18.17.4.1); the 1904 system counts from its day 0
_EPOCH_1900 = dt.datetime(1899, 12, 30)
_EPOCH_1904 = dt.datetime(1904, 1, 1)


def is_date_format(fmt: str | None) -> bool:
    """Does a number with this format show as a date or time (its first section has a date or
    time letter outside quotes and locale brackets)?"""
    if not fmt:
        return False
    return _DATE_LETTER.search(_NOT_DATE_PARTS.sub("", fmt.split(";")[0])) is not None


def is_duration_format(fmt: str | None) -> bool:
    """Elapsed time (``[h]:mm:ss``): the serial is a duration, not a point in time."""
    return bool(fmt) and _DURATION.search(fmt.split(";")[0]) is not None  # type: ignore[union-attr]


def excel_serial_to_datetime(
    serial: float, date1904: bool = False, duration: bool = False
) -> dt.datetime | dt.time | dt.timedelta:
    """A date-formatted cell's serial as the value Excel shows, to the millisecond.

    In the 1900 system serials below 1 are times of day (Excel shows day 0 as "1900-01-00")
    and serials 1-59 sit before the phantom leap day, so they take one day more. Raises OverflowError or ValueError outside Python's dates.
    """
    if duration:
        td = dt.timedelta(days=serial)
        if td.microseconds:
            td = dt.timedelta(seconds=td.total_seconds() // 1, microseconds=round(td.microseconds, -3))
        return td
    day, fraction = divmod(serial, 1)
    diff = dt.timedelta(milliseconds=round(fraction * 86_400_000))
    if 0 <= serial < 1 and diff.days == 0 and not date1904:
        return (dt.datetime.min + diff).time()
    if 0 < serial < 60 and not date1904:
        day += 1
    return (_EPOCH_1904 if date1904 else _EPOCH_1900) + dt.timedelta(days=day) + diff
