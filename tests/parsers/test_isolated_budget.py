"""One budget per top-level document, and no parser process outlives its parse (issue 33, points
2 and 4).

Before: an isolated parse nested in an isolated parse (a PDF's attachment) got a fresh budget, and
when its container was killed at the deadline the nested child lived on with PID 1 as its parent
(seen: 82% CPU, 323 MB, still running after 10 minutes). Here two test parsers stand in for the
real pair: a container that parses one embedded file (after spending part of its budget) and an
embedded format whose parser never returns. Each case runs in a forked worker, so the test parsers
never reach the suite's registry; the spinning parser writes its pid, and the test checks that no
such process is left, counting processes rather than timing anything.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from include.contract import ParsedDocument, RawDocument
from tests.support.forked import call_forked

SPIN = "application/x-tributary-test-spin"
BOX = "application/x-tributary-test-box"


def _register(pid_dir: str, busy_before_embed: float) -> None:
    from plugins.parsers._embedded import EmbeddedFile, parse_embedded
    from plugins.parsers.registry import ParseContext, load_builtins, register_parser

    load_builtins()

    @register_parser("test-spin", "1", (SPIN,), isolate=True)
    def spin(data: bytes, ctx: ParseContext) -> ParsedDocument:
        Path(pid_dir, f"{os.getpid()}.pid").write_text(str(os.getpid()))
        while True:  # a C library stuck in one call: no deadline check ever runs
            pass

    @register_parser("test-box", "1", (BOX,), isolate=True)
    def box(data: bytes, ctx: ParseContext) -> ParsedDocument:
        time.sleep(busy_before_embed)  # the container spends part of the document's budget first
        nested = parse_embedded([EmbeddedFile("inner.spin", b"spin", SPIN)], ctx.options)
        doc = ParsedDocument(blocks=[], title="box")
        doc.metadata["embedded_failed"] = nested.failed
        return doc


def _parse_box(pid_dir: str, budget: float, busy: float) -> dict[str, Any]:
    from include.contract import ParseError
    from plugins.parsers.registry import parse_document

    _register(pid_dir, busy)
    started = time.monotonic()
    try:
        doc = parse_document(RawDocument("k", b"box", "a.box", media_type=BOX), {"time_budget_s": budget})
        outcome: dict[str, Any] = {"parsed": doc.metadata.get("embedded_failed")}
    except ParseError as exc:
        outcome = {"error": exc.code.value, "message": exc.message}
    outcome["seconds"] = time.monotonic() - started
    return outcome


def _spinners(pid_dir: Path) -> list[int]:
    alive = []
    for f in pid_dir.glob("*.pid"):
        pid = int(f.read_text())
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _run(tmp_path: Path, budget: float, busy: float) -> dict[str, Any]:
    outcome: dict[str, Any] = call_forked(_parse_box, str(tmp_path), budget, busy, timeout=120)
    assert list(tmp_path.glob("*.pid")), "the nested parser never ran"
    for _ in range(100):  # the kernel delivers the kills; reaping by init takes a moment
        if not _spinners(tmp_path):
            break
        time.sleep(0.05)
    assert _spinners(tmp_path) == [], "a nested parser process outlived its parse"
    return outcome


def test_a_nested_parse_gets_the_rest_of_the_budget_and_the_container_keeps_its_text(tmp_path: Path) -> None:
    outcome = _run(tmp_path, budget=4.0, busy=1.5)
    # the nested parse timed out inside the container's budget, so the container answered
    assert outcome["parsed"] and outcome["parsed"][0]["code"] == "timeout"
    assert outcome["seconds"] < 4.0 + 2.0 + 5.0  # within the one budget and its grace (loose: no timing claim)


def test_a_container_killed_at_its_deadline_takes_its_nested_parse_with_it(tmp_path: Path) -> None:
    # the container itself overruns (it sleeps past the budget before its embedded file ends):
    # the top-level kill must reach the nested child too
    outcome = _run(tmp_path, budget=2.0, busy=0.5)
    assert outcome.get("error") == "timeout" or outcome["parsed"][0]["code"] == "timeout"


@pytest.mark.parametrize("budget", [3.0])
def test_a_converter_started_under_an_outer_budget_gets_only_the_remainder(budget: float) -> None:
    from plugins.parsers._common import Deadline, document_budget

    with document_budget(budget):
        time.sleep(0.2)
        inner = Deadline(120.0)  # legacy.py and image.py start their own deadline like this
        assert inner.seconds <= budget - 0.2 + 0.01
        with document_budget(600.0):  # a nested document's own, larger budget does not extend it
            assert Deadline(600.0).seconds <= budget
    assert Deadline(120.0).seconds == 120.0  # outside a parse: the budget as given
