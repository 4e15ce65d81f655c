"""Credentials come only from Airflow Connections or environment variables (issue 10, item 4).

A source file is parsed by every scheduler and DAG processor and rendered into the DAGs, so a
secret written into it would spread; ``include/config.py`` refuses one at validation time — a
credential-named key at any depth of ``options``/``parser``/``chunker.options``/``index.options``
or a URL carrying a password — with an error that points at Connections and never repeats the
value. Connectors themselves read no environment variable: their credentials arrive through
``include.connections.get_connection(conn_id)`` (Airflow's metadata DB, ``AIRFLOW_CONN_<ID>``, secrets backend); the
rest of the code reads only ``TRIBUTARY_*`` and the Elasticsearch client's standard variables.
"""

from __future__ import annotations

import ast
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from include.config import SourceConfig, load_sources
from plugins.connectors.base import validate_source_options
from tests.support.airflow import write_sources

ROOT = Path(__file__).resolve().parents[2]
SECRET = "SECRET-" + uuid.uuid4().hex

# (where the credential is put, the path the error must name)
REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"options": {"folders": ["fldcnX"], "app_secret": SECRET}}, "options.app_secret"),
    ({"options": {"token": SECRET}}, "options.token"),
    ({"options": {"password": SECRET}}, "options.password"),
    ({"options": {"client": {"timeout": 3, "tenant_access_token": SECRET}}}, "options.client.tenant_access_token"),
    ({"options": {"seeds": ["https://x.test/"], "headers": {"Authorization": f"Bearer {SECRET}"}}}, "Authorization"),
    ({"options": {"seeds": ["https://x.test/"], "headers": {"X-Auth-Token": SECRET}}}, "options.headers.X-Auth-Token"),
    ({"options": {"seeds": ["https://x.test/"], "headers": {"Cookie": f"sid={SECRET}"}}}, "options.headers.Cookie"),
    ({"options": {"seeds": [f"https://bob:{SECRET}@x.test/"]}}, "options.seeds[0] (a URL with a password)"),
    ({"options": {"redis_url": f"redis://:{SECRET}@127.0.0.1:6379/0"}}, "options.redis_url (a URL with a password)"),
    ({"options": {"api-key": SECRET}}, "options.api-key"),
    ({"parser": {"pdf_password": SECRET}}, "parser.pdf_password"),
    ({"index": {"backend": "elasticsearch", "options": {"api_key": SECRET}}}, "index.options.api_key"),
    (
        {"index": {"backend": "elasticsearch", "options": {"url": f"https://elastic:{SECRET}@es:9200"}}},
        "index.options.url",
    ),
]


@pytest.mark.parametrize(("extra", "named"), REFUSED, ids=[n for _, n in REFUSED])
def test_credentials_in_source_config_are_refused(extra: dict[str, Any], named: str) -> None:
    with pytest.raises(ValidationError) as info:
        SourceConfig.model_validate({"kind": "web", "name": "x", **extra})
    message = str(info.value)
    assert named in message and "Airflow Connection" in message and "conn_id" in message
    assert SECRET not in message  # the error is logged by every DAG processor: never the value


def test_sources_file_with_a_secret_from_the_environment_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``${VAR}`` expansion does not launder a secret: it would still sit in the DAG's source config."""
    monkeypatch.setenv("FEISHU_APP_SECRET", SECRET)
    path = write_sources(
        tmp_path / "sources.yaml",
        [
            {"kind": "files", "name": "ok", "options": {"root": str(tmp_path)}},
            {
                "kind": "feishu",
                "name": "drive",
                "conn_id": "feishu_default",
                "options": {"folders": ["fldcnX"], "app_secret": "${FEISHU_APP_SECRET}"},
            },
        ],
    )
    with pytest.raises(ValueError) as info:
        load_sources(path, validate_source_options)
    message = str(info.value)
    assert str(path) in message and "source #1" in message and "options.app_secret" in message
    assert SECRET not in message


@pytest.mark.parametrize(
    "options",
    [
        {"folders": ["fldcnABC"], "client": {"token_margin": 300, "max_attempts": 3}},  # tuning, not secrets
        {"seeds": ["https://bob@x.test/docs"], "headers": {"User-Agent": "x", "Accept-Language": "zh"}},
        {"namespaces": ["alice/kb"], "login": "alice", "max_tokens": 10, "tokenizer": "cl100k"},
    ],
)
def test_ordinary_options_still_validate(options: dict[str, Any]) -> None:
    cfg = SourceConfig(kind="web", name="x", options=options, chunker={"options": {"chunk_token_num": 256}})
    assert cfg.options == options


def test_shipped_sources_file_validates() -> None:
    assert load_sources(ROOT / "include" / "sources.yaml", validate_source_options)


def _const(node: ast.AST, consts: dict[str, str]) -> str | None:
    """A string expression's value when it is built from literals and module constants."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    if isinstance(node, ast.JoinedStr):
        parts = [_const(v.value if isinstance(v, ast.FormattedValue) else v, consts) for v in node.values]
        return None if None in parts else "".join(parts)  # type: ignore[arg-type]
    return None


def _env_reads(path: Path) -> list[tuple[int, str | None]]:
    """(line, variable name, None when not resolvable) of every os.environ / os.getenv use."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    consts = {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    # os.environ / os.getenv only: psutil's Process.environ() reads another process's environment
    # (the renderer finds the browsers it tagged), not this process's configuration
    uses = {
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and n.attr in ("environ", "getenv")
        and isinstance(n.value, ast.Name)
        and n.value.id == "os"
    }
    named: dict[int, str] = {}
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            func = node.func
            is_environ_get = (
                func.attr == "get" and isinstance(func.value, ast.Attribute) and func.value.attr == "environ"
            )
            if is_environ_get or func.attr == "getenv":
                key = node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "environ":
            key = node.slice
        if key is not None and (value := _const(key, consts)) is not None:
            named[node.lineno] = value
    return sorted((line, named.get(line)) for line in uses)


def test_connectors_read_no_environment_and_get_credentials_from_connections() -> None:
    connectors = sorted((ROOT / "plugins" / "connectors").rglob("*.py"))
    assert len(connectors) > 20
    offenders = {str(p.relative_to(ROOT)): _env_reads(p) for p in connectors if _env_reads(p)}
    assert offenders == {}, f"connectors must take credentials from their Airflow Connection: {offenders}"
    # each kind that authenticates resolves its Connection through the ground's Connections
    # lookup (include.connections, which reads Airflow's secrets backends)
    for module in ("feishu/connector.py", "yuque/connector.py", "web/connector.py"):
        text = (ROOT / "plugins" / "connectors" / module).read_text(encoding="utf-8")
        assert "from include.connections import get_connection" in text and "get_connection(" in text, module


def test_other_code_reads_only_tributary_and_service_variables() -> None:
    # OMP_WAIT_POLICY: the local embedder sets it (unless set) for the OpenMP runtime of its model;
    # OMP_THREAD_LIMIT: OCR sets it (unless set) for tesseract's OpenMP threads
    allowed = (
        "TRIBUTARY_",
        "AIRFLOW_",
        "ELASTICSEARCH_URL",
        "ELASTICSEARCH_API_KEY",
        "OMP_WAIT_POLICY",
        "OMP_THREAD_LIMIT",
    )
    files = [*sorted((ROOT / "include").rglob("*.py")), *sorted((ROOT / "plugins").rglob("*.py"))]
    seen: dict[str, list[tuple[int, str | None]]] = {}
    for path in files:
        rel = str(path.relative_to(ROOT))
        if rel.startswith("plugins/tributary_airflow/demo/"):
            continue  # the demo driver sets up its own throw-away environment
        for line, name in _env_reads(path):
            if name is not None and name.startswith(allowed):
                continue
            seen.setdefault(rel, []).append((line, name))
    # the one read by a computed name is the ${VAR} expansion of the sources file itself, whose
    # result is validated like any literal value (test above)
    assert list(seen) == ["include/config.py"], json.dumps(seen)
    assert all(name is None for _, name in seen["include/config.py"])
