"""What the benchmark scripts share: the console and where a measurement came from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rich.console import Console

console = Console(width=None if sys.stdout.isatty() else 132)


def provenance() -> str:
    """The git commit of the checkout these benchmarks run against, if known."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "commit unknown"
    return f"commit {head}{' (+ uncommitted changes)' if dirty else ''}"
