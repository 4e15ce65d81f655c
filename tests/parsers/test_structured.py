"""YAML and TOML: key paths and values, one block per top-level key, safe loaders (issue 23, point 4).

Real files: Apache Airflow's own ``config_templates/config.yml`` and markdown-it-py's
``port.yaml`` (both shipped inside installed dependencies), this repository's ``pyproject.toml``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from include.contract import ParseError, ParseErrorCode
from tests.parsers.capped import MiB, run_capped
from tests.parsers.conftest import parse_bytes

REPO = Path(__file__).resolve().parents[2]

CONFIG = b"""# service settings
title: Inventory service
server:
  host: 0.0.0.0
  ports: [8080, 8081]
  tls:
    enabled: true
    cert: /etc/ssl/cert.pem
databases:
  - name: main
    url: postgres://db/main
  - name: cache
    url: redis://cache
empty: {}
release_date: 2026-01-02
notes: |
  first line
  second line
"""


def test_yaml_blocks_per_top_level_key_with_paths_and_lines() -> None:
    doc = parse_bytes(CONFIG, "service.yaml")
    assert doc.parser == "yaml" and doc.title == "Inventory service"
    got = [(b.text, b.positions[0].path, b.positions[0].line) for b in doc.blocks]
    assert got == [
        ("title: Inventory service", "title", 2),
        (
            "server.host: 0.0.0.0\nserver.ports: 8080, 8081\nserver.tls.enabled: true\nserver.tls.cert: /etc/ssl/cert.pem",
            "server",
            3,
        ),
        (
            "databases[0].name: main\ndatabases[0].url: postgres://db/main\n"
            "databases[1].name: cache\ndatabases[1].url: redis://cache",
            "databases",
            9,
        ),
        ("empty:", "empty", 14),
        ("release_date: 2026-01-02", "release_date", 15),
        ("notes: first line\nsecond line", "notes", 16),
    ]


def test_yaml_streams_lists_and_scalars() -> None:
    doc = parse_bytes(b"kind: A\n---\nkind: B\n...\n", "multi.yml", "application/yaml")
    assert [(b.text, b.metadata) for b in doc.blocks] == [("kind: A", {"document": 0}), ("kind: B", {"document": 1})]
    assert doc.metadata == {"documents": 2}
    doc = parse_bytes(b"- a: 1\n- plain\n", "list.yaml")
    assert [(b.text, b.positions[0].path) for b in doc.blocks] == [("[0].a: 1", "[0]"), ("[1]: plain", "[1]")]
    assert parse_bytes(b"just a scalar\n", "s.yaml").text == "just a scalar"


def test_yaml_anchors_within_the_cap_are_expanded() -> None:
    doc = parse_bytes(b"base: &b {retries: 3}\njob:\n  <<: *b\n  name: sync\n", "ci.yaml")
    assert doc.blocks[1].text == "job.retries: 3\njob.name: sync"


BILLION_LAUGHS = b'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + b"".join(
    b"%c: &%c [%s]\n" % (98 + i, 98 + i, b",".join([b"*%c" % (97 + i)] * 9)) for i in range(9)
)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (BILLION_LAUGHS, ParseErrorCode.BOMB),
        (b"a: &a [*a]\n", ParseErrorCode.BOMB),  # an alias inside its own anchor
        (b"[" * 5000 + b"]" * 5000, ParseErrorCode.BOMB),  # libyaml's nesting cap
        (b"key: [unclosed\n", ParseErrorCode.CORRUPT),
        (b"a: 1\n b: 2\n", ParseErrorCode.CORRUPT),
        (b"? [1, 2]\n: unhashable key\n", ParseErrorCode.CORRUPT),
        (b"!!python/object/apply:os.system ['true']\n", ParseErrorCode.CORRUPT),  # safe loader only
        (b"# only a comment\n", ParseErrorCode.EMPTY),
    ],
)
def test_hostile_and_bad_yaml_are_typed_errors(data: bytes, code: ParseErrorCode) -> None:
    result, growth = run_capped(lambda: _error_code(data, "bad.yaml"), 512 * MiB)
    assert result == code
    assert growth < 256 * MiB


def _error_code(data: bytes, name: str) -> ParseErrorCode | None:
    try:
        parse_bytes(data, name)
    except ParseError as exc:
        return exc.code
    return None


TOML = b"""title = "TOML Example"
version = 2

[owner]
name = "Tom Preston-Werner"
dob = 1979-05-27T07:32:00-08:00

[database.limits]
connections = 5000
ports = [ 8000, 8001 ]

[[products]]
name = "Hammer"
sku = 738594937

[[products]]
name = "Nail"
"""


def test_toml_blocks_paths_and_lines() -> None:
    doc = parse_bytes(TOML, "config.toml")
    assert doc.parser == "toml" and doc.title == "TOML Example"
    got = [(b.text, b.positions[0].path, b.positions[0].line) for b in doc.blocks]
    assert got == [
        ("title: TOML Example", "title", 1),
        ("version: 2", "version", 2),
        ("owner.name: Tom Preston-Werner\nowner.dob: 1979-05-27 07:32:00-08:00", "owner", 4),
        ("database.limits.connections: 5000\ndatabase.limits.ports: 8000, 8001", "database", 8),
        ("products[0].name: Hammer\nproducts[0].sku: 738594937\nproducts[1].name: Nail", "products", 12),
    ]


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"a = \n", ParseErrorCode.CORRUPT),
        (b"a = 1\na = 2\n", ParseErrorCode.CORRUPT),
        (b"a = " + b"[" * 50_000 + b"]" * 50_000, ParseErrorCode.BOMB),
        (b"# nothing\n", ParseErrorCode.EMPTY),
    ],
)
def test_bad_toml_is_a_typed_error(data: bytes, code: ParseErrorCode) -> None:
    assert _error_code(data, "bad.toml") == code


def test_real_yaml_files_shipped_with_dependencies() -> None:
    import airflow
    import markdown_it

    config = Path(airflow.__file__).parent / "config_templates" / "config.yml"
    port = Path(markdown_it.__file__).parent / "port.yaml"
    if not config.exists() or not port.exists():
        pytest.skip("the installed airflow / markdown-it-py no longer ship these YAML files")
    doc = parse_bytes(config.read_bytes(), config.name)
    assert doc.blocks[0].positions[0].path == "core"
    assert "core.options.dags_folder.description: The folder where your airflow pipelines live" in doc.text
    doc = parse_bytes(port.read_bytes(), port.name)
    assert doc.blocks[0].positions[0].path == "[0]" and "[0].package: markdown-it/markdown-it" in doc.blocks[0].text


def test_real_toml_pyproject() -> None:
    doc = parse_bytes((REPO / "pyproject.toml").read_bytes(), "pyproject.toml")
    paths = [b.positions[0].path for b in doc.blocks]
    assert paths[:2] == ["project", "tool"] and doc.blocks[0].positions[0].line == 1
    assert "project.name: tributary" in doc.blocks[0].text
    assert "tool.ruff.line-length: 120" in doc.text
