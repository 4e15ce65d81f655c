"""Put cached formula values into an .xlsx that openpyxl wrote.

openpyxl writes a formula cell as ``<f>`` with an empty ``<v>``: every reader that asks for values
(``data_only=True``, the XLSX parser, Excel before recalculation, search indexing) then sees an
empty cell. The lakesheet rebuild knows the value Yuque computed, so it is written into ``<v>``
(with the matching ``t`` type) of the saved sheet XML.
"""

from __future__ import annotations

import io
import math
import re
import zipfile
from typing import Any

from lxml import etree
from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE

__all__ = ["inject_cached_values"]

_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"


def inject_cached_values(xlsx: bytes, cached: dict[int, dict[str, Any]]) -> bytes:
    """``cached`` maps sheet position (0-based, workbook order) -> {coordinate: value}."""
    if not cached:
        return xlsx
    src = zipfile.ZipFile(io.BytesIO(xlsx))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            m = re.fullmatch(r"xl/worksheets/sheet(\d+)\.xml", info.filename)
            values = cached.get(int(m.group(1)) - 1) if m else None
            if values:
                root = etree.fromstring(data)
                for cell in root.iter(f"{{{_NS}}}c"):
                    value = values.get(cell.get("r"))
                    if value is None or cell.find(f"{{{_NS}}}f") is None:
                        continue
                    v = cell.find(f"{{{_NS}}}v")
                    if v is None:
                        v = etree.SubElement(cell, f"{{{_NS}}}v")
                    if isinstance(value, bool):
                        cell.set("t", "b")
                        v.text = "1" if value else "0"
                    elif isinstance(value, int | float) and math.isfinite(value):
                        cell.attrib.pop("t", None)
                        v.text = repr(value) if isinstance(value, float) else str(value)
                    else:
                        cell.set("t", "str")
                        v.text = ILLEGAL_CHARACTERS_RE.sub("", str(value))
                data = etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)
            dst.writestr(info, data)
    return out.getvalue()
