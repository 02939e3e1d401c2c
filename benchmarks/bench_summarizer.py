"""The default summarizer on hostile input: adversarial text vs benign text of the same size.

What it measures: ``ExtractiveSummarizer().summarize([message])`` (first
sentence, key terms; with ``entity_retention_ratio`` as a commit computes it)
on one message of ``--chars`` characters (default: ``max_content_chars``,
1,000,000). The benign message is English-like prose with names and code
tokens; each adversarial one is built to defeat a backtracking regular
expression (long runs of letters, of capitals, of identifier characters, of
dots, underscores, slashes, backticks, parentheses; no sentence end). Rounds
interleave all inputs; it prints each input's median time, its IQR, and the
ratio to the benign median (target: every ratio within a small multiple, 3x;
before the linear tokenizer 20k letters took 16 s).

Run::

    python benchmarks/bench_summarizer.py                 # 1M characters, 5 rounds
    python benchmarks/bench_summarizer.py --chars 100000  # quick
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

from common import console, provenance
from rich.table import Table

from chatledger import ExtractiveSummarizer, Message
from chatledger.domain.quality import entity_retention_ratio

WHEN = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = (
    *("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while"),
    *("Alice", "asks", "Kafka", "about", "user_id", "and", "calls", "db.commit()", "in"),
    *("src/app.py", "before", "PostgreSQL", "answers", "with", "`a", "code", "span`."),
)


def benign(size: int) -> str:
    rng = random.Random(7)
    parts: list[str] = []
    total = 0
    while total < size:
        word = rng.choice(WORDS)
        parts.append(word)
        total += len(word) + 1
    return " ".join(parts)[:size]


def inputs(size: int) -> dict[str, str]:
    def repeat(unit: str) -> str:
        return (unit * (size // len(unit) + 1))[:size]

    return {
        "benign prose": benign(size),
        "letters a": repeat("a"),
        "capitals A": repeat("A"),
        "mixed Aa": repeat("Aa"),
        "identifier a_": repeat("a_"),
        "dotted a.": repeat("a."),
        "path a/": repeat("a/"),
        "calls a()": repeat("a()"),
        "backticks": repeat("`"),
        "code spans": repeat("`" + "x" * 79),
        "no spaces mix": repeat("Ab_c.d/e()"),
    }


def run_once(text: str) -> float:
    summarizer = ExtractiveSummarizer()
    message = Message(id="m", role="user", content=text, created_at=WHEN)
    start = time.perf_counter()
    summary = summarizer.summarize([message])
    entity_retention_ratio([text], summary.overview)
    return time.perf_counter() - start


def iqr(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q3 - q1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--chars", type=int, default=1_000_000, help="message size (1,000,000)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (5)")
    args = parser.parse_args(argv)
    cases = inputs(args.chars)
    times: dict[str, list[float]] = {name: [] for name in cases}
    measure: Callable[[str], float] = run_once
    for _ in range(args.rounds):
        for name, text in cases.items():
            times[name].append(measure(text))
    base = statistics.median(times["benign prose"])
    table = Table(title=f"summarize() on {args.chars:,} characters ({provenance()})")
    for column in ("input", "median s", "IQR s", "x benign"):
        table.add_column(column, justify="left" if column == "input" else "right")
    worst = 0.0
    for name, values in times.items():
        median = statistics.median(values)
        ratio = median / base
        worst = max(worst, ratio)
        table.add_row(name, f"{median:.4f}", f"{iqr(values):.4f}", f"{ratio:.2f}")
    console.print(table)
    console.print(f"worst adversarial / benign: {worst:.2f}x (target <= 3x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
