"""Shared test helpers: principals of three tenants and a deterministic clock."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from chatledger import ArchiveSummary, Message, Principal, Summary

ALICE = Principal(account_id="acme", user_id="alice", agent_id="support-bot", trace_id="t-1")
BOB = Principal(account_id="globex", user_id="bob", agent_id="helper")
ADMIN = Principal(
    account_id="ops", user_id="root", agent_id="console", role="admin", trace_id="adm"
)


class FixedClock:
    """A deterministic clock: starts at a fixed moment, advances one second per call."""

    def __init__(self, start: datetime | None = None, step: timedelta = timedelta(seconds=1)):
        self.now = start or datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
        self.step = step
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            self.now += self.step
            return self.now


class FlakySummarizer:
    """Wraps the default summarizer; fails while ``failing`` is set (to rehearse faults)."""

    def __init__(self) -> None:
        from chatledger import ExtractiveSummarizer

        self.inner = ExtractiveSummarizer()
        self.failing = False
        self.calls = 0

    def summarize(self, messages: Sequence[Message]) -> Summary:
        self.calls += 1
        if self.failing:
            raise RuntimeError("summarizer exploded")
        return self.inner.summarize(messages)

    def merge(self, archives: Sequence[ArchiveSummary]) -> Summary:
        self.calls += 1
        if self.failing:
            raise RuntimeError("summarizer exploded")
        return self.inner.merge(archives)
