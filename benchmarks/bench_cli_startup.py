"""Start-up time of the ``chatledger`` command, against ``python -c pass``.

What it measures: the wall-clock time of whole processes, started one after the
other with ``subprocess.run`` and their output discarded -- ``python -c pass``
(the floor: the interpreter alone), ``chatledger --help``, ``chatledger show --help``
and ``chatledger --version`` (the console script of this interpreter's
environment), and, for scale, ``python -c "import chatledger.ledger"`` (what a
command pays once it opens a ledger). The cases take turns round by round, after
one untimed warm-up round, so a noisy neighbour slows all of them alike. It prints
the median, the interquartile range and the min-max of each, and the median's
excess over ``python -c pass``. The target: ``chatledger --help`` under 0.25 s.

Run::

    python benchmarks/bench_cli_startup.py              # 30 rounds
    python benchmarks/bench_cli_startup.py --rounds 100 --json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import console, provenance

TARGET = 0.25


def chatledger_command() -> list[str]:
    """The console script beside this interpreter (else ``python -m chatledger.cli``)."""
    script = Path(sys.executable).with_name("chatledger")
    if script.exists():
        return [str(script)]
    found = shutil.which("chatledger")
    return [found] if found else [sys.executable, "-m", "chatledger.cli"]


def cases() -> dict[str, list[str]]:
    cli = chatledger_command()
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "chatledger --help": [*cli, "--help"],
        "chatledger show --help": [*cli, "show", "--help"],
        "chatledger --version": [*cli, "--version"],
        "import chatledger.ledger": [sys.executable, "-c", "import chatledger.ledger"],
    }


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
        cwd=tempfile.gettempdir(),  # not the checkout: its chatledger/ would shadow the install
    )
    return time.perf_counter() - started


def quartiles(samples: list[float]) -> tuple[float, float]:
    q1, _, q3 = statistics.quantiles(samples, n=4)
    return q1, q3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="timed runs of each case")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    commands = cases()
    for command in commands.values():  # warm-up: page cache, .pyc files
        timed(command)
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.rounds):
        for name, command in commands.items():
            samples[name].append(timed(command))
    floor = statistics.median(samples["python -c pass"])
    figures = {
        name: {
            "median": statistics.median(values),
            "iqr": quartiles(values),
            "min": min(values),
            "max": max(values),
            "over_python": statistics.median(values) - floor,
        }
        for name, values in samples.items()
    }
    help_median = figures["chatledger --help"]["median"]
    if args.json:
        print(json.dumps({"rounds": args.rounds, "target": TARGET, "cases": figures}, indent=2))
    else:
        console.print(f"[bold]CLI start-up[/] ({args.rounds} rounds, {provenance()})")
        for name, figure in figures.items():
            q1, q3 = figure["iqr"]  # type: ignore[misc]
            console.print(
                f"  {name:<26} median {figure['median'] * 1000:6.1f} ms  "
                f"IQR {q1 * 1000:6.1f}-{q3 * 1000:6.1f}  "
                f"min-max {figure['min'] * 1000:6.1f}-{figure['max'] * 1000:6.1f}  "
                f"(+{figure['over_python'] * 1000:.1f} ms over python)"
            )
        verdict = "[green]under[/]" if help_median < TARGET else "[red]OVER[/]"
        console.print(f"chatledger --help: {help_median * 1000:.0f} ms, {verdict} {TARGET} s")
    return 0 if help_median < TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
