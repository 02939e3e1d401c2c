"""Logging: what chatledger says, under which logger and level (it adds no handlers)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import pytest

from chatledger import ArchiveSummary, ExtractiveSummarizer, Message, SessionLedger, Summary
from support import ALICE


class Failing(ExtractiveSummarizer):
    def summarize(self, messages: Sequence[Message]) -> Summary:
        raise RuntimeError("model endpoint timed out")

    def merge(self, archives: Sequence[ArchiveSummary]) -> Summary:
        raise RuntimeError("model endpoint timed out")


def test_commits_are_logged_at_info_and_failures_at_warning(
    make_ledger: Callable[..., SessionLedger], caplog: pytest.LogCaptureFixture
) -> None:
    """A completed commit is INFO on chatledger.commits; a failed one WARNING with its error."""
    ledger = make_ledger()
    ledger.add_message(ALICE, "s1", "user", "hello")
    with caplog.at_level(logging.INFO, logger="chatledger"):
        ledger.commit(ALICE, "s1")
        ledger.summarizer = Failing()
        ledger.add_message(ALICE, "s1", "user", "again")
        ledger.commit(ALICE, "s1")
    records = [(r.name, r.levelname) for r in caplog.records if r.name == "chatledger.commits"]
    assert records == [("chatledger.commits", "INFO"), ("chatledger.commits", "WARNING")]
    assert "model endpoint timed out" in caplog.records[-1].getMessage()


def test_the_library_adds_no_handlers() -> None:
    """chatledger leaves handlers to the application (the standard library's convention)."""
    import chatledger.service.bootstrap  # noqa: F401  (imports every core module)

    names = [n for n in logging.root.manager.loggerDict if n.startswith("chatledger")]
    assert names
    assert all(not logging.getLogger(n).handlers for n in names)
