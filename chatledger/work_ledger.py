"""The working-state half of ``SessionLedger``: task state, extraction, compaction, usage.

``WorkingStateOperations`` is mixed into ``SessionLedger`` (it works on the
ledger's ``core``); each method checks its arguments, resolves the tenant and
makes one core call (``chatledger.service.working``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chatledger.boundary import public
from chatledger.domain.limits import MAX_NAME_CHARS, check_int, check_text
from chatledger.domain.values import CompactionToken, Principal, TaskState
from chatledger.ledger_base import LedgerBase
from chatledger.service import working


class WorkingStateOperations(LedgerBase):
    """The agent's working state of a session (mixed into ``SessionLedger``)."""

    @public
    def set_task(
        self,
        principal: Principal,
        key: str,
        task: TaskState | Mapping[str, Any],
        *,
        account_id: str | None = None,
    ) -> TaskState:
        """Record the agent's working state: objective, active task, confirmed constraints,
        blockers, notes (the whole of it; unchanged fields as they were)."""
        found = self._target(principal, key, account_id)
        checked = working.task_state(self.limits, task)
        return working.set_task(self.core.sessions, principal, found, checked, self.core.now())

    @public
    def advance_extraction(
        self,
        principal: Principal,
        key: str,
        watermark: int,
        summary: str,
        *,
        account_id: str | None = None,
    ) -> None:
        """Record that a background extractor has read the oldest ``watermark`` live items and
        found ``summary``. Removing items it has read moves the watermark down with them."""
        check_int(watermark, "watermark")
        check_text(summary, "summary", max_chars=self.limits.max_content_chars)
        found = self._target(principal, key, account_id)
        working.advance_extraction(
            self.core.sessions, principal, found, watermark, summary, self.core.now()
        )

    @public
    def prepare_compaction(
        self,
        principal: Principal,
        key: str,
        *,
        ttl_seconds: float = 600.0,
        account_id: str | None = None,
    ) -> CompactionToken:
        """Hand an external compactor a token (recorded with the time, the live item count
        and the watermark it saw); it must be consumed within ``ttl_seconds``. While one is
        pending another is refused (``ConcurrencyConflict``); an expired one is cleared."""
        found = self._target(principal, key, account_id)
        return working.prepare_compaction(
            self.core.sessions, principal, found, ttl_seconds, self.core.now()
        )

    @public
    def complete_compaction(
        self, principal: Principal, key: str, token: str, *, account_id: str | None = None
    ) -> None:
        """Consume the pending token once the compactor's work is done. A token consumed
        already, or never prepared, is ``InvalidInput``; one past its TTL is refused
        (``InvalidInput``) and cleared."""
        found = self._target(principal, key, account_id)
        working.complete_compaction(self.core.sessions, principal, found, token, self.core.now())

    @public
    def import_usage(
        self,
        principal: Principal,
        key: str,
        totals: Sequence[Mapping[str, Any]],
        *,
        source: str = "",
        account_id: str | None = None,
    ) -> None:
        """Merge per-tool usage totals of an earlier system into the session's usage
        (``tool_name``, ``call_count``, ``success_count``, ``fail_count``, ``prompt_tokens``,
        ``completion_tokens``; ``source`` names the system)."""
        checked = working.usage_totals(totals)
        check_text(source, "source", max_chars=MAX_NAME_CHARS)
        found = self._target(principal, key, account_id)
        working.import_usage(self.core.sessions, principal, found, checked, source, self.core.now())
