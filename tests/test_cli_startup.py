"""The command starts fast: help and the package face import nothing heavy.

``chatledger --help`` must answer in well under 0.25 s (benchmarks/bench_cli_startup.py
measures it); what keeps it so is that neither ``import chatledger`` nor the CLI's
modules load SQLAlchemy, eventsourcing, pydantic-settings or rich until a command
runs. These tests look at ``sys.modules`` in a fresh interpreter.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import chatledger

SOURCE = Path(chatledger.__file__).resolve().parent
HEAVY = ("sqlalchemy", "eventsourcing", "pydantic_settings", "rich", "psycopg", "alembic")
# Modules of ours that pull those in; the CLI's own modules and the face may load.
OURS_ALLOWED = {"chatledger", "chatledger.cli"}


def loaded_after(code: str) -> list[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    return list(json.loads(completed.stdout.splitlines()[-1]))


def heavy(modules: list[str]) -> list[str]:
    found = [m for m in modules if m.split(".")[0] in HEAVY]
    ours = [
        m
        for m in modules
        if m.startswith("chatledger") and not m.startswith("chatledger.cli")
        if m not in OURS_ALLOWED
    ]
    return found + ours


def test_importing_chatledger_loads_none_of_its_dependencies() -> None:
    """`import chatledger` defers every public name (the face is lazy)."""
    assert heavy(loaded_after("import chatledger")) == []


@pytest.mark.parametrize("args", [["--help"], ["show", "--help"], ["--version"]], ids=" ".join)
def test_help_and_version_load_nothing_heavy(args: list[str]) -> None:
    """`chatledger --help`, a command's --help and --version need only typer."""
    code = f"from chatledger.cli import main\nmain({args!r})"
    modules = loaded_after(code)

    assert "chatledger.cli.common" in modules  # the check looks at the right process
    assert heavy(modules) == []


def test_the_check_sees_a_heavy_import() -> None:
    """The same check flags a command that has loaded the ledger (it can fail)."""
    assert "sqlalchemy" in heavy(loaded_after("import chatledger; chatledger.SessionLedger"))


def test_the_lazy_face_maps_each_name_to_the_module_type_checkers_see() -> None:
    """The lazy name map equals the TYPE_CHECKING imports of chatledger/__init__.py."""
    tree = ast.parse((SOURCE / "__init__.py").read_text(encoding="utf-8"))
    guarded = next(node for node in tree.body if isinstance(node, ast.If))
    static = {
        alias.name: node.module
        for node in guarded.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    lazy = next(  # the literal dict of name -> module that __getattr__ imports from
        node.value
        for node in tree.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Dict)
    )
    exports = ast.literal_eval(lazy)

    assert static == exports
    assert set(static) == set(chatledger.__all__) - {"__version__"}
    types = [name for name in exports if name[0].isupper() and not name.isupper()]  # ERASED: a str
    assert all(getattr(chatledger, name).__module__ for name in types)
