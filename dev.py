#!/usr/bin/env python3
"""Set-up commands for chatledger; needs nothing but Python 3.11+.

    python3 dev.py demo    # local venv (.venv), chatledger installed editable, `chatledger demo`
                           # (then `. .venv/bin/activate` to run what it suggests)
    python3 dev.py test    # build the wheel, install it into .venv-test, run the whole suite
    python3 dev.py bench   # benchmarks (installs the `bench` extra into .venv-bench)
    python3 dev.py framework-suites  # agent frameworks' own store tests, unedited, on their
                           # own stores and on chatledger's classes (.venv-frameworks; CI runs it)
    python3 dev.py agents-sdk-tests  # the OpenAI Agents SDK's suite only

`test` checks what users get: the wheel is built and installed (not editable)
into a clean venv, and pytest, `mypy --strict -p chatledger` and the import
layer contracts run against that install, from outside the source tree (the
source `chatledger/` folder must not shadow the installed package). Extra
arguments after `test` go to pytest (e.g. `python3 dev.py test -m slow`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    printable = " ".join(str(a) for a in args)
    print(f"+ {printable}", flush=True)
    completed = subprocess.run([str(a) for a in args], cwd=cwd, env=env)
    if completed.returncode != 0:
        sys.exit(completed.returncode)


def ensure_venv(path: Path, *, fresh: bool = False) -> Path:
    """A venv at ``path`` with a current pip; returns its bin directory."""
    if fresh and path.exists():
        shutil.rmtree(path)
    bin_dir = path / ("Scripts" if os.name == "nt" else "bin")
    if not (bin_dir / "python").exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(path)
        run(bin_dir / "python", "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    return bin_dir


def build_wheel(bin_dir: Path, out: Path) -> Path:
    # setuptools builds through ./build and would ship a module deleted since the last build.
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    run(bin_dir / "python", "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", out, ROOT)
    wheels = sorted(out.glob("chatledger-*.whl"))
    if len(wheels) != 1:
        sys.exit(f"expected one chatledger wheel in {out}, found {wheels}")
    return wheels[0]


def demo(args: list[str]) -> None:
    bin_dir = ensure_venv(ROOT / ".venv")
    # Editable: `import chatledger` then works even from the clone's root, where a plain
    # install would be shadowed by the chatledger/ source folder (which lacks the
    # domain/, projections/ and adapters/ subpackages the install maps into it).
    run(bin_dir / "python", "-m", "pip", "install", "--quiet", "--editable", ROOT)
    run(bin_dir / "chatledger", "demo", *args)
    # The demo's suggestions (and the README's examples) need chatledger on PATH.
    activate = Path(os.path.relpath(bin_dir / "activate"))
    print(
        f"\nchatledger is installed in {bin_dir.parent}. To run the commands above, and"
        f" `import chatledger` in Python, activate it first:\n\n    . {activate}\n",
        flush=True,
    )


def test(args: list[str]) -> None:
    bin_dir = ensure_venv(ROOT / ".venv-test", fresh=True)
    python = bin_dir / "python"
    with tempfile.TemporaryDirectory(prefix="chatledger-test-") as scratch:
        scratch_dir = Path(scratch)
        wheel = build_wheel(bin_dir, scratch_dir / "dist")
        run(python, "-m", "pip", "install", "--quiet", f"{wheel}[dev]")
        env = dict(os.environ, CHATLEDGER_WHEEL=str(wheel), CHATLEDGER_SOURCE=str(ROOT))
        env.pop("PYTHONPATH", None)
        work = scratch_dir / "work"
        work.mkdir()
        config = ROOT / "pyproject.toml"
        run(bin_dir / "ruff", "check", ROOT, cwd=ROOT)
        run(bin_dir / "ruff", "format", "--check", ROOT, cwd=ROOT)
        run(bin_dir / "lint-imports", "--config", config, cwd=work, env=env)
        run(bin_dir / "mypy", "--config-file", config, "-p", "chatledger", cwd=work, env=env)
        pytest_args = args or ["-m", "not slow"]
        run(
            python, "-m", "pytest", "-c", config, "--rootdir", ROOT,
            "--import-mode=importlib", "-p", "no:cacheprovider",
            ROOT / "tests", *pytest_args,
            cwd=work, env=env,
        )  # fmt: skip


def bench(args: list[str]) -> None:
    bin_dir = ensure_venv(ROOT / ".venv-bench")
    run(bin_dir / "python", "-m", "pip", "install", "--quiet", f"{ROOT}[bench]")
    for script in sorted((ROOT / "benchmarks").glob("bench_*.py")):
        run(bin_dir / "python", script, *args, cwd=ROOT)


# What the frameworks' test files import besides the frameworks (their dev dependencies).
FRAMEWORK_SUITE_DEPENDENCIES = (
    "pytest", "pytest-asyncio", "pytest-mock", "pytest-timeout", "inline-snapshot",
    "cryptography", "aiosqlite",
)  # fmt: skip


def framework_suites(args: list[str]) -> None:
    """The frameworks' own store tests on their stores and on chatledger (SQLite, and
    PostgreSQL when CHATLEDGER_TEST_POSTGRES_URL is set); arguments go to the runner."""
    bin_dir = ensure_venv(ROOT / ".venv-frameworks", fresh=True)
    python = bin_dir / "python"
    with tempfile.TemporaryDirectory(prefix="chatledger-frameworks-") as scratch:
        wheel = build_wheel(bin_dir, Path(scratch))
        run(python, "-m", "pip", "install", "--quiet", f"{wheel}[openai-agents,ag2,postgres]",
            *FRAMEWORK_SUITE_DEPENDENCIES)  # fmt: skip
    run(python, ROOT / "tests" / "integrations" / "run_framework_suites.py", *args)


def agents_sdk_tests(args: list[str]) -> None:
    framework_suites(["--suite", "agents-sdk", *args])


COMMANDS = {
    "demo": demo,
    "test": test,
    "bench": bench,
    "framework-suites": framework_suites,
    "agents-sdk-tests": agents_sdk_tests,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    COMMANDS[sys.argv[1]](sys.argv[2:])
