"""Counting a zip's central directory from its own records, before :mod:`zipfile` reads it.

``zipfile.ZipFile`` builds a ``ZipInfo`` for every central-directory entry when it opens an
archive (about 500 bytes each: 1.5 million tiny entries took 852 MiB and 32 s before any cap
could look at ``infolist()``). The end-of-central-directory record (APPNOTE 4.3.16; its zip64
form, 4.3.14, when a field is saturated) states the entry count and the directory's size, and
the directory's entries are fixed 46-byte headers plus three declared lengths (4.3.12): both
are read here with ``struct`` and nothing per entry is kept.

The stated count is a claim, so the entries are walked too (stopping one past the limit):
``zipfile`` parses whatever the directory's *size* covers, whatever count the record states.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from include.contract import ParseError, ParseErrorCode

__all__ = ["CentralDirectory", "central_directory", "refuse_crowded_directory"]

_EOCD = struct.Struct("<4s4H2LH")  # signature, disk, cd disk, entries here, entries, size, offset, comment
_EOCD64_LOCATOR = struct.Struct("<4sLQL")  # signature, disk, zip64 record offset, disks
_EOCD64 = struct.Struct("<4sQ2H2L4Q")  # signature, size, made by, needed, disk, cd disk, entries x2, size, offset
_ENTRY = struct.Struct("<4s24x3H12x")  # signature ... name, extra and comment lengths ... (46 bytes)
_EOCD_SIG, _LOCATOR_SIG, _EOCD64_SIG, _ENTRY_SIG = b"PK\x05\x06", b"PK\x06\x07", b"PK\x06\x06", b"PK\x01\x02"
_MAX_COMMENT = 0xFFFF


@dataclass(frozen=True, slots=True)
class CentralDirectory:
    """What the end records say: entry count, directory size and where the directory starts."""

    entries: int
    size: int
    start: int


def central_directory(data: bytes) -> CentralDirectory | None:
    """The archive's directory as its end records state it; None when there is no such record.

    The start is computed as :mod:`zipfile` does (the record's position minus the directory's
    size), so data prepended to the archive (a self-extractor stub) moves it the same way.
    """
    at = data.rfind(_EOCD_SIG, max(0, len(data) - _EOCD.size - _MAX_COMMENT))
    if at < 0 or at + _EOCD.size > len(data):
        return None
    _, _, _, _, entries, size, _, _ = _EOCD.unpack_from(data, at)
    end = at
    locator_at = at - _EOCD64_LOCATOR.size
    if locator_at >= 0 and data[locator_at : locator_at + 4] == _LOCATOR_SIG:
        record_at = locator_at - _EOCD64.size
        if record_at >= 0 and data[record_at : record_at + 4] == _EOCD64_SIG:
            fields = _EOCD64.unpack_from(data, record_at)
            entries, size, end = fields[7], fields[8], record_at
    return CentralDirectory(entries=entries, size=size, start=max(0, end - size))


def _walk_entries(data: bytes, directory: CentralDirectory, stop_after: int) -> int:
    """Entries in the directory's bytes, counted header by header, at most ``stop_after + 1``."""
    pos, end, count = directory.start, min(len(data), directory.start + directory.size), 0
    while pos + _ENTRY.size <= end and count <= stop_after:
        signature, name_len, extra_len, comment_len = _ENTRY.unpack_from(data, pos)
        if signature != _ENTRY_SIG:
            break  # damaged: zipfile reports it when it opens the archive
        count += 1
        pos += _ENTRY.size + name_len + extra_len + comment_len
    return count


def refuse_crowded_directory(data: bytes, max_entries: int, what: str) -> None:
    """Raise ``ParseError(bomb)`` when the archive holds more than ``max_entries`` entries.

    Cost: reading two records, then at most ``max_entries + 1`` fixed headers; no object per
    entry. An archive without an end record is left to :mod:`zipfile` to call damaged.
    """
    directory = central_directory(data)
    if directory is None:
        return
    if directory.entries > max_entries:
        raise ParseError(
            ParseErrorCode.BOMB, f"{what}: {directory.entries} zip entries (limit zip_max_entries {max_entries})"
        )
    walked = _walk_entries(data, directory, max_entries)
    if walked > max_entries:
        raise ParseError(
            ParseErrorCode.BOMB,
            f"{what}: more than {max_entries} zip entries in the central directory "
            f"(its end record claims {directory.entries}; limit zip_max_entries)",
        )
