"""Text a remote party controls, made safe to put in a log line, an item's error or lineage.

A page's script, a server's error body or a file's metadata can say anything: a newline followed
by something that reads like a log record of its own, terminal escapes (``ESC [2J``), bidi
overrides that reorder what a reader sees (CVE-2021-42574, "Trojan Source"), or megabytes of it.
:func:`escape_untrusted` keeps printable characters (any script: CJK, accents) and writes every
other one as a Python-style escape (``\\n``, ``\\x1b``, ``\\u202e``), then caps the length.
"""

from __future__ import annotations

__all__ = ["UNTRUSTED_TEXT_LIMIT", "escape_untrusted"]

UNTRUSTED_TEXT_LIMIT = 300  # characters: enough to tell one error from another
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_CUT = "…"


def _escaped(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape_untrusted(text: object, limit: int = UNTRUSTED_TEXT_LIMIT) -> str:
    """``text`` (``str()`` of it) with control, format and separator characters escaped
    (:meth:`str.isprintable` is false for them: Unicode categories Cc, Cf, Zl, Zp, Zs but the
    space, and unassigned), at most ``limit`` characters long (a cut ends with ``…``)."""
    out: list[str] = []
    size = 0
    for ch in str(text)[: limit + 1]:  # a longer tail would be cut anyway: never walk megabytes
        piece = ch if ch.isprintable() else _escaped(ch)
        if size + len(piece) > limit:
            while out and size + len(_CUT) > limit:
                size -= len(out.pop())
            out.append(_CUT)
            break
        out.append(piece)
        size += len(piece)
    return "".join(out)
