"""The default summarizer: extractive, deterministic, and offline.

It needs no model and no network, so a ledger works out of the box and tests
are reproducible. The overview keeps the first sentence of every message
(prefixed with its role) and the abstract names the size and the most
frequent entities; merging concatenates the overviews of the sources.
Plug a model-backed ``Summarizer`` in for real compression.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from chatledger.domain.ports import Summary
from chatledger.domain.quality import extract_entities
from chatledger.domain.values import ArchiveSummary, Message

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _first_sentence(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    sentence = _SENTENCE_END.split(flat, maxsplit=1)[0]
    return sentence if len(sentence) <= limit else sentence[: limit - 1].rstrip() + "…"


def _key_terms(texts: Sequence[str], count: int) -> list[str]:
    counter: Counter[str] = Counter()
    for text in texts:
        counter.update(extract_entities(text))
    return [term for term, _ in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:count]]


class ExtractiveSummarizer:
    """Summarises by extraction: role-tagged first sentences plus key terms."""

    def __init__(
        self, *, sentence_chars: int = 240, key_terms: int = 5, max_overview_chars: int = 4000
    ) -> None:
        if sentence_chars < 16 or key_terms < 0 or max_overview_chars < sentence_chars:
            raise ValueError(
                "sentence_chars must be >= 16, key_terms >= 0 and "
                "max_overview_chars >= sentence_chars"
            )
        self.sentence_chars = sentence_chars
        self.key_terms = key_terms
        self.max_overview_chars = max_overview_chars

    def summarize(self, messages: Sequence[Message]) -> Summary:
        lines = [
            f"{m.role}: {_first_sentence(m.content, self.sentence_chars)}"
            for m in messages
            if m.content.strip()
        ]
        turns = sum(1 for m in messages if m.role == "user")
        terms = _key_terms([m.content for m in messages], self.key_terms)
        abstract = f"{len(messages)} messages, {turns} user turns"
        if terms:
            abstract += "; key terms: " + ", ".join(terms)
        return Summary(overview=self._fit(lines), abstract=abstract)

    def merge(self, archives: Sequence[ArchiveSummary]) -> Summary:
        # Each source gets an equal share of the budget, so merging merges
        # again and again never grows the overview past max_overview_chars.
        share = max(self.sentence_chars, self.max_overview_chars // max(1, len(archives)))
        overview = self._fit(
            [self._fit(a.overview.splitlines(), share) for a in archives if a.overview]
        )
        covered = sum(a.covered_count for a in archives)
        terms = _key_terms([a.overview for a in archives], self.key_terms)
        abstract = f"merge of {len(archives)} archives covering {covered} messages"
        if terms:
            abstract += "; key terms: " + ", ".join(terms)
        return Summary(overview=overview, abstract=abstract)

    def _fit(self, lines: Sequence[str], limit: int | None = None) -> str:
        """Whole lines, in order, while they fit in ``limit`` characters (an ellipsis if cut)."""
        limit = self.max_overview_chars if limit is None else limit
        kept: list[str] = []
        used = 0
        for line in lines:
            if used + len(line) + (1 if kept else 0) > limit:
                if not kept:
                    kept.append(line[: max(0, limit - 1)] + "…")
                elif used + 2 <= limit and kept[-1] != "…":
                    kept.append("…")
                break
            kept.append(line)
            used += len(line) + (1 if len(kept) > 1 else 0)
        return "\n".join(kept)
