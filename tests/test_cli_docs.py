"""Every command the project prints or documents runs as written.

The ```sh blocks of README.md and docs/*.md run with bash, in order with the file's
```python blocks, in an empty directory, with this environment's ``chatledger`` first
on PATH: the state after the README's set-up (the set-up lines themselves -- venv,
pip, dev.py -- are what this environment already is, and are skipped). The demo's
"Try it yourself" lines run after a demo. An inline `chatledger ...` in the prose
is either a synopsis (with a placeholder such as KEY) or one of the file's run lines.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chatledger import SessionLedger

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
_BLOCK = re.compile(r"^```(python|sh)[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
_INLINE = re.compile(r"(?<!`)`((?:chatledger |python -m chatledger)[^`]*)`(?!`)")
RUN = ("chatledger ", "python -m chatledger", "export CHATLEDGER_")
SET_UP = ("python3 -m venv ", ". .venv/bin/activate", "pip install ", "python3 dev.py ")
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z0-9_]*\b|\[|\.\.\.|\|")


def blocks(path: Path) -> list[tuple[str, int, str]]:
    """The ```python and ```sh blocks of a markdown file: kind, first line, source."""
    text = path.read_text(encoding="utf-8")
    return [
        (match.group(1), text.count("\n", 0, match.start()) + 2, match.group(2))
        for match in _BLOCK.finditer(text)
    ]


def shell_lines(source: str) -> list[str]:
    """The command lines of a shell block, comments and blank lines left out."""
    lines = (line.split(" #", 1)[0].strip() for line in source.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def shell_environment() -> dict[str, str]:
    """This test environment's bin first on PATH; no CHATLEDGER_* settings from outside."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CHATLEDGER_")}
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment['PATH']}"
    environment.pop("PYTHONPATH", None)
    environment["COLUMNS"] = "120"
    return environment


def run_shell(source: str, cwd: Path, where: str) -> None:
    script = "\n".join(
        ":" if line.startswith(SET_UP) else line for line in shell_lines(source)
    )  # set-up lines stand for this environment
    completed = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=shell_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, (
        f"{where} failed ({completed.returncode}):\n{script}\n--- stdout\n"
        f"{completed.stdout[-3000:]}\n--- stderr\n{completed.stderr[-3000:]}"
    )


WITH_SHELL = [path for path in DOC_FILES if any(kind == "sh" for kind, _, _ in blocks(path))]


@pytest.mark.parametrize("path", WITH_SHELL, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_shell_blocks_run_as_written(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file's shell blocks succeed, run in order with its python blocks, in one directory."""
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("CHATLEDGER_")]:
        monkeypatch.delenv(name)
    namespace: dict[str, object] = {"__name__": f"docs_{path.stem}"}
    try:
        for kind, line, source in blocks(path):
            where = f"{path.name}:{line}"
            if kind == "python":
                exec(compile(source, where, "exec"), namespace)
            else:
                run_shell(source, tmp_path, where)
    finally:
        for value in namespace.values():
            if isinstance(value, SessionLedger):
                value.close()


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_shell_line_is_a_command_or_a_set_up_step(path: Path) -> None:
    """A shell line runs chatledger or is a README set-up step (nothing is skipped unseen)."""
    for kind, line, source in blocks(path):
        if kind == "sh":
            for command in shell_lines(source):
                assert command.startswith(RUN + SET_UP), f"{path.name}:{line}: {command}"


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_inline_commands_are_synopses_or_run(path: Path) -> None:
    """An inline `chatledger ...` has a placeholder (KEY, [..]) or begins a line a block runs."""
    text = path.read_text(encoding="utf-8")
    runs = {cmd for kind, _, src in blocks(path) if kind == "sh" for cmd in shell_lines(src)}
    for span in (" ".join(found.split()) for found in _INLINE.findall(text)):
        ran = any(run == span or run.startswith(span + " ") for run in runs)
        assert PLACEHOLDER.search(span) or ran, f"{path.name}: `{span}` never runs"


def test_the_docs_hold_commands_to_run() -> None:
    """The README and the CLI guide have shell blocks (a bad pattern would test nothing)."""
    assert {p.name for p in WITH_SHELL} >= {"README.md", "cli.md", "time-travel.md"}


@pytest.mark.parametrize("url", [None, "sqlite:///elsewhere.db"])
def test_the_demos_try_it_yourself_lines_run(tmp_path: Path, url: str | None) -> None:
    """After `chatledger demo`, each command it suggests runs and exits 0."""
    demo = ["chatledger", "demo"] + (["--url", url] if url else [])
    environment = shell_environment()
    shown = subprocess.run(
        demo, cwd=tmp_path, env=environment, capture_output=True, text=True, check=True
    ).stdout
    suggested = shown.split("Try it yourself:", 1)[1].strip().splitlines()

    assert len(suggested) >= 3 and all(s.strip().startswith("chatledger ") for s in suggested)
    for command in suggested:
        completed = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=environment, capture_output=True, text=True
        )
        assert completed.returncode == 0, (command, completed.stderr)
    assert not url or all(f"--url {url}" in s for s in suggested)


def test_a_failing_line_fails_its_block(tmp_path: Path) -> None:
    """The runner reports a shell line that exits non-zero (so the docs test can fail)."""
    with pytest.raises(AssertionError, match="chatledger show nope"):
        run_shell("chatledger show nope\n", tmp_path, "example")
