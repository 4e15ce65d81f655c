"""Files embedded in an OOXML package (a workbook in a DOCX, a PDF on a slide), found by part.

Embedded objects hang off the part that shows them by relationships (ECMA-376 Part 1, 15.2.10
"Embedded Object Part" and 15.2.11 "Embedded Package Part"; Part 2, 9.3): ``.../package`` for
an OOXML file stored as is (``word/embeddings/Microsoft_Excel_Worksheet.xlsx``),
``.../oleObject`` for an OLE compound file (``oleObject1.bin``), ``.../aFChunk`` for a Word
"altChunk" (imported HTML, RTF or DOCX), ``.../image`` for pictures (only when images are to be
OCR'd). A worksheet's pictures and objects sit one step further, behind its ``.../drawing``.

An OLE object is itself a container ([MS-OLEDS] 2.3): what the user embedded is its
``\\x01Ole10Native`` stream (an "OLE Package" of an arbitrary file, layout as in Apache POI's
``Ole10Native``), its ``Package`` stream (an OOXML file), its ``CONTENTS`` stream (Acrobat's
PDF) or the compound file as a whole (an embedded .doc/.xls/.ppt). Anything else (an equation,
a sound recorder clip) carries nothing a parser reads and is listed as skipped.
"""

from __future__ import annotations

import io
import posixpath
import struct
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lxml import etree

from plugins.parsers._common import BlockBuilder, Deadline, EmbedUsage, Limits, safe_xml_parser
from plugins.parsers._embedded import (
    EmbeddedFile,
    EmbeddedResult,
    cap_reason,
    embedded_images_wanted,
    parse_embedded,
)
from plugins.parsers._ooxml import content_types, part_content_type

__all__ = ["PackageEmbeds", "related_parts"]

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_REL_NS = "{http://schemas.openxmlformats.org/package/2006/relationships}"
_EMBED_TYPES = ("/package", "/oleObject", "/aFChunk")
# a .rels part lists a part's relationships: a few KB in real files
_MAX_RELS_BYTES = 4 << 20
# OLE streams that are a whole document of a legacy Office format, by the extension it gets
_LEGACY_ROOT_STREAMS = (("worddocument", "doc"), ("workbook", "xls"), ("book", "xls"), ("powerpoint document", "ppt"))


def related_parts(zf: zipfile.ZipFile, part: str, suffixes: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(relationship type, target part)`` of ``part``'s internal relationships of those types.

    In the order the ``.rels`` part lists them; targets that are missing are left out.
    """
    base, name = posixpath.split(part.lstrip("/"))
    rels_name = posixpath.join(base, "_rels", f"{name}.rels")
    try:
        info = zf.getinfo(rels_name)
        if info.file_size > _MAX_RELS_BYTES:
            return []
        root = etree.fromstring(zf.read(info), safe_xml_parser())
    except (KeyError, etree.XMLSyntaxError, zipfile.BadZipFile, OSError, ValueError, EOFError):
        return []
    names = set(zf.namelist())
    out: list[tuple[str, str]] = []
    for rel in root.iter(f"{_REL_NS}Relationship"):
        rel_type = rel.get("Type") or ""
        target = rel.get("Target") or ""
        if rel.get("TargetMode") == "External" or not rel_type.endswith(suffixes) or not target:
            continue
        resolved = target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(base, target))
        if resolved in names:
            out.append((rel_type, resolved))
    return out


@dataclass(slots=True)
class PackageEmbeds:
    """Collects the embedded files of one package, part by part, each file once.

    A part that several relationships point at (the same workbook shown on three slides) is
    read and parsed at its first reference; the others are counted (``embedded_repeats``).
    A file the document's allowance has no room for is listed as skipped without being read."""

    zf: zipfile.ZipFile
    limits: Limits
    deadline: Deadline
    options: Any
    skipped: list[dict[str, Any]] = field(default_factory=list)
    result: EmbeddedResult = field(default_factory=EmbeddedResult)
    _seen: set[str] = field(default_factory=set)
    _types: tuple[dict[str, str], dict[str, str]] | None = None

    @property
    def wants_images(self) -> bool:
        return embedded_images_wanted(self.options)

    def add_to(self, builder: BlockBuilder, files: list[EmbeddedFile]) -> None:
        """Parse ``files`` (:func:`._embedded.parse_embedded`) and append their blocks to ``builder``.

        Their text and number count against the outer document's ``max_chars`` and ``max_blocks``.
        """
        if not files:
            return
        found = parse_embedded(files, self.options, builder.heading_path, builder.room)
        builder.extend(found.blocks)
        self.result.merge(found)

    def record(self, metadata: dict[str, Any]) -> None:
        """What was embedded, parsed, failed or skipped, into the outer document's metadata."""
        self.result.skipped[:0] = self.skipped
        self.skipped = []
        self.result.record(metadata)

    def files_of(self, part: str, where: str, follow: tuple[str, ...] = ()) -> list[EmbeddedFile]:
        """The files embedded in ``part`` (and in the parts it reaches by ``follow`` relationships)."""
        suffixes = _EMBED_TYPES + (("/image",) if self.wants_images else ())
        targets = related_parts(self.zf, part, suffixes + follow)
        out: list[EmbeddedFile] = []
        for rel_type, target in targets:
            if rel_type.endswith(follow) and follow:
                out.extend(self.files_of(target, where))
                continue
            if target in self._seen:
                repeats = self.result.repeats
                repeats[target] = repeats.get(target, 1) + 1
                continue
            self._seen.add(target)
            reason = self._refusal(target, out)
            if reason:
                self.skipped.append({"name": target, "reason": reason})
                continue
            out.extend(self._read(target, where))
        return out

    def _refusal(self, target: str, pending: list[EmbeddedFile]) -> str:
        """Why ``target`` is left unread: the time budget or the allowance is spent ("" if not)."""
        if self.deadline.remaining <= 0:
            return "time_budget"
        size = self.zf.getinfo(target).file_size
        return cap_reason(self.options, size, EmbedUsage(len(pending), sum(len(f.data) for f in pending)))

    def _read(self, part: str, where: str) -> Iterator[EmbeddedFile]:
        data = self.zf.read(part)  # its size fits the allowance (_refusal): no bomb is inflated
        if self._types is None:
            self._types = content_types(self.zf, self.limits)
        media_type = part_content_type(part, *self._types)
        if data.startswith(_OLE_MAGIC) and not part.lower().endswith((".doc", ".xls", ".ppt", ".msg")):
            yield from self._ole_contents(part, data, where)
            return
        yield EmbeddedFile(part, data, media_type=_useful_type(media_type), where=where)

    def _ole_contents(self, part: str, data: bytes, where: str) -> Iterator[EmbeddedFile]:
        import olefile  # only packages that embed OLE objects need it

        try:
            ole = olefile.OleFileIO(io.BytesIO(data))
        except (OSError, ValueError, struct.error, IndexError) as exc:
            self.skipped.append({"name": part, "reason": f"unreadable OLE object ({exc})"})
            return
        try:
            streams = {"/".join(entry).lower(): entry for entry in ole.listdir()}
            found = _ole_payload(ole, streams, part, data)
            clsid = ole.root.clsid if ole.root is not None else ""
        except (OSError, ValueError, struct.error, IndexError) as exc:
            self.skipped.append({"name": part, "reason": f"unreadable OLE object ({exc})"})
            return
        finally:
            ole.close()
        if found is None:
            self.skipped.append({"name": part, "reason": f"OLE object (class {clsid or 'unknown'}) holds no file"})
            return
        yield EmbeddedFile(found[0], found[1], where=where)


def _ole_payload(ole: Any, streams: dict[str, list[str]], part: str, data: bytes) -> tuple[str, bytes] | None:
    """``(file name, bytes)`` of what an OLE object carries, or None."""
    stem = part.rsplit(".", 1)[0]
    if "\x01ole10native" in streams:
        return _ole10_native(ole.openstream(streams["\x01ole10native"]).read(), stem)
    if "package" in streams:  # an OOXML file wrapped in OLE ([MS-OLEDS] 2.3.8 for Office 2007+)
        return f"{stem}.zip", ole.openstream(streams["package"]).read()
    if "contents" in streams:  # Acrobat's embedded PDF keeps the file whole in CONTENTS
        return f"{stem}.pdf", ole.openstream(streams["contents"]).read()
    for stream, ext in _LEGACY_ROOT_STREAMS:
        if stream in streams:
            return f"{stem}.{ext}", data  # the compound file is the document
    return None


def _ole10_native(raw: bytes, stem: str) -> tuple[str, bytes] | None:
    """The packaged file of an ``\\x01Ole10Native`` stream: ``(its original name, its bytes)``.

    Layout (Apache POI ``Ole10Native``, oletools ``OleNativeStream``): uint32 size, uint16
    flags, label and source path as NUL-terminated ANSI strings, two uint32s (the second the
    length of the temporary path), the temporary path, uint32 data size, the data.
    """
    try:
        pos = 6
        label, pos = _asciiz(raw, pos)
        _source, pos = _asciiz(raw, pos)
        _unknown, temp_len = struct.unpack_from("<II", raw, pos)
        pos += 8 + temp_len
        (size,) = struct.unpack_from("<I", raw, pos)
        pos += 4
    except (struct.error, ValueError):
        return None
    if size == 0 or pos + size > len(raw):
        return None
    name = label.rsplit("\\", 1)[-1].rsplit("/", 1)[-1] or f"{stem}.bin"
    return name, raw[pos : pos + size]


def _asciiz(raw: bytes, pos: int) -> tuple[str, int]:
    end = raw.index(b"\x00", pos, min(len(raw), pos + 4096))  # Windows paths: MAX_PATH is 260
    return raw[pos:end].decode("cp1252", errors="replace"), end + 1


def _useful_type(content_type: str | None) -> str | None:
    """The declared type, unless it only says "an embedded object" (the bytes tell then)."""
    if not content_type or content_type.endswith(("oleObject", "package", "octet-stream")):
        return None
    return content_type
