"""``information_retention_ratio``: word forms and function words do not count as lost facts."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from chatledger import SessionLedger
from chatledger.domain.quality import information_retention_ratio, information_words
from support import ALICE

FALCON = "Use PostgreSQL and AGFS for Project Falcon."


def test_a_summary_keeping_every_fact_in_other_word_forms_scores_one() -> None:
    """ "Use" in the message and "uses" in the summary are one word: every fact kept, 1.0."""
    assert information_retention_ratio([FALCON], "Project Falcon uses PostgreSQL and AGFS.") == 1.0


def test_a_lost_fact_still_costs_its_share() -> None:
    """Dropping AGFS loses one of the five informative stems: 0.8; dropping all but one, 0.2."""
    assert information_retention_ratio([FALCON], "Project Falcon uses PostgreSQL.") == 0.8
    assert information_retention_ratio([FALCON], "Nothing of the kind.") == 0.0


@pytest.mark.parametrize(
    ("source", "summary"),
    [
        ("The summaries were running late.", "Summary runs late."),
        ("Deploying the services failed twice.", "Service deployment: deploy failed, twice."),
        ("She is connecting to the databases.", "Connected database."),
    ],
)
def test_plural_tense_and_participle_forms_fold_to_one_stem(source: str, summary: str) -> None:
    """Plurals, tenses and -ing forms of a word count as the word (the Snowball stemmer)."""
    assert information_retention_ratio([source], summary) == 1.0


def test_function_words_are_not_information() -> None:
    """Articles, pronouns, auxiliaries and prepositions are left out of what is counted."""
    assert information_words("It is of the essence to us, and he was there.") == {"essenc"}
    assert information_retention_ratio(["It was in the box."], "Box.") == 1.0
    assert information_retention_ratio(["the and of to"], "") == 1.0  # nothing to keep


def test_a_commit_stores_the_ratio(make_ledger: Callable[..., SessionLedger]) -> None:
    """On both databases a commit's archive metadata carries the stemmed ratio (1.0 here)."""

    class Paraphrase:
        def summarize(self, messages: object) -> object:
            from chatledger.domain.ports import Summary

            return Summary(overview="Project Falcon uses PostgreSQL and AGFS.", abstract="db")

        def merge(self, archives: object) -> object:  # pragma: no cover - never merged here
            raise AssertionError

    ledger = make_ledger(entity_retention=True, summarizer=Paraphrase())
    ledger.add_message(ALICE, "falcon", "user", FALCON)
    ledger.commit(ALICE, "falcon")
    metadata = ledger.session(ALICE, "falcon").archives[0].metadata
    assert metadata["information_retention_ratio"] == 1.0
