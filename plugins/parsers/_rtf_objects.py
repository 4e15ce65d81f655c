"""Embedded objects of an RTF document (``{\\object ... {\\*\\objdata <hex>}}``) as files.

``\\objdata`` is an OLE 1.0 EmbeddedObject in hex ([MS-OLEDS] 2.2.4): OLEVersion, FormatID
(2 = embedded; 1 = linked, which carries no file), ClassName, TopicName and ItemName as
length-prefixed ANSI strings, then NativeDataSize and NativeData. The native data is:

* for class ``Package`` (the Object Packager: any file dropped into a document), a packager
  header with the file's label and paths, then its size and bytes;
* for a document class (``Word.Document.8``, ``Excel.Sheet.12``, ``AcroExch.Document``...) an OLE
  compound file: the document itself (a ``.doc``/``.xls``/``.ppt``), or a wrapper whose
  ``Package`` stream is an OOXML file, whose ``CONTENTS`` stream is a PDF, or whose
  ``\\x01Ole10Native`` stream holds packager data.

Every length is bounds-checked; an object that does not decode is skipped with its reason.
"""

from __future__ import annotations

import binascii
import contextlib
import re
import struct

import olefile

from plugins.parsers._embedded import EmbeddedFile

__all__ = ["object_files"]

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_EMBEDDED = 2
_NOT_HEX = re.compile(r"[^0-9a-fA-F]")
# streams of a wrapper compound file that hold the embedded file itself, by preference
_PAYLOAD_STREAMS = ("package", "contents", "\x01ole10native")


class _Truncated(Exception):
    pass


def _u32(data: bytes, pos: int) -> tuple[int, int]:
    if pos + 4 > len(data):
        raise _Truncated
    return struct.unpack_from("<I", data, pos)[0], pos + 4


def _counted(data: bytes, pos: int) -> tuple[bytes, int]:
    size, pos = _u32(data, pos)
    if pos + size > len(data):
        raise _Truncated
    return data[pos : pos + size], pos + size


def _cstring(data: bytes, pos: int) -> tuple[str, int]:
    end = data.find(b"\x00", pos)
    if end < 0:
        raise _Truncated
    return data[pos:end].decode("cp1252", "replace"), end + 1


def _ole1(data: bytes) -> tuple[str, bytes] | None:
    """(class name, native data) of an embedded OLE 1.0 object; None for a linked one."""
    _version, pos = _u32(data, 0)
    format_id, pos = _u32(data, pos)
    if format_id != _EMBEDDED:
        return None
    class_name, pos = _counted(data, pos)
    _topic, pos = _counted(data, pos)
    _item, pos = _counted(data, pos)
    native, _ = _counted(data, pos)
    return class_name.rstrip(b"\x00").decode("cp1252", "replace"), native


def _packaged(native: bytes) -> tuple[str, bytes]:
    """The Object Packager's file: its label and bytes (after a 2-byte signature)."""
    label, pos = _cstring(native, 2)
    _source_path, pos = _cstring(native, pos)
    pos += 4  # reserved and the type (3 = an embedded file)
    _temp_path, pos = _counted(native, pos)
    content, _ = _counted(native, pos)
    return label, content


def _unwrapped(native: bytes, class_name: str) -> tuple[str, bytes]:
    """The file inside a document object's compound file (or the compound file itself)."""
    with contextlib.suppress(Exception), olefile.OleFileIO(native) as ole:  # a damaged directory
        names = {entry[0].lower(): entry[0] for entry in ole.listdir(streams=True) if len(entry) == 1}
        for wanted in _PAYLOAD_STREAMS:
            if wanted in names:
                payload = ole.openstream(names[wanted]).read()
                if wanted == "\x01ole10native":
                    return _packaged(payload[4:])  # a size, then packager data
                return class_name, payload
    return class_name, native


def object_files(objects: list[list[str] | None]) -> tuple[list[EmbeddedFile], list[dict[str, str]]]:
    """Decode the hex of each ``\\objdata``; -> (files, skipped with reasons)."""
    files: list[EmbeddedFile] = []
    skipped: list[dict[str, str]] = []
    for number, parts in enumerate(objects, start=1):
        where = f"object {number}"
        if parts is None:
            skipped.append({"name": where, "reason": "embedded objects exceed embed_max_total"})
            continue
        hexed = _NOT_HEX.sub("", "".join(parts))
        try:
            decoded = _ole1(binascii.unhexlify(hexed[: len(hexed) // 2 * 2]))
            if decoded is None:
                continue  # a linked object: the file is elsewhere
            class_name, native = decoded
            if class_name.lower() == "package":
                name, content = _packaged(native)
            elif native.startswith(_OLE_MAGIC):
                name, content = _unwrapped(native, class_name)
            else:
                name, content = class_name, native
        except (_Truncated, binascii.Error):
            skipped.append({"name": where, "reason": "object data truncated or not OLE 1.0"})
            continue
        files.append(EmbeddedFile(name=name or where, data=content, where=where))
    return files, skipped
