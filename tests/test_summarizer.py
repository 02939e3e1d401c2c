"""The default extractive summarizer: deterministic, bounded, entity-aware."""

from __future__ import annotations

from datetime import UTC, datetime

from chatledger import ArchiveSummary, ExtractiveSummarizer, Message

WHEN = datetime(2026, 1, 1, tzinfo=UTC)


def _messages(n: int) -> list[Message]:
    return [
        Message(
            id=f"m{i}",
            role="user",
            content=f"Ticket {i} concerns Kafka. Details follow.",
            created_at=WHEN,
        )
        for i in range(n)
    ]


def test_summary_is_deterministic_and_names_key_terms() -> None:
    """The same messages always give the same overview and abstract, with key terms."""
    summarizer = ExtractiveSummarizer()
    first, second = summarizer.summarize(_messages(3)), summarizer.summarize(_messages(3))
    assert first == second
    assert first.overview.splitlines()[0] == "user: Ticket 0 concerns Kafka."
    assert "Kafka" in first.abstract and first.abstract.startswith("3 messages, 3 user turns")


def test_repeated_merges_never_grow_past_the_overview_budget() -> None:
    """Merging merged archives over and over keeps the overview within max_overview_chars."""
    summarizer = ExtractiveSummarizer(max_overview_chars=600)
    live: list[ArchiveSummary] = []
    for round_ in range(30):
        summary = summarizer.summarize(_messages(20))
        assert len(summary.overview) <= 600
        live.append(
            ArchiveSummary(
                archive_id=f"a{round_}", overview=summary.overview, abstract=summary.abstract,
                message_ids=tuple(f"r{round_}m{i}" for i in range(20)), tokens=1, created_at=WHEN,
            )
        )  # fmt: skip
        if len(live) > 2:
            merged = summarizer.merge(live)
            assert len(merged.overview) <= 600
            live = [
                ArchiveSummary(
                    archive_id=f"merged{round_}", overview=merged.overview,
                    abstract=merged.abstract, message_ids=(), tokens=1, created_at=WHEN,
                    metadata={"message_count": sum(
                        a.metadata.get("message_count", len(a.message_ids)) for a in live
                    )},
                )
            ]  # fmt: skip
    assert "covering" in merged.abstract
    assert sum(a.metadata.get("message_count", len(a.message_ids)) for a in live) == 600
