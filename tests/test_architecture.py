"""The architecture, enforced: no import cycles, no reaching into another module's privates.

The package is read as installed (every module of ``chatledger``, whichever
folder it comes from), counting every import: at the top of a module, inside
functions (lazy), and under ``TYPE_CHECKING``. The layer order itself is
import-linter's job (pyproject.toml, run by dev.py); these tests pin what a
layers contract cannot see.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import pkgutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import chatledger

PACKAGE = Path(chatledger.__file__).resolve().parent
SOURCE = Path(os.environ.get("CHATLEDGER_SOURCE", Path(__file__).resolve().parents[1]))
TESTS = SOURCE / "tests"
MAPPED_PACKAGES = (
    "chatledger",
    "chatledger.domain",
    "chatledger.projections",
    "chatledger.adapters",
)
# Underscore names that are public API of the standard library or a dependency.
FOREIGN_API = {"_mapping", "_fields", "_asdict", "_replace", "_make", "_getframe", "_exit",
               # the OpenAI Agents SDK's compaction hook, which third-party sessions implement
               "_get_compaction_snapshot"}  # fmt: skip


def _modules() -> dict[str, Path]:
    """Every module of the installed package, by name (found as Python finds them, so the
    folders mapped into the namespace count too)."""
    found = {}
    for root in MAPPED_PACKAGES:  # an editable install finds these only by name
        package = importlib.import_module(root)
        found[root] = Path(package.__file__ or "")
        for info in pkgutil.walk_packages(package.__path__, f"{root}."):
            spec = importlib.util.find_spec(info.name)
            if spec is not None and spec.origin and spec.origin.endswith(".py"):
                found[info.name] = Path(spec.origin)
    return found


def _imported(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every module of ours that ``module`` imports, wherever the import statement is."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            # ``from pkg import module`` depends on the module; ``from mod import name``
            # on the module that defines the name.
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                yield name


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {module: set(_imported(module, path, known)) for module, path in known.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_installed_package_has_no_import_cycle() -> None:
    """No two modules import each other, even lazily or only for type checking."""
    graph = _graph()
    assert len(graph) > 50, "the package was not found"
    assert _cycles(graph) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    """The check can fail: a made-up graph with a lazy back-edge is reported."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _defined_privates(tree: ast.AST) -> set[str]:
    """Underscore names a module defines: functions, classes, assignments, attributes."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.rpartition(".")[2])
    return {n for n in names if n.startswith("_")}


def _foreign_privates(path: Path) -> list[str]:
    """``x._name`` uses and ``from m import _name`` imports of names another module owns."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = _defined_privates(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("chatledger"):
            found += [
                f"{path.name}:{node.lineno} imports {a.name}"
                for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__")
            ]
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name in FOREIGN_API:
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if name in own:  # a private of a class of this very module
            continue
        found.append(f"{path.name}:{node.lineno} uses .{name}")
    return found


@pytest.mark.parametrize("root", ["package", "tests"])
def test_no_module_reaches_into_another_modules_privates(root: str) -> None:
    """Underscore names are used only in the module that owns them -- tests included."""
    paths = _modules().values() if root == "package" else TESTS.glob("*.py")
    offences = [offence for path in sorted(paths) for offence in _foreign_privates(path)]
    assert offences == []


def test_the_privacy_check_finds_a_reach_in(tmp_path: Path) -> None:
    """The check can fail: using another object's ``_app`` is reported."""
    sample = tmp_path / "sample.py"
    sample.write_text("def f(ledger):\n    return ledger._app\n", encoding="utf-8")
    assert _foreign_privates(sample) == ["sample.py:2 uses ._app"]


@pytest.mark.parametrize(
    "folder",
    [
        "chatledger",
        "chatledger/service",
        "chatledger/cli",
        "chatledger/web",
        "chatledger/registry",
        "chatledger/integrations",
    ],
)
def test_no_module_of_the_face_is_over_about_400_lines(folder: str) -> None:
    """Modules of the package face stay small enough to read: about 400 lines, 450 at most."""
    root = SOURCE / folder
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in root.glob("*.py")}
    assert sizes, f"no modules in {root}"
    assert {name: n for name, n in sizes.items() if n > 450} == {}


def _shared_file_names(modules: dict[str, Path]) -> dict[str, list[str]]:
    by_name: dict[str, list[str]] = {}
    for module, path in modules.items():
        if path.name not in ("__init__.py", "__main__.py"):
            by_name.setdefault(path.name, []).append(module)
    return {name: sorted(found) for name, found in by_name.items() if len(found) > 1}


def test_no_two_modules_share_a_file_name() -> None:
    """A file name points to one module: none is repeated in another layer or folder."""
    assert _shared_file_names(_modules()) == {}


def test_the_file_name_check_finds_a_repeat() -> None:
    """The check above is not vacuous: two folders' projector.py are reported."""
    modules = {"a.projector": Path("a/projector.py"), "b.projector": Path("b/projector.py")}
    assert _shared_file_names(modules) == {"projector.py": ["a.projector", "b.projector"]}
