"""``AsyncSessionLedger``: the same API for asyncio code, blocking I/O off the loop.

Each call runs the synchronous ledger method in a worker thread
(``asyncio.to_thread``); per-session locks inside the ledger keep one
session's writes ordered while other sessions proceed in parallel.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from chatledger.domain.values import ClientContext, EvictionReason, Message, Principal, ToolCall
from chatledger.ledger import SessionLedger
from chatledger.results import (
    AddedMessage,
    ChainHead,
    CommitResult,
    CommitTask,
    ContextView,
    ImportResult,
    LedgerEvent,
    MergeResult,
    SessionDiff,
    SessionView,
    VerifyReport,
)


class AsyncSessionLedger:
    """Async façade over a ``SessionLedger`` (pass one, or the same arguments)."""

    def __init__(self, ledger: SessionLedger | None = None, /, **kwargs: Any) -> None:
        self.ledger = ledger if ledger is not None else SessionLedger(**kwargs)

    async def add_message(
        self,
        principal: Principal,
        key: str,
        role: str,
        content: str,
        *,
        name: str | None = None,
        tool_call: ToolCall | Mapping[str, Any] | None = None,
        message_id: str | None = None,
        account_id: str | None = None,
        context: ClientContext | None = None,
    ) -> AddedMessage:
        return await asyncio.to_thread(
            self.ledger.add_message,
            principal,
            key,
            role,
            content,
            name=name,
            tool_call=tool_call,
            message_id=message_id,
            account_id=account_id,
            context=context,
        )

    async def add_messages(
        self,
        principal: Principal,
        key: str,
        messages: Sequence[Mapping[str, Any] | Message],
        *,
        account_id: str | None = None,
        context: ClientContext | None = None,
    ) -> list[AddedMessage]:
        return await asyncio.to_thread(
            self.ledger.add_messages,
            principal,
            key,
            messages,
            account_id=account_id,
            context=context,
        )

    async def get_or_create(
        self,
        principal: Principal,
        key: str,
        *,
        context: ClientContext | None = None,
        account_id: str | None = None,
    ) -> tuple[SessionView, bool]:
        return await asyncio.to_thread(
            self.ledger.get_or_create, principal, key, context=context, account_id=account_id
        )

    async def close_session(
        self, principal: Principal, key: str, *, account_id: str | None = None
    ) -> SessionView:
        return await asyncio.to_thread(
            self.ledger.close_session, principal, key, account_id=account_id
        )

    async def evict(
        self,
        principal: Principal,
        key: str,
        *,
        reason: EvictionReason = "admin",
        idle_seconds: float | None = None,
        account_id: str | None = None,
    ) -> SessionView:
        return await asyncio.to_thread(
            self.ledger.evict,
            principal,
            key,
            reason=reason,
            idle_seconds=idle_seconds,
            account_id=account_id,
        )

    async def session(
        self,
        principal: Principal,
        key: str,
        *,
        at_version: int | None = None,
        at_time: datetime | None = None,
        account_id: str | None = None,
    ) -> SessionView:
        return await asyncio.to_thread(
            self.ledger.session,
            principal,
            key,
            at_version=at_version,
            at_time=at_time,
            account_id=account_id,
        )

    async def context(
        self,
        principal: Principal,
        key: str,
        token_budget: int = 128_000,
        *,
        at_version: int | None = None,
        at_time: datetime | None = None,
        account_id: str | None = None,
    ) -> ContextView:
        return await asyncio.to_thread(
            self.ledger.context,
            principal,
            key,
            token_budget,
            at_version=at_version,
            at_time=at_time,
            account_id=account_id,
        )

    async def commit(
        self, principal: Principal, key: str, *, wait: bool = True, account_id: str | None = None
    ) -> CommitResult:
        return await asyncio.to_thread(
            self.ledger.commit, principal, key, wait=wait, account_id=account_id
        )

    async def commit_snapshot(
        self,
        principal: Principal,
        key: str,
        message_ids: Sequence[str],
        *,
        wait: bool = True,
        account_id: str | None = None,
    ) -> CommitResult:
        return await asyncio.to_thread(
            self.ledger.commit_snapshot,
            principal,
            key,
            message_ids,
            wait=wait,
            account_id=account_id,
        )

    async def task(self, task_id: str) -> CommitTask | None:
        return self.ledger.task(task_id)

    async def merge_archives(
        self,
        principal: Principal,
        key: str,
        *,
        threshold: int | None = None,
        max_count: int | None = None,
        account_id: str | None = None,
    ) -> MergeResult:
        return await asyncio.to_thread(
            self.ledger.merge_archives,
            principal,
            key,
            threshold=threshold,
            max_count=max_count,
            account_id=account_id,
        )

    async def history(
        self, principal: Principal, key: str, *, account_id: str | None = None
    ) -> list[LedgerEvent]:
        return await asyncio.to_thread(self.ledger.history, principal, key, account_id=account_id)

    async def diff(
        self,
        principal: Principal,
        key: str,
        from_version: int,
        to_version: int,
        *,
        account_id: str | None = None,
    ) -> SessionDiff:
        return await asyncio.to_thread(
            self.ledger.diff, principal, key, from_version, to_version, account_id=account_id
        )

    async def fork(
        self,
        principal: Principal,
        key: str,
        at_version: int,
        new_key: str,
        *,
        account_id: str | None = None,
    ) -> SessionView:
        return await asyncio.to_thread(
            self.ledger.fork, principal, key, at_version, new_key, account_id=account_id
        )

    async def verify(
        self,
        principal: Principal,
        key: str | None = None,
        *,
        anchors: Iterable[ChainHead] = (),
        account_id: str | None = None,
    ) -> VerifyReport:
        return await asyncio.to_thread(
            self.ledger.verify, principal, key, anchors=anchors, account_id=account_id
        )

    async def export(self, principal: Principal, key: str | None = None) -> AsyncIterator[str]:
        """The export's lines, read in a worker thread as they are consumed."""
        lines = self.ledger.export(principal, key)
        while (line := await asyncio.to_thread(next, lines, None)) is not None:
            yield line

    async def import_(self, lines: Iterable[str]) -> ImportResult:
        return await asyncio.to_thread(self.ledger.import_, lines)

    async def close(self) -> None:
        await asyncio.to_thread(self.ledger.close)

    async def __aenter__(self) -> AsyncSessionLedger:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
