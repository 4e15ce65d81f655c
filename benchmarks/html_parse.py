"""HTML parse speed and a dense page's peak memory: ours against lxml's own parse and markitdown.

Speed: the PostgreSQL 15 manual (Debian ``postgresql-doc-15``, 1,169 pages; ``--quick`` every
sixth) parsed from bytes in memory by three tools in turn, the order rotated each round so
that a load swing on the shared machine hits all of them: ours (``parse_document``, the
whole HTML parser: decoding, chrome, main content, blocks), ``lxml.html.fromstring`` alone
(the tree every HTML path starts from) and markitdown's HTML to Markdown conversion. Pages/s
is per CPU second of this process (``time.process_time``, less moved by other processes'
load than wall time), the median of the rounds.

Memory: a page with a block every ~80 bytes (``tests.parsers.html_golden.dense_page``,
20 MB; ``--quick`` 5 MB) parsed in a forked child; the figure is the child's peak RSS growth
(``ru_maxrss`` over its resident set at the fork) divided by the page's size, for ours and for
``lxml.html.fromstring`` alone. Goal (issue 36): ours within 8x.

Run with the benchmark venv (markitdown): ``.venv-bench/bin/python -m benchmarks html_parse``.
"""

from __future__ import annotations

import io
import os
import pickle
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PG_MANUAL = Path("/usr/share/doc/postgresql-doc-15/html")
ROUNDS = 3
DENSE_BYTES = 20_000_000
DENSE_GOAL = 8.0


def _ours() -> Callable[[bytes], object]:
    from include.contract import ParseError, RawDocument
    from plugins.parsers import parse_document

    def parse(data: bytes) -> object:
        try:
            return parse_document(RawDocument("k", data, "page.html", media_type="text/html"))
        except ParseError as exc:  # counted as a page all the same: it was read whole
            return exc

    return parse


def _lxml() -> Callable[[bytes], object]:
    from lxml import html

    return html.fromstring


def _markitdown() -> Callable[[bytes], object]:
    from markitdown import MarkItDown, StreamInfo

    converter = MarkItDown(enable_plugins=False)
    info = StreamInfo(extension=".html", mimetype="text/html", charset="utf-8")
    return lambda data: converter.convert_stream(io.BytesIO(data), stream_info=info).text_content


TOOLS: dict[str, Callable[[], Callable[[bytes], object]]] = {
    "ours": _ours,
    "lxml.html.fromstring": _lxml,
    "markitdown": _markitdown,
}


def _speeds(pages: list[bytes]) -> dict[str, list[float]]:
    """Pages per CPU second, per tool and round (tools rotated round to round)."""
    parsers = {}
    for name, make in TOOLS.items():
        try:
            parsers[name] = make()
        except ImportError:  # markitdown outside .venv-bench: reported as absent
            continue
        parsers[name](pages[0])  # warm-up, untimed: lazy imports are not parsing
    rates: dict[str, list[float]] = {name: [] for name in parsers}
    names = list(parsers)
    for rnd in range(ROUNDS):
        for name in names[rnd % len(names) :] + names[: rnd % len(names)]:
            parse = parsers[name]
            started = time.process_time()
            for data in pages:
                parse(data)
            rates[name].append(len(pages) / (time.process_time() - started))
    return rates


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_growth(tool: str, data: bytes) -> int:
    """Peak RSS growth of ``TOOLS[tool]`` parsing ``data`` in a forked child, in bytes."""
    parse = TOOLS[tool]()
    parse(b"<p>warm</p>")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: measure, send the number, leave without cleanup
        try:
            os.close(read_fd)
            base = _rss()
            parse(data)
            os.write(write_fd, pickle.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base))
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        answer = fh.read()
    os.waitpid(pid, 0)
    return int(pickle.loads(answer))


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(quick: bool = False) -> dict[str, Any]:
    from tests.parsers.html_golden import dense_page

    if not PG_MANUAL.is_dir():
        raise SystemExit(f"{PG_MANUAL} absent: apt-get install postgresql-doc-15")
    paths = sorted(PG_MANUAL.glob("*.html"))[:: 6 if quick else 1]
    pages = [p.read_bytes() for p in paths]
    load_before = _load()
    rates = {name: statistics.median(r) for name, r in _speeds(pages).items()}
    rows: list[dict[str, Any]] = []
    for peer in ("lxml.html.fromstring", "markitdown"):
        if peer in rates:
            rows.append(
                {
                    "figure": f"PG15 manual pages/s per CPU s ({len(pages)} pages)",
                    "ours": round(rates["ours"], 1),
                    "peer": peer,
                    "peer value": round(rates[peer], 1),
                    "ratio": round(rates["ours"] / rates[peer], 3),
                    "goal": "cheaper than before (see the section's notes)",
                    "load": f"{load_before} / {_load()}",
                }
            )
    dense = dense_page(DENSE_BYTES // 4 if quick else DENSE_BYTES)
    ours = _peak_growth("ours", dense) / len(dense)
    lxml_alone = _peak_growth("lxml.html.fromstring", dense) / len(dense)
    rows.append(
        {
            "figure": f"dense page ({len(dense) / 1e6:.0f} MB, a block per ~76 B): peak RSS growth / size",
            "ours": round(ours, 2),
            "peer": "lxml.html.fromstring",
            "peer value": round(lxml_alone, 2),
            "ratio": round(ours / lxml_alone, 3),
            "goal": f"ours <= {DENSE_GOAL:g}x: {'met' if ours <= DENSE_GOAL else 'not met'}",
            "load": _load(),
        }
    )
    return {
        "title": "HTML parse: PostgreSQL 15 manual speed and a dense page's peak memory",
        "peer": "lxml.html.fromstring (tree only), markitdown (HTML to Markdown)",
        "rows": rows,
        "summary": f"Rounds: {ROUNDS}, tools rotated; load average (1, 5, 15 min) before / after each figure.",
    }


def cpu_pass() -> str:
    """One pass of ours and of lxml over the manual, CPU seconds: for an A/B against another checkout.

    ``PYTHONPATH=<checkout> python benchmarks/html_parse.py --cpu-pass`` parses with that
    checkout's ``plugins`` (this file imports nothing else of the repository for it).
    """
    pages = [p.read_bytes() for p in sorted(PG_MANUAL.glob("*.html"))]
    seconds = {}
    for name in ("lxml.html.fromstring", "ours"):
        parse = TOOLS[name]()
        started = time.process_time()
        for data in pages:
            parse(data)
        seconds[name] = time.process_time() - started
    return f"{len(pages)} pages: ours {seconds['ours']:.2f} s, lxml {seconds['lxml.html.fromstring']:.2f} s CPU"


if __name__ == "__main__" and sys.argv[1:] == ["--cpu-pass"]:
    print(cpu_pass())
