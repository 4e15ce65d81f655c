"""Session-wide secret registry and log scanner (issue 10, item 4: "no secret or token from the
simulators ever appears in task logs — grep the logs of a full test run").

The simulators call :func:`register_secret` for every credential they know or issue (Feishu app
secrets, every tenant_access_token, Yuque tokens). Registration appends one JSON line to a file
in the directory named by ``TRIBUTARY_TEST_SECRETS_DIR`` — a file per process, so simulators
running in subprocesses (they inherit the variable) register too. ``tests/conftest.py`` sets the
directory, keeps every test's captured output, and at session end calls :func:`scan` over every
file the run produced (Airflow task and component logs, TRIBUTARY_HOME dirs, captured output);
a finding fails the session naming the file and the kind of secret, never the secret.

Without the variable (the simulators run standalone, benchmarks) registration does nothing.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ENV", "Finding", "ScanResult", "load_secrets", "register_secret", "scan"]

ENV = "TRIBUTARY_TEST_SECRETS_DIR"
# shorter values would match by accident (and no simulator issues one this short)
MIN_LENGTH = 8
_CHUNK = 16 << 20


def register_secret(kind: str, value: str | None) -> None:
    """Record a credential the scan must never find in any log of this test session."""
    directory = os.environ.get(ENV)
    if not directory or not value or len(value) < MIN_LENGTH:
        return
    line = (json.dumps([kind, value]) + "\n").encode("utf-8")
    path = Path(directory) / f"secrets-{os.getpid()}.jsonl"
    # O_APPEND: one write per line, so threads of the same simulator never interleave lines
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def load_secrets(directory: Path) -> dict[str, str]:
    """Every registered secret of the session: value -> kind."""
    out: dict[str, str] = {}
    for path in sorted(directory.glob("secrets-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                kind, value = json.loads(line)
            except ValueError:  # a process killed mid-write leaves at most one torn line
                continue
            out[value] = kind
    return out


@dataclass(frozen=True)
class Finding:
    path: Path
    kind: str


@dataclass
class ScanResult:
    files: int = 0
    bytes: int = 0
    by_category: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    secrets_by_kind: Counter[str] = field(default_factory=Counter)
    unreadable: list[Path] = field(default_factory=list)


def category(path: Path) -> str:
    """Label for the summary: what kind of file this is."""
    text = path.as_posix()
    if "/dag_id=" in text:  # Airflow's task log layout: dag_id=<id>/run_id=<id>/task_id=<id>/attempt=N.log
        return "airflow task logs"
    if "/captured/dag-test/" in text:
        return "dag.test() task logs (captured output)"
    if "/captured/" in text:
        return "captured test output"
    if path.suffix == ".log" or "/logs/" in text:
        return "component logs"
    return "other files (state, index, staging, config)"


def _trie_pattern(words: Iterable[bytes]) -> bytes:
    """One regex matching any of ``words``, factored by common prefixes.

    A plain alternation retries every secret at each position; hundreds of tenant tokens share
    ``t-``, so the factored form keeps the scan linear in the haystack.
    """
    trie: dict = {}
    for word in words:
        node = trie
        for byte in word:
            node = node.setdefault(byte, {})
        node[-1] = {}  # end marker

    def emit(node: dict) -> bytes:
        alts = []
        for key in sorted(k for k in node if k != -1):
            child = node[key]
            run = bytes([key])
            while len(child) == 1 and -1 not in child:  # follow single-child chains as a literal
                (nxt,) = child
                run += bytes([nxt])
                child = child[nxt]
            alts.append(re.escape(run) + (emit(child) if child else b""))
        if -1 in node:  # a secret that is a prefix of another: the shorter one already matches
            return b""
        if len(alts) == 1:
            return alts[0]
        return b"(?:" + b"|".join(alts) + b")"

    return emit(trie)


def _iter_files(root: Path) -> Iterable[Path]:
    for dirpath, _dirnames, filenames in os.walk(root, followlinks=False):
        for name in filenames:
            yield Path(dirpath, name)


def scan(
    roots: Iterable[Path],
    secrets: Mapping[str, str],
    *,
    exclude: Iterable[Path] = (),
    modified_since: Mapping[Path, float] | None = None,
) -> ScanResult:
    """Search every regular file under ``roots`` for any of ``secrets`` (value -> kind).

    ``exclude``: directories not to enter (the registry itself). ``modified_since``: per root, only
    files modified at or after this time (a long-lived AIRFLOW_HOME shared with earlier runs).
    """
    needles = {s.encode("utf-8"): kind for s, kind in secrets.items() if len(s) >= MIN_LENGTH}
    result = ScanResult(secrets_by_kind=Counter(needles.values()))
    pattern = re.compile(_trie_pattern(needles)) if needles else None
    longest = max((len(n) for n in needles), default=0)
    excluded = {p.resolve() for p in exclude}
    seen: set[Path] = set()
    for root in roots:
        if not root.is_dir():
            continue
        since = (modified_since or {}).get(root)
        for path in _iter_files(root):
            real = path.resolve()
            if real in seen or any(real.is_relative_to(e) for e in excluded):
                continue
            seen.add(real)
            try:
                st = path.lstat()
                if not path.is_file() or path.is_symlink() or (since is not None and st.st_mtime < since):
                    continue
                kinds = _search_file(path, pattern, needles, longest) if pattern else set()
            except OSError:
                result.unreadable.append(path)
                continue
            result.files += 1
            result.bytes += st.st_size
            result.by_category[category(path)] += 1
            result.findings.extend(Finding(path, kind) for kind in sorted(kinds))
    return result


def _search_file(path: Path, pattern: re.Pattern[bytes], needles: Mapping[bytes, str], longest: int) -> set[str]:
    kinds: set[str] = set()
    tail = b""
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            data = tail + chunk
            # the trie pattern ends at the shortest secret of a prefix family: extend to the full one
            for match in pattern.finditer(data):
                start = match.start()
                for needle, kind in needles.items():
                    if data.startswith(needle, start):
                        kinds.add(kind)
            tail = data[-(longest - 1) :] if longest > 1 else b""
    return kinds
