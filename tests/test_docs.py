"""Docs run: every ```python block of docs/*.md and README.md is executed here.

The blocks of one file share one namespace and run in order, inside a
temporary working directory, so a relative ``sqlite:///chatledger.db`` lands
in the test's tmp dir. Any ledger a file leaves open is closed afterwards.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from chatledger import LedgerSettings, SessionLedger

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = sorted((ROOT / "docs").glob("*.md")) + [
    path for path in [ROOT / "README.md"] if path.exists()
]
_PYTHON_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """The ```python blocks of a markdown file, with the line each starts on."""
    text = path.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, match.start()) + 2, match.group(1))
        for match in _PYTHON_BLOCK.finditer(text)
    ]


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_python_blocks_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every python block of the file runs, top to bottom, and its assertions hold."""
    monkeypatch.chdir(tmp_path)
    saved_environment = dict(os.environ)
    for name in list(os.environ):
        if name.startswith("CHATLEDGER_"):
            monkeypatch.delenv(name)
    namespace: dict[str, object] = {"__name__": f"docs_{path.stem}"}
    try:
        for line, source in python_blocks(path):
            code = compile(source, f"{path.name}:{line}", "exec")
            exec(code, namespace)
    finally:
        for value in namespace.values():
            if isinstance(value, SessionLedger):
                value.close()
        os.environ.clear()
        os.environ.update(saved_environment)


def test_the_docs_are_collected() -> None:
    """The core docs are found and hold python blocks (a bad glob would test nothing)."""
    for name in ("concepts.md", "embedding.md"):
        assert python_blocks(ROOT / "docs" / name), name


def test_concepts_lists_every_setting() -> None:
    """docs/concepts.md names the environment variable of every LedgerSettings field."""
    text = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    missing = [
        name for name in LedgerSettings.model_fields if f"`CHATLEDGER_{name.upper()}`" not in text
    ]
    assert missing == []
