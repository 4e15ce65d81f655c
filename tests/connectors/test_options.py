"""Issue 19 point 9: item keys are canonical wherever they enter, options are typed per kind.

Against a real site (Python's static file server on 127.0.0.1) through the real engine, state
store and SQLite index: ``only_keys`` spelled differently from the crawler's keys re-syncs the
page it names instead of indexing a second copy; the engine's own options are accepted by every
kind; a URL carrying a credential never becomes an item key.

Issue 21 point 5: every connector class names its options model (the one the connector registry
validates a sources file against, without importing the connector) and reads ``source.options``
only through it, so a typo of any kind fails when the DAG files are parsed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from include.config import EngineOptions, SourceConfig
from include.index import open_index
from include.stores import open_state_store
from plugins.connectors.base import get_connector_class, options_model, validate_source_options
from plugins.engine import run_pipeline
from tests.support import leakscan
from tests.support.airflow import write_sources
from tests.web.helpers import serve_directory

PAGES = {
    "index.html": '<a href="faq.html">FAQ</a> <a href="about.html">About</a> <a href="guide/">Guide</a>',
    "faq.html": '<h2 id="answers">Answers</h2><p>The ferry leaves at noon.</p>',
    "about.html": "<p>About the riverbend cooperative.</p>",
    "guide/index.html": '<a href="boats.html">Boats</a> <a href="nets.html">Nets</a> <a href="docks.html">Docks</a>',
    "guide/boats.html": "<p>Boats are moored at the east jetty.</p>",
    "guide/nets.html": "<p>Nets dry on the north wall.</p>",
    "guide/docks.html": "<p>Docks close at dusk.</p>",
}
ROOT = Path(__file__).resolve().parents[2]
WEB_OPTIONS: dict[str, Any] = {"delay_seconds": 0, "allowlist": ["127.0.0.1"], "retries": 0, "use_sitemaps": False}


@pytest.fixture
def site(tmp_path: Path):
    root = tmp_path / "www"
    for name, body in PAGES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"<html><head><title>{name}</title></head><body>{body}</body></html>")
    with serve_directory(root) as base:
        yield root, base


def _web_source(base: str, **options: Any) -> SourceConfig:
    return SourceConfig(kind="web", name="site", options={"seeds": [base + "/"], **WEB_OPTIONS, **options})


def _validate(kind: str, options: dict[str, Any]) -> Any:
    return validate_source_options(SourceConfig(kind=kind, name="x", options=options))


def _documents(source: SourceConfig) -> tuple[set[str], int]:
    """(indexed item keys in the state store, chunks in the index) of a source."""
    store = open_state_store()
    try:
        keys = {k for k, st in store.items(source.source_id).items() if st.indexed}
    finally:
        store.close()
    index = open_index(source.index)
    try:
        return keys, index.count(source=source.source_id)
    finally:
        index.close()


def test_only_keys_with_a_fragment_or_dot_segment_resyncs_the_page_it_names(site, tributary_home: Path) -> None:
    _, base = site
    source = _web_source(base)
    first = run_pipeline(source)
    assert first.status == "success" and first.counts["new"] == 7
    keys, chunks = _documents(source)
    assert len(keys) == 7 and f"{base}/faq.html" in keys

    again = run_pipeline(source, {"only_keys": [f"{base}/faq.html#answers", f"{base}/./faq.html", "faq.html"]})
    assert again.status == "success"
    assert again.counts["changed"] + again.counts["unchanged"] == 1 and again.counts["new"] == 0
    assert _documents(source) == (keys, chunks)  # 7 documents, not 9


def test_only_keys_from_the_cli_are_canonical(site, tributary_home: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    from plugins.engine.cli import main

    _, base = site
    sources = write_sources(
        tmp_path / "sources.yaml",
        [{"kind": "web", "name": "site", "schedule": None, "options": {"seeds": [base + "/"], **WEB_OPTIONS}}],
    )
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(sources))
    assert main(["sync", "web:site", "--json"]) == 0
    source = _web_source(base)
    keys, chunks = _documents(source)
    capsys.readouterr()
    for key in (f"{base}/./guide/boats.html#moorings", "guide/../guide/nets.html"):  # absolute, then relative
        assert main(["sync", "web:site", "--only-key", key, "--json"]) == 0
        out = capsys.readouterr().out
        counts = json.loads(out[re.search(r"^\{$", out, re.M).start() :])["counts"]  # log lines may precede it
        assert counts["new"] == 0 and counts["changed"] + counts["unchanged"] == 1
    assert _documents(source) == (keys, chunks)


def test_only_keys_carrying_a_token_are_refused_before_anything_is_fetched(site, tributary_home: Path) -> None:
    _, base = site
    source = _web_source(base)
    token = "tok-8d1e55b0aa"
    leakscan.register_secret("only_keys access_token", token)  # the session scan checks every log
    with pytest.raises(ValueError, match="Airflow Connection") as info:
        run_pipeline(source, {"only_keys": [f"{base}/faq.html?access_token={token}"]})
    assert token not in str(info.value) and "access_token" in str(info.value)
    assert _documents(source) == (set(), 0)
    store = open_state_store()
    try:
        assert store.runs(source.source_id) == []  # refused before the run log recorded the key
    finally:
        store.close()


@pytest.mark.parametrize(
    "key",
    ["https://example.org/faq.html?access_token=t0k", "https://example.org/?sig=t0k", "https://bob:t0k@example.org/"],
)
def test_the_trigger_form_refuses_a_key_carrying_a_credential(key: str) -> None:
    """Airflow validates Params when a run is triggered (UI form, REST conf): the run never exists."""
    from airflow.sdk.exceptions import ParamValidationError

    from plugins.tributary_airflow.dag_factory import build_dag

    dag = build_dag(SourceConfig(kind="web", name="x", options={"seeds": ["https://example.org/"]}))
    param = dag.params.get_param("only_keys")
    assert param.resolve(value=["https://example.org/faq.html#answers", "notes/a.md"])
    with pytest.raises(ParamValidationError):
        param.resolve(value=["https://example.org/", key])


def test_a_value_one_dag_resolves_is_not_another_dags_default() -> None:
    """Airflow's ``Param.resolve`` keeps the value it resolved: DAGs sharing Param objects would
    hand one trigger's ``only_keys`` to every later run of every source (seen in the full suite:
    a Yuque DAG run received a web test's keys)."""
    from plugins.tributary_airflow.dag_factory import build_dag

    first = build_dag(SourceConfig(kind="web", name="a", options={"seeds": ["https://example.org/"]}))
    first.params.get_param("only_keys").resolve(value=["https://example.org/faq.html"])
    second = build_dag(SourceConfig(kind="web", name="b", options={"seeds": ["https://example.org/"]}))
    assert second.params.get_param("only_keys").resolve() == []
    assert first.params.get_param("only_keys") is not second.params.get_param("only_keys")


def test_quarantine_after_is_accepted_and_applied_on_a_web_source(site, tributary_home: Path) -> None:
    """A page that fails to parse is skipped once it failed ``quarantine_after`` runs in a row
    (the web options model used to refuse the key the engine reads)."""
    root, base = site
    (root / "broken.pdf").write_bytes(b"%PDF-1.7\n" + b"\x00garbage" * 64)  # no xref, no objects
    (root / "index.html").write_text(
        "<html><body>" + PAGES["index.html"] + ' <a href="broken.pdf">report</a></body></html>'
    )
    source = _web_source(base, quarantine_after=1)
    first = run_pipeline(source)
    assert first.counts["failed"] == 1
    second = run_pipeline(source)
    assert second.counts["failed"] == 0 and second.counts["skipped"] == 1
    store = open_state_store()
    try:
        [skipped] = store.run_items(second.run_id, action="skipped", source=source.source_id)
    finally:
        store.close()
    assert skipped["item_key"] == f"{base}/broken.pdf" and "quarantined after 1" in skipped["reason"]


@pytest.mark.parametrize(
    ("kind", "options"),
    [
        ("web", {"seeds": ["https://example.org/"]}),
        ("files", {"root": "/srv/share"}),
        ("feishu", {"folders": ["fldcnX"]}),
        ("yuque", {"namespaces": ["alice/kb"]}),
    ],
)
def test_every_kind_accepts_the_engine_options_and_refuses_a_typo(kind: str, options: dict[str, Any]) -> None:
    # a crawl has no modified-time cursor to overlap, so web refuses window_overlap_minutes (below)
    engine = {"quarantine_after": 3} if kind == "web" else {"quarantine_after": 3, "window_overlap_minutes": 10}
    validated = _validate(kind, {**options, **engine})
    assert validated.quarantine_after == 3
    if kind != "web":
        assert validated.window_overlap_minutes == 10
    with pytest.raises(
        ValueError, match=r"options\.quarantine_afer: unknown option \(did you mean quarantine_after\?\)"
    ):
        _validate(kind, {**options, "quarantine_afer": 3})


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("https://example.org/?access_token=s3cr3tvalue", "access_token"),
        ("https://example.org/feed?format=rss&api_key=s3cr3tvalue", "api_key"),
        ("https://example.org/file?X-Amz-Signature=s3cr3tvalue", "X-Amz-Signature"),
        ("https://example.org/?key=s3cr3tvalue", "key"),
        ("https://alice:s3cr3tvalue@example.org/", "a password"),
        ("https://alice@example.org/", "user name"),
    ],
)
def test_a_seed_carrying_a_credential_is_refused(url: str, named: str) -> None:
    with pytest.raises(ValueError) as info:
        _validate("web", {"seeds": [url]})
    message = str(info.value)
    assert named in message and "Airflow Connection" in message and "s3cr3tvalue" not in message


def test_files_only_keys_name_the_file_however_spelled(tmp_path: Path, tributary_home: Path) -> None:
    root = tmp_path / "share"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "a.md").write_text("# A\n\nThe heron colony nests in March.\n")
    (root / "b.md").write_text("# B\n\nThe ferry runs hourly.\n")
    source = SourceConfig(kind="files", name="share", options={"root": str(root)})
    assert run_pipeline(source).counts["new"] == 2
    before = _documents(source)
    again = run_pipeline(source, {"only_keys": ["./notes//a.md", str(root / "notes" / "a.md")]})
    assert again.status == "success" and again.counts["new"] == 0
    assert again.counts["changed"] + again.counts["unchanged"] == 1  # notes/a.md, once
    assert _documents(source) == before


@pytest.mark.airflow
def test_dag_run_conf_only_keys_are_canonical(site, tributary_home: Path, tmp_path: Path, monkeypatch) -> None:
    """The trigger form / REST API's conf reaches the engine through the DAG's params."""
    from tests.support.airflow import last_run, run_dag

    _, base = site
    sources = write_sources(
        tmp_path / "sources.yaml",
        [{"kind": "web", "name": "site", "schedule": None, "options": {"seeds": [base + "/"], **WEB_OPTIONS}}],
    )
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(sources))
    monkeypatch.setenv("TRIBUTARY_TASK_RETRIES", "0")
    source = _web_source(base)
    assert run_pipeline(source).counts["new"] == 7
    before = _documents(source)
    dr = run_dag("sync_web_site", conf={"only_keys": [f"{base}/faq.html#answers", f"{base}/./faq.html"]})
    assert str(dr.state).endswith("success")
    counts = last_run(source.source_id)["counts"]
    assert counts["new"] == 0 and counts["changed"] + counts["unchanged"] == 1
    assert _documents(source) == before


_LOAD = """
import json, sys
from pathlib import Path
from include.config import load_sources_report
from plugins.connectors.base import validate_source_options
sources, errors = load_sources_report(Path(sys.argv[1]), validate_source_options)
heavy = sorted(m for m in sys.modules if m.endswith(".connector") or m.split(".")[0] in ("numpy", "openpyxl", "lxml"))
print(json.dumps({"ok": [s.source_id for s in sources], "errors": [e.message for e in errors], "heavy": heavy}))
"""


def test_options_of_every_kind_are_checked_without_importing_connectors(tmp_path: Path) -> None:
    """What the DAG processor does on every parse: each kind's options model, no connector
    (Yuque's pulls in numpy and openpyxl) and no parser library."""
    sources = write_sources(
        tmp_path / "sources.yaml",
        [
            {"kind": "web", "name": "w", "options": {"seeds": ["https://example.org/"], "quarantine_after": 2}},
            {"kind": "files", "name": "f", "options": {"root": str(tmp_path)}},
            {"kind": "feishu", "name": "d", "options": {"folders": ["fldcnX"], "window_overlap_minutes": 10}},
            {"kind": "yuque", "name": "y", "options": {"namespaces": "all", "breadcrumb": False}},
        ],
    )
    out = subprocess.run(
        [sys.executable, "-c", _LOAD, str(sources)], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["ok"] == ["web:w", "files:f", "feishu:d"]
    [error] = report["errors"]
    assert "source #3 (yuque:y)" in error and "options.breadcrumb: unknown option (did you mean breadcrumbs?)" in error
    assert report["heavy"] == []


def test_cli_sources_names_an_invalid_source(tmp_path: Path, monkeypatch, capsys) -> None:
    from plugins.engine.cli import main

    sources = write_sources(
        tmp_path / "sources.yaml",
        [
            {"kind": "files", "name": "ok", "options": {"root": str(tmp_path)}},
            {"kind": "files", "name": "typo", "options": {"root": str(tmp_path), "max_file_byte": 10}},
        ],
    )
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(sources))
    assert main(["sources", "--json"]) == 1
    out = capsys.readouterr()
    assert [r["source"] for r in json.loads(out.out)] == ["files:ok"]
    assert "files:typo" in out.err and "options.max_file_byte: unknown option (did you mean max_file_bytes?)" in out.err


def _option_reads(path: Path) -> set[str]:
    """Keys read as ``<...>options.get("k")`` / ``opts.get("k")`` / ``options["k"]`` in a module."""
    import ast

    def is_options(node: ast.AST) -> bool:
        name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
        return name in ("options", "opts")

    keys: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and is_options(node.func.value)
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            keys.add(str(node.args[0].value))
        elif isinstance(node, ast.Subscript) and is_options(node.value) and isinstance(node.slice, ast.Constant):
            keys.add(str(node.slice.value))
    return keys


@pytest.mark.parametrize("kind", ["web", "files", "feishu", "yuque"])
def test_every_option_a_connector_reads_is_in_its_model(kind: str) -> None:
    """The options model refuses unknown keys at DAG parse, so it must know every key read."""
    fields = set(options_model(kind).model_fields)
    package = ROOT / "plugins" / "connectors" / kind
    read = {k for p in package.glob("*.py") if p.name != "options.py" for k in _option_reads(p)}
    assert read - fields == set()


def test_every_option_the_engine_reads_is_an_engine_option() -> None:
    """``source.options`` keys read outside the connectors are the engine's, accepted by every
    kind; a module of one kind's Airflow pieces (``operators/feishu.py``) may read that kind's."""
    import ast

    def source_options(node: ast.AST) -> bool:
        if not (isinstance(node, ast.Attribute) and node.attr == "options"):
            return False
        owner = node.value
        return (isinstance(owner, ast.Name) and owner.id in ("source", "src")) or (
            isinstance(owner, ast.Attribute) and owner.attr == "source"
        )

    unknown: dict[str, set[str]] = {}
    read: set[str] = set()
    for path in [*(ROOT / "include").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]:
        if "connectors" in path.relative_to(ROOT).parts:
            continue
        allowed = set(options_model(path.stem).model_fields) if path.stem in KINDS else set(EngineOptions.model_fields)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and source_options(node.func.value)
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                key = str(node.args[0].value)
                read.add(key)
                if key not in allowed:
                    unknown.setdefault(str(path.relative_to(ROOT)), set()).add(key)
    assert "window_overlap_minutes" in read  # the sync operator's read is found
    assert unknown == {}


# kind -> (valid options, a typo'd key, the field it means): issue 21 point 5
KINDS: dict[str, tuple[dict[str, Any], str, str]] = {
    "web": ({"seeds": ["https://example.org/"]}, "max_page", "max_pages"),
    "files": ({"root": "/srv/share"}, "max_file_byte", "max_file_bytes"),
    "feishu": ({"folders": ["fldcnX"]}, "export_concurency", "export_concurrency"),
    "yuque": ({"namespaces": ["alice/kb"]}, "breadcrumb", "breadcrumbs"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_connector_reads_its_options_through_the_registry_model(kind: str) -> None:
    """The class names the model the registry validates sources files against; the connector
    built from a source holds its options as that model, and refuses the typo when it is built
    (a SourceConfig made in code never went through the sources file's check)."""
    options, typo, field = KINDS[kind]
    cls = get_connector_class(kind)
    model = options_model(kind)
    assert cls.options_model is model and issubclass(model, EngineOptions)
    assert model.model_config.get("extra") == "forbid"
    connector = cls(SourceConfig(kind=kind, name="x", options={**options, "quarantine_after": 4}))
    assert isinstance(connector.options, model) and connector.options.quarantine_after == 4
    with pytest.raises(ValueError, match=typo):
        cls(SourceConfig(kind=kind, name="x", options={**options, typo: 1}))
    with pytest.raises(ValueError, match=rf"options\.{typo}: unknown option \(did you mean {field}\?\)"):
        _validate(kind, {**options, typo: 1})


def test_an_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown kind 'ftp' \(known: feishu, files, web, yuque\)"):
        options_model("ftp")


def test_a_typo_of_every_kind_fails_when_the_dag_files_are_parsed(tmp_path: Path, monkeypatch) -> None:
    """The DAG processor's parse (a real DagBag over dags/, offline): each kind's typo is the
    import error of the check file, naming the source and the key; the valid sources keep their DAGs."""
    import socket

    from airflow.dag_processing.dagbag import DagBag

    def refuse(self: socket.socket, address: Any, *args: Any, **kwargs: Any) -> None:
        raise OSError(f"network access during DAG import: {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    entries = []
    for kind, (options, typo, _) in sorted(KINDS.items()):
        entries.append({"kind": kind, "name": "good", "options": options})
        entries.append({"kind": kind, "name": "typo", "options": {**options, typo: 1}})
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "s.yaml", entries)))
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    # Feishu and Yuque read permissions from their source: each valid one has its permissions DAG too
    perms = {f"perms_{kind}_good" for kind in ("feishu", "yuque")}
    assert set(bag.dags) == {f"sync_{kind}_good" for kind in KINDS} | perms
    [(path, error)] = bag.import_errors.items()
    assert path.endswith("tributary_sources_check.py")
    for kind, (_, typo, field) in KINDS.items():
        assert f"{kind}:typo" in error and f"options.{typo}: unknown option (did you mean {field}?)" in error


def _source_option_reads(path: Path) -> list[tuple[int, bool]]:
    """``source.options`` / ``self.source.options`` in a module: (line, is it a model_validate argument)."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    validated = {
        id(arg)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "model_validate"
        for arg in node.args
    }
    reads = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "options":
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id == "source") or (
                isinstance(owner, ast.Attribute) and owner.attr == "source"
            ):
                reads.append((node.lineno, id(node) in validated))
    return reads


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_connector_touches_source_options_only_to_validate_them(kind: str) -> None:
    package = ROOT / "plugins" / "connectors" / kind
    reads = {p.name: _source_option_reads(p) for p in sorted(package.glob("*.py"))}
    assert any(validated for found in reads.values() for _, validated in found)  # the model is built
    raw = {name: [line for line, validated in found if not validated] for name, found in reads.items()}
    assert {name: lines for name, lines in raw.items() if lines} == {}


def test_a_connector_without_an_options_model_is_not_registered() -> None:
    from plugins.connectors.base import Connector, register_connector

    class Untyped(Connector):
        kind = "untyped"

        def discover(self, request: Any) -> Any:
            raise NotImplementedError

        def fetch(self, change: Any) -> Any:
            raise NotImplementedError

    with pytest.raises(TypeError, match="options_model"):
        register_connector(Untyped)
    with pytest.raises(KeyError, match="untyped"):
        get_connector_class("untyped")


def test_the_sources_file_is_checked_with_the_registry_validator_passed_in(tmp_path: Path) -> None:
    """The ground knows no connector: a caller above it hands the registry's validator in, and
    without one the ground cannot be asked to check options at all."""
    from include.config import load_sources_report

    sources = write_sources(
        tmp_path / "s.yaml",
        [
            {"kind": "files", "name": "ok", "options": {"root": str(tmp_path)}},
            {"kind": "yuque", "name": "typo", "options": {"breadcrumb": False}},
        ],
    )
    passed = load_sources_report(sources, validate=validate_source_options)
    assert [s.source_id for s in passed[0]] == ["files:ok"]
    with pytest.raises(TypeError):
        load_sources_report(sources)  # type: ignore[call-arg]
    assert "options.breadcrumb: unknown option (did you mean breadcrumbs?)" in passed[1][0].message
