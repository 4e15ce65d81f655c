"""RTF vocabulary: the tokeniser, code pages, control words that are text, destinations; flows.

Tables from the RTF 1.9.1 specification ("Font table" for \\fcharset, "Special characters",
"Destinations") and the destinations Word adds (themes, XML stores, list tables).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "CHARSETS",
    "FLOW_DESTS",
    "HEADING_STYLE",
    "INFO_FIELDS",
    "MULTIBYTE",
    "PARAGRAPH_ENDS",
    "SKIP_DESTS",
    "SYMBOL_TEXT",
    "TOKEN",
    "WORD_TEXT",
    "Flow",
    "Para",
    "Table",
]
TOKEN = re.compile(
    r"\\([a-zA-Z]{1,32})(-?\d{1,10})? ?"  # control word with optional parameter
    r"|\\'([0-9a-fA-F]{2})"  # hex byte
    r"|\\([^a-zA-Z])"  # control symbol
    r"|([{}])"
    r"|([^\\{}\r\n]+)"  # text run (CR/LF are ignored: spec, "RTF syntax")
    r"|[\r\n]+"
    r"|\\",  # a lone backslash at the end of the file
    re.S,
)

# \fcharset values (spec, "Font table") -> Python codecs; 0/1 mean the document's code page
CHARSETS = {
    2: "cp1252",
    77: "mac_roman",
    128: "cp932",
    129: "cp949",
    130: "cp1361",
    134: "gb18030",
    136: "big5hkscs",
    161: "cp1253",
    162: "cp1254",
    163: "cp1258",
    177: "cp1255",
    178: "cp1256",
    186: "cp1257",
    204: "cp1251",
    222: "cp874",
    238: "cp1250",
    254: "cp437",
    255: "cp850",
}
MULTIBYTE = frozenset({"cp932", "cp949", "cp1361", "gb18030", "big5hkscs"})

WORD_TEXT = {
    "tab": "\t",
    "line": "\n",
    "emdash": "\u2014",
    "endash": "\u2013",
    "emspace": "\u2003",
    "enspace": "\u2002",
    "qmspace": "\u2005",
    "bullet": "\u2022",
    "lquote": "\u2018",
    "rquote": "\u2019",
    "ldblquote": "\u201c",
    "rdblquote": "\u201d",
    "zwj": "\u200d",
    "zwnj": "\u200c",
    "zwbo": "\u200b",
}
SYMBOL_TEXT = {"~": "\u00a0", "_": "\u2011", "{": "{", "}": "}", "\\": "\\", "-": ""}
PARAGRAPH_ENDS = frozenset({"par", "sect", "page", "column"})

# destinations whose content is not document text (spec: "Destinations" and Word's additions)
SKIP_DESTS = frozenset(
    {
        *("colortbl", "pict", "themedata", "colorschememapping", "datastore", "xmlnstbl", "listtable"),
        *("listoverridetable", "revtbl", "rsidtbl", "filetbl", "latentstyles", "generator", "fldinst"),
        *("xe", "tc", "tcn", "bkmkstart", "bkmkend", "objdata", "objclass", "objname", "objalias", "objsect"),
        *("objtime", "objitem", "objtopic", "nonshppict", "shpinst", "pgdsctbl", "mmathPr", "template"),
        *("falt", "panose", "pntxta", "pntxtb", "pnseclvl", "listpicture", "private", "userprops", "docvar"),
        *("blipuid", "formfield", "datafield", "annotation", "atnid", "atnauthor", "atnref", "atrfstart"),
        *("atrfend", "atndate", "atnparent", "protusertbl", "passwordhash", "wgrffmtfilter", "ftnsep"),
        *("ftnsepc", "aftnsep", "aftnsepc", "ftncn", "aftncn", "txe", "rxe", "background", "fchars"),
        *("lchars", "mhtmltag", "htmltag", "sp", "sn", "sv", "picprop", "defchp", "defpap", "fname"),
        *("leveltext", "levelnumbers", "pn", "nonesttables", "buptim", "creatim", "revtim", "printim", "hlinkbase"),
    }
)
FLOW_DESTS = frozenset(
    {"header", "headerl", "headerr", "headerf", "footer", "footerl", "footerr", "footerf", "footnote"}
)
INFO_FIELDS = frozenset({"title", "author", "subject", "keywords", "company", "operator", "doccomm", "category"})
HEADING_STYLE = re.compile(r"^\s*heading\s*([1-9])\s*$", re.I)


@dataclass(slots=True)
class Para:
    text: str
    heading_level: int | None = None
    list_marker: str | None = None
    list_item: bool = False


@dataclass(slots=True)
class Table:
    rows: list[list[str]]


@dataclass(slots=True)
class Flow:
    """One stream of paragraphs and tables: the body, or one header, footer or footnote."""

    kind: str
    items: list[Para | Table] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    marker: list[str] = field(default_factory=list)
    cell_parts: list[str] = field(default_factory=list)
    row: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)

    def take_text(self) -> str:
        text = "".join(self.text)
        self.text.clear()
        return text

    def end_cell(self) -> None:
        parts = [*self.cell_parts, self.take_text()]
        self.cell_parts.clear()
        self.row.append("\n".join(p.strip() for p in parts if p.strip()))

    def end_row(self) -> None:
        if self.cell_parts or "".join(self.text).strip():
            self.end_cell()
        if self.row:
            self.rows.append(self.row)
        self.row = []

    def close_table(self) -> None:
        if self.row:
            self.end_row()
        if self.rows:
            self.items.append(Table(self.rows))
        self.rows = []
