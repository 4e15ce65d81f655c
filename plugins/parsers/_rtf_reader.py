"""RTF interpreter: groups, control words, code pages and destinations -> paragraphs and tables.

Follows the RTF 1.9.1 specification ("Rich Text Format (RTF) Specification", Microsoft, 2008):

* the file is read as bytes mapped 1:1 to characters (latin-1), tokenised by one regular
  expression into groups, control words (``\\word-12`` with the space that ends them), control
  symbols (``\\~``), hex bytes (``\\'hh``) and text runs;
* character and paragraph properties live in the group state and are restored at ``}``
  ("Conventions of an RTF Reader");
* ``\\'hh`` bytes and 8-bit literals are decoded with the current font's ``\\fcharset`` (or its
  ``\\cpg``), else the document's ``\\ansicpg``; consecutive bytes are decoded together so a
  double-byte code page (GBK, Shift-JIS) gets whole characters, trail bytes written as literals
  included;
* ``\\uN`` is a UTF-16 code unit (negative values wrap, surrogate pairs are joined) followed by
  ``\\ucN`` fallback characters that are skipped ("Unicode RTF");
* destinations: ``{\\*\\...}`` groups are skipped unless listed as read (spec: "Ignoring control
  words"), tables of fonts, colours, styles, lists, pictures, object data and Word's XML/theme
  stores are skipped; the font table gives code pages, the style sheet heading levels, ``\\info``
  the title and author; headers, footers and footnotes become separate flows;
* ``\\binN`` skips N raw bytes.
"""

from __future__ import annotations

import re

from include.contract import ParseError, ParseErrorCode
from plugins.parsers._common import Deadline, normalise_charset
from plugins.parsers._rtf_syntax import (
    CHARSETS,
    FLOW_DESTS,
    HEADING_STYLE,
    INFO_FIELDS,
    MULTIBYTE,
    PARAGRAPH_ENDS,
    SKIP_DESTS,
    SYMBOL_TEXT,
    TOKEN,
    WORD_TEXT,
    Flow,
    Para,
)

__all__ = ["RtfReader"]

_DEADLINE_EVERY = 4096


class _State:
    """Group state (spec: properties are saved at ``{`` and restored at ``}``)."""

    __slots__ = ("dest", "flow", "font", "hidden", "ignorable", "in_list", "intbl", "outer", "outline", "style", "uc")

    def __init__(self, flow: Flow) -> None:
        self.dest = "body"  # body | marker | skip | fonttbl | stylesheet | style | info | upr | objdata | meta:<key>
        self.flow = flow
        self.font = -1
        self.hidden = False
        self.ignorable = False
        self.intbl = False
        self.in_list = False  # \\lsN: the paragraph is an item of list N (its marker may be implicit)
        self.outer = "body"
        self.outline: int | None = None
        self.style = 0
        self.uc = 1

    def copy(self) -> _State:
        new = _State.__new__(_State)
        for name in _State.__slots__:
            setattr(new, name, getattr(self, name))
        new.ignorable = False
        return new


class RtfReader:
    """Reads one RTF document into flows (body first), metadata and style heading levels."""

    def __init__(self, data: bytes, deadline: Deadline, max_depth: int, max_chars: int, max_object_bytes: int) -> None:
        body = data.lstrip(b"\xef\xbb\xbf \t\r\n")
        if not body.startswith(b"{\\"):
            raise ParseError(ParseErrorCode.CORRUPT, "RTF: the file does not start with a {\\ group")
        # a fragment without the {\rtf1 header (pandoc's, LibreOffice's readers take them) is a
        # run of groups: one root around them keeps it one document
        self.fragment = not body.startswith(b"{\\rtf")
        text = body.decode("latin-1")
        self._text = "{" + text + "}" if self.fragment else text
        self._deadline = deadline
        self._max_depth = max_depth
        self._max_chars = max_chars
        self._chars = 0
        self.body = Flow("body")
        self.side: list[Flow] = []
        self.meta: dict[str, list[str]] = {}
        self._codec = "cp1252"
        self._deff = 0
        self._fonts: dict[int, str] = {}  # font number -> codec, from the font table
        self._font_def = 0
        self._styles: dict[int, int] = {}  # style number -> heading level
        self._style_entry: tuple[int, int | None, list[str]] = (0, None, [])
        self._stack: list[_State] = []
        self._state = _State(self.body)
        self._group_start = False
        self._skip_fallback = 0
        self._bytes = bytearray()
        self._bytes_state: _State | None = None
        self._high_surrogate = 0
        # embedded objects' \objdata as hex text, None once they exceed what may be embedded
        self.objects: list[list[str] | None] = []
        self._object_hex_left = 2 * max_object_bytes

    # ------------------------------------------------------------------ driver

    def read(self) -> None:
        pos: int | None = 0
        count = 0
        while pos is not None:
            resume = None
            for m in TOKEN.finditer(self._text, pos):
                count += 1
                if count % _DEADLINE_EVERY == 0:
                    self._deadline.check("RTF tokens")
                resume = self._token(m)
                if resume is not None:
                    break
            pos = resume if resume is not None and resume >= 0 else None
        self._flush_bytes()
        if self.body.text:
            self._end_paragraph(self._state if self._state.flow is self.body else _State(self.body))
        self.body.close_table()
        for flow in self.side:
            flow.close_table()

    def _token(self, m: re.Match[str]) -> int | None:
        """Handle one token; returns where to resume scanning after ``\\bin`` or the root's end (-1)."""
        word, param, hexbyte, symbol, brace, text = m.groups()
        if hexbyte is not None:
            self._hex(int(hexbyte, 16))
            return None
        if text is not None:
            self._text_run(text)
            return None
        if word is None and symbol is None and brace is None:
            return None  # line breaks in the source are not text
        if symbol in ("\\", "{", "}") and self._awaits_trail_byte():
            self._bytes.append(ord(symbol))  # an escaped trail byte: Shift-JIS \'83\\ is one character
            return None
        self._flush_bytes()
        if brace == "{":
            self._open()
        elif brace == "}":
            return -1 if self._close() else None
        elif symbol is not None:
            self._symbol(symbol)
        elif word == "bin":
            self._group_start = False
            return m.end() + max(0, int(param or 0))
        else:
            self._word(word, int(param) if param else None)
        return None

    # ------------------------------------------------------------------ groups

    def _open(self) -> None:
        if len(self._stack) >= self._max_depth:
            raise ParseError(ParseErrorCode.BOMB, f"RTF: groups nested deeper than {self._max_depth}")
        self._skip_fallback = 0
        self._stack.append(self._state)
        self._state = self._state.copy()
        if self._state.dest == "stylesheet":
            self._state.dest = "style"
            self._style_entry = (0, None, [])
        self._group_start = True

    def _close(self) -> bool:
        """End a group; True when the root group ended (the rest of the file is not RTF)."""
        self._skip_fallback = 0
        self._group_start = False
        closing = self._state
        if not self._stack:
            return True
        self._state = self._stack.pop()
        if closing.dest == "style" and self._state.dest == "stylesheet":
            self._finish_style()
        if closing.flow is not self._state.flow and closing.flow.text:
            self._end_paragraph(closing)
        return not self._stack

    def _destination(self, word: str) -> bool:
        """Apply ``word`` as the destination of the group it opens; False when it is not one."""
        st = self._state
        parent = self._stack[-1].dest if self._stack else "body"
        if st.dest == "skip":
            return True
        if word == "objdata":
            st.dest = "objdata"
            self.objects.append([])
        elif word == "ud" and parent == "upr":
            st.dest = self._stack[-1].outer
        elif word in SKIP_DESTS:
            st.dest = "skip"
        elif word in ("fonttbl", "stylesheet", "info"):
            st.dest = word
        elif word == "upr":
            st.outer, st.dest = st.dest, "upr"
        elif parent == "info" and word in INFO_FIELDS:
            st.dest = f"meta:{word}"
            self.meta[word] = []
        elif word in FLOW_DESTS and st.dest == "body":
            st.flow = Flow(word)
            self.side.append(st.flow)
        elif word in ("listtext", "pntext"):
            st.dest = "marker"
        elif st.ignorable:
            st.dest = "skip"
        else:
            return False
        return True

    # ------------------------------------------------------------------ control words

    def _symbol(self, symbol: str) -> None:
        if symbol == "*":
            if self._group_start:
                self._state.ignorable = True
            return
        self._group_start = False
        if self._skip_fallback:
            self._skip_fallback -= 1
            return
        if symbol in ("\n", "\r"):
            self._paragraph_break()
        elif symbol in SYMBOL_TEXT:
            self._emit(SYMBOL_TEXT[symbol])

    def _word(self, word: str, param: int | None) -> None:
        if self._group_start:
            self._group_start = False
            if self._destination(word):
                return
        if self._skip_fallback:
            self._skip_fallback -= 1
            return
        st = self._state
        if word == "u":
            self._unicode(param or 0)
        elif word in WORD_TEXT:
            self._emit(WORD_TEXT[word])
        elif word in PARAGRAPH_ENDS:
            self._paragraph_break()
        elif word in ("cell", "nestcell"):
            self._cell(word)
        elif word == "row":
            st.flow.end_row()
        elif st.dest in ("fonttbl", "style") or st.dest == "body" or st.dest == "marker":
            self._property(word, param)
        elif word == "uc":
            st.uc = max(0, param or 0)

    def _property(self, word: str, param: int | None) -> None:
        st = self._state
        value = param if param is not None else 1
        if st.dest == "fonttbl":
            self._font_table_word(word, value)
        elif st.dest == "style":
            self._style_word(word, value)
        elif word == "f":
            st.font = value
        elif word == "uc":
            st.uc = max(0, value)
        elif word == "pard":
            st.style, st.outline, st.intbl, st.in_list = 0, None, False, False
        elif word == "plain":
            st.font, st.hidden = self._deff, False
        elif word in ("intbl", "itap"):
            st.intbl = value > 0
        elif word == "s":
            st.style = value
        elif word == "ls":
            st.in_list = value > 0
        elif word == "outlinelevel":
            st.outline = value
        elif word == "v":
            st.hidden = value != 0
        elif word == "ansicpg":
            self._codec = normalise_charset(f"cp{value}") or self._codec
        elif word in ("mac", "pc", "pca"):
            self._codec = {"mac": "mac_roman", "pc": "cp437", "pca": "cp850"}[word]
        elif word == "deff":
            self._deff = value
            if st.font < 0:
                st.font = value

    def _font_table_word(self, word: str, value: int) -> None:
        if word == "f":
            self._font_def = value
        elif word == "fcharset" and value in CHARSETS:
            self._fonts[self._font_def] = CHARSETS[value]
        elif word == "cpg":
            codec = normalise_charset(f"cp{value}")
            if codec:
                self._fonts[self._font_def] = codec

    def _style_word(self, word: str, value: int) -> None:
        number, outline, name = self._style_entry
        if word == "s":
            number = value
        elif word in ("cs", "ds", "ts"):
            number = -1  # character, section and table styles are never headings
        elif word == "outlinelevel":
            outline = value
        self._style_entry = (number, outline, name)

    def _finish_style(self) -> None:
        number, outline, name = self._style_entry
        match = HEADING_STYLE.match("".join(name).split(";")[0])
        level = int(match.group(1)) if match else (outline + 1 if outline is not None and outline < 9 else None)
        if number >= 0 and level is not None:
            self._styles[number] = level
        self._style_entry = (0, None, [])

    # ------------------------------------------------------------------ text

    def _unicode(self, value: int) -> None:
        # a signed 16-bit value (spec, "\\uN"): negative ones wrap; anything outside is no character
        if not -32768 <= value <= 65535:
            value = 0xFFFD
        value = value + 65536 if value < 0 else value
        self._skip_fallback = self._state.uc
        high = self._high_surrogate
        if 0xDC00 <= value < 0xE000:
            self._high_surrogate = 0
            value = 0x10000 + ((high - 0xD800) << 10) + (value - 0xDC00) if high else 0xFFFD
        elif 0xD800 <= value < 0xDC00:
            if high:
                self._emit("\ufffd")  # a high surrogate followed by another one: unpaired
            self._high_surrogate = value
            return
        self._emit(chr(value))

    def _hex(self, value: int) -> None:
        self._group_start = False
        if self._skip_fallback:
            self._skip_fallback -= 1
            return
        if self._bytes_state is not self._state:
            self._flush_bytes()
            self._bytes_state = self._state
        self._bytes.append(value)

    def _text_run(self, text: str) -> None:
        self._group_start = False
        if self._skip_fallback:
            dropped = min(self._skip_fallback, len(text))
            self._skip_fallback -= dropped
            text = text[dropped:]
            if not text:
                return
        if self._bytes and self._bytes_state is self._state and self._codec_of(self._state) in MULTIBYTE:
            # a double-byte character's trail byte may be written as a literal (Shift-JIS \'83\\)
            self._bytes.extend(text.encode("latin-1"))
        elif text.isascii():
            self._flush_bytes()
            self._emit(text)
        else:  # 8-bit literals are in the current code page too
            self._flush_bytes()
            self._bytes_state = self._state
            self._bytes.extend(text.encode("latin-1"))

    def _awaits_trail_byte(self) -> bool:
        """Whether the pending bytes end with the lead byte of a double-byte character."""
        if not self._bytes or self._bytes_state is not self._state:
            return False
        codec = self._codec_of(self._state)
        if codec not in MULTIBYTE:
            return False
        try:
            bytes(self._bytes).decode(codec)
        except UnicodeDecodeError as exc:
            return exc.end == len(self._bytes) and exc.reason.startswith("incomplete")
        return False

    def _codec_of(self, st: _State) -> str:
        return self._fonts.get(st.font, self._codec) if st.font >= 0 else self._codec

    def _flush_bytes(self) -> None:
        if not self._bytes:
            return
        st = self._bytes_state or self._state
        text = bytes(self._bytes).decode(self._codec_of(st), errors="replace")
        self._bytes.clear()
        self._emit(text, st)

    def _emit(self, text: str, st: _State | None = None) -> None:
        if self._high_surrogate:  # a high surrogate not followed by a low one is unpaired
            self._high_surrogate = 0
            text = "\ufffd" + text
        st = st or self._state
        dest = st.dest
        if dest == "body":
            if st.hidden:
                return
            target = st.flow.text
        elif dest == "marker":
            target = st.flow.marker
        elif dest == "style":
            target = self._style_entry[2]
        elif dest.startswith("meta:"):
            target = self.meta[dest[5:]]
        elif dest == "objdata":
            self._object_hex(text)
            return
        else:
            return
        self._chars += len(text)
        if self._chars > self._max_chars:
            raise ParseError(
                ParseErrorCode.TOO_LARGE, f"RTF text exceeds {self._max_chars} characters (limit max_chars)"
            )
        target.append(text)

    def _object_hex(self, text: str) -> None:
        parts = self.objects[-1]
        if parts is None:
            return
        self._object_hex_left -= len(text)
        if self._object_hex_left < 0:
            self.objects[-1] = None  # over the embedded-file allowance: left out, and said so
            return
        parts.append(text)

    # ------------------------------------------------------------------ paragraphs and tables

    def _paragraph_break(self) -> None:
        st = self._state
        if st.dest == "body":
            self._end_paragraph(st)

    def _cell(self, word: str) -> None:
        flow = self._state.flow
        if word == "nestcell":  # a nested table's cell: its text stays in the enclosing cell
            flow.cell_parts.append(flow.take_text())
        else:
            flow.end_cell()

    def _end_paragraph(self, st: _State) -> None:
        flow = st.flow
        text = flow.take_text()
        marker = "".join(flow.marker).strip() or None
        flow.marker.clear()
        if st.intbl:
            flow.cell_parts.append(f"{marker} {text}" if marker else text)
            return
        flow.close_table()
        if not text.strip():
            return
        level = st.outline + 1 if st.outline is not None and st.outline < 9 else self._styles.get(st.style)
        flow.items.append(Para(text, level, marker, st.in_list or marker is not None))
