"""PDF decompression bombs: refused as ``bomb`` with bounded memory, never ``corrupt`` at a cap.

Every case runs in a forked child under an address-space cap (tests/parsers/capped.py), so a
regression fails inside that child instead of growing on the shared machine.
"""

from __future__ import annotations

import os
import signal

import pytest

from include.contract import ParsedDocument, ParseError, ParseErrorCode
from plugins.parsers import register_parser
from plugins.parsers.registry import ParseContext
from tests.parsers.capped import MiB, run_capped
from tests.parsers.conftest import parse_bytes
from tests.parsers.pdfgen import build_flate_bomb_pdf


def _outcome(data: bytes, name: str, **options: object) -> tuple[ParseErrorCode, str] | ParsedDocument:
    """The document, or the error as ``(code, message)`` (a ParseError does not pickle)."""
    try:
        return parse_bytes(data, name, **options)
    except ParseError as err:
        return err.code, err.message


@pytest.fixture(scope="module")
def bomb() -> bytes:
    data = build_flate_bomb_pdf(1024 * MiB)  # ~1 MB of file, 1 GiB of spaces in one content stream
    assert len(data) < 1_200_000
    return data


def test_flate_bomb_is_refused_before_pdfium_inflates_it(bomb: bytes):
    # 768 MiB cap for the test child: the old code let pdfium inflate all of it and died there
    result, growth = run_capped(lambda: _outcome(bomb, "bomb.pdf"), 768 * MiB)
    assert result[0] == ParseErrorCode.BOMB, result
    assert "inflate" in result[1]
    assert growth < 128 * MiB


def test_memory_cap_turns_an_overrun_inside_pdfium_into_bomb(bomb: bytes):
    # the stream check switched off: pdfium itself inflates until the child's own memory limit
    options = {"pdf_max_inflated": 1 << 40, "isolate_memory": 256 * MiB}
    result, _ = run_capped(lambda: _outcome(bomb, "bomb.pdf", **options), 768 * MiB)
    assert result[0] == ParseErrorCode.BOMB, result
    assert "memory limit" in result[1]


def test_a_small_real_stream_still_parses_under_the_checks():
    data = build_flate_bomb_pdf(4 * MiB, text="Just a big page")
    result, _ = run_capped(lambda: _outcome(data, "fine.pdf"), 768 * MiB)
    assert isinstance(result, ParsedDocument), result
    assert result.text == "Just a big page"
    # and the same document over a lowered inflation budget is refused as a bomb
    result, _ = run_capped(lambda: _outcome(data, "fine.pdf", pdf_max_inflated=MiB), 768 * MiB)
    assert result[0] == ParseErrorCode.BOMB, result


@register_parser("test-hog", "0", ("application/x-tributary-test-hog",), ("tributary-hog",), isolate=True)
def _memory_hog(data: bytes, ctx: ParseContext) -> ParsedDocument:
    if data == b"abort":
        os.abort()  # a crash in C code that has nothing to do with memory
    if data == b"killed":
        os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's OOM killer (or a cgroup) does
    hoard = [bytearray(16 * MiB) for _ in range(1024)]  # 16 GiB: MemoryError at the child's cap
    raise AssertionError(f"unreachable: {len(hoard)}")


def test_memory_error_in_the_isolated_child_is_reported_against_its_limit():
    result, _ = run_capped(lambda: _outcome(b"hog", "x.tributary-hog", isolate_memory=256 * MiB), 768 * MiB)
    assert result[0] == ParseErrorCode.BOMB, result
    assert "memory limit of 256 MiB" in result[1]
    # a crash without memory growth stays what it is
    result, _ = run_capped(lambda: _outcome(b"abort", "x.tributary-hog"), 768 * MiB)
    assert result[0] == ParseErrorCode.CORRUPT, result


def test_a_child_killed_by_the_system_is_reported_as_out_of_memory():
    result, _ = run_capped(lambda: _outcome(b"killed", "x.tributary-hog"), 768 * MiB)
    assert result[0] == ParseErrorCode.BOMB, result
    assert "SIGKILL" in result[1] and "memory limit" in result[1]
