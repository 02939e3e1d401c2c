"""Packaging and architecture: complete wheel, inward layers, an explicit public API."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import chatledger

SOURCE = Path(os.environ.get("CHATLEDGER_SOURCE", Path(__file__).resolve().parents[1]))
MAPPED = {"domain": "chatledger/domain", "projections": "chatledger/projections",
          "adapters": "chatledger/adapters", "chatledger": "chatledger"}  # fmt: skip


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel under test: the one dev.py built, or a fresh build of the source tree."""
    built = os.environ.get("CHATLEDGER_WHEEL")
    if built:
        return Path(built)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(SOURCE)],
        check=True,
    )
    return next(out.glob("chatledger-*.whl"))


def test_wheel_contains_every_module_of_the_mapped_folders(wheel: Path) -> None:
    """Every .py of chatledger/, domain/, projections/, adapters/ is in the wheel, mapped."""
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        f"{target}/{path.relative_to(SOURCE / folder).as_posix()}"
        for folder, target in MAPPED.items()
        for path in (SOURCE / folder).rglob("*.py")
    }
    assert expected, "no sources found: is CHATLEDGER_SOURCE right?"
    assert expected <= names, f"missing from wheel: {sorted(expected - names)}"
    assert "chatledger/py.typed" in names


def test_wheel_ships_the_viewers_templates_and_static_files(wheel: Path) -> None:
    """Every template, stylesheet and script of chatledger/web is package data in the wheel."""
    names = set(zipfile.ZipFile(wheel).namelist())
    web = SOURCE / "chatledger" / "web"
    expected = {
        f"chatledger/web/{path.relative_to(web).as_posix()}"
        for folder in ("templates", "static")
        for path in (web / folder).iterdir()
    }
    assert "chatledger/web/templates/timeline.html" in expected
    assert expected <= names, f"missing from wheel: {sorted(expected - names)}"


def test_wheel_installs_no_bare_top_level_packages(wheel: Path) -> None:
    """Nothing outside the chatledger namespace (no bare domain/adapters/projections) is shipped."""
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.startswith("chatledger")} == set()


LAYERS = {  # package -> packages of ours it may import
    "domain": {"chatledger.domain"},
    "projections": {"chatledger.domain", "chatledger.projections"},
    "adapters": {"chatledger.domain", "chatledger.projections", "chatledger.adapters"},
}
FORBIDDEN_BELOW_ADAPTERS = {"sqlalchemy", "psycopg", "sqlite3"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("folder", sorted(LAYERS))
def test_dependencies_point_inward(folder: str) -> None:
    """domain imports only itself; projections only domain; adapters never the package face."""
    allowed = LAYERS[folder]
    for path in (SOURCE / folder).rglob("*.py"):
        for module in _imports(path):
            if module == "chatledger" or module.startswith("chatledger."):
                assert any(module == a or module.startswith(a + ".") for a in allowed), (
                    f"{path.relative_to(SOURCE)} imports {module}"
                )
            if folder != "adapters":
                assert module.split(".")[0] not in FORBIDDEN_BELOW_ADAPTERS, (
                    f"{path.relative_to(SOURCE)} imports {module}"
                )


def test_layer_check_catches_a_violation(tmp_path: Path) -> None:
    """The import scan sees a violating import (so the layer test above can fail)."""
    bad = tmp_path / "bad.py"
    bad.write_text("from chatledger.ledger import SessionLedger\nimport sqlalchemy\n")
    assert _imports(bad) == {"chatledger.ledger", "sqlalchemy"}


def test_public_api_is_exactly_what_all_lists() -> None:
    """Every name in __all__ exists, and every public module-level name is in __all__."""
    exported = set(chatledger.__all__)
    assert all(hasattr(chatledger, name) for name in exported)
    public = {
        name
        for name, value in vars(chatledger).items()
        if not name.startswith("_") and not isinstance(value, type(sys))
    }
    assert public == exported - {"__version__"}
