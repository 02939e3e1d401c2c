"""``SessionLedger``: the public face every caller goes through.

Each method checks its arguments, resolves the principal's request to a
session under the tenant rule (``chatledger.domain.access``), and makes one
call into the internal core (``chatledger.service``), built once by
``service.bootstrap.build``. Errors leave as ``chatledger.errors`` only
(``boundary.public``). The read-model methods are bound from ``ReadModels``,
opened on first use.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from chatledger.boundary import public
from chatledger.domain.failures import InvalidInput, StoreUnavailable, UnknownSession
from chatledger.domain.identity import validate_key
from chatledger.domain.limits import check_int, check_seconds
from chatledger.domain.ports import ArchiveStore, Clock, KeyStore, Summarizer
from chatledger.domain.values import ClientContext, EvictionReason, Message, Principal, ToolCall
from chatledger.erasure_ledger import ErasureOperations
from chatledger.history_ledger import HistoryOperations
from chatledger.item_ledger import ItemOperations
from chatledger.read_models import ReadModels
from chatledger.results import (
    AddedMessage,
    CommitResult,
    CommitTask,
    ContextView,
    LedgerEvent,
    MergeResult,
    SessionView,
)
from chatledger.service import erasing, views, writes
from chatledger.service.binding import delegate
from chatledger.service.bootstrap import build
from chatledger.service.core import Core
from chatledger.service.messages import (
    build_context,
    build_message,
    build_messages,
)
from chatledger.service.messages import (
    idempotency_key as checked_key,
)
from chatledger.service.messages import message_ids as checked_ids
from chatledger.service.sessions import unknown
from chatledger.settings import LedgerSettings
from chatledger.work_ledger import WorkingStateOperations


class SessionLedger(ItemOperations, HistoryOperations, WorkingStateOperations, ErasureOperations):
    """An event-sourced ledger of agent sessions on SQLite (default) or PostgreSQL."""

    def __init__(
        self,
        url: str | None = None,
        *,
        settings: LedgerSettings | None = None,
        summarizer: Summarizer | None = None,
        archive_store: ArchiveStore | None = None,
        key_store: KeyStore | None = None,
        clock: Clock | None = None,
        snapshot_interval: int | None = None,
        **options: Any,
    ) -> None:
        self.core: Core = build(
            url,
            settings=settings,
            summarizer=summarizer,
            archive_store=archive_store,
            key_store=key_store,
            clock=clock,
            snapshot_interval=snapshot_interval,
            **options,
        )
        self._read_models: ReadModels | None = None
        self._read_models_lock = threading.Lock()

    @property
    def settings(self) -> LedgerSettings:
        return self.core.settings

    @property
    def summarizer(self) -> Summarizer:
        """The summarizer commits and merges use (may be replaced, e.g. in tests)."""
        return self.core.commits.summarizer

    @summarizer.setter
    def summarizer(self, summarizer: Summarizer) -> None:
        if not isinstance(summarizer, Summarizer):
            raise InvalidInput("summarizer must have summarize() and merge() methods.")
        self.core.commits.summarizer = summarizer

    @property
    def archive_store(self) -> ArchiveStore | None:
        return self.core.commits.archive_store

    @property
    def key_store(self) -> KeyStore:
        """Where the data keys of session content live (default: a table of this database)."""
        return self.core.store.keyring.store

    # ------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Finish running commits, then release the database."""
        if self._read_models is not None:
            self._read_models.close()
        self.core.close()

    def __enter__(self) -> SessionLedger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --------------------------------------------------------------- writes
    @public
    def add_message(
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
        idempotency_key: str | None = None,
        expected_version: int | None = None,
        state: Mapping[str, Any] | None = None,
        shared_state: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> AddedMessage:
        """Record one message (creating the session on first use).

        With ``idempotency_key``, a retry of the same call (e.g. after
        ``WriteOutcomeUnknown``) records nothing twice: it returns the result
        of the write that landed. ``expected_version``, ``state`` and
        ``shared_state`` work as in ``add_items``.
        """
        found = self._target(principal, key, account_id)
        now = self.core.now()
        limits = self.limits
        message = build_message(limits, now, role, content, name, tool_call, message_id)
        if expected_version is not None or state or shared_state:
            return self._record(
                principal, found, [message], now, context, state, shared_state,
                expected_version, idempotency_key,
            )[0][0]  # fmt: skip
        # (The usual call passes neither: no calls for them on the hot path.)
        built_context = None if context is None else build_context(limits, context)
        write_key = None if idempotency_key is None else checked_key(idempotency_key)
        return writes.record_messages(
            self.core.sessions, principal, found, [message], now, built_context, write_key
        )[0]

    @public
    def add_messages(
        self,
        principal: Principal,
        key: str,
        messages: Sequence[Mapping[str, Any] | Message],
        *,
        account_id: str | None = None,
        context: ClientContext | None = None,
        idempotency_key: str | None = None,
        expected_version: int | None = None,
        state: Mapping[str, Any] | None = None,
        shared_state: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> list[AddedMessage]:
        """Record several messages in one transaction: all of them, or none (a retry with
        the same ``idempotency_key`` returns the recorded write, see ``add_message``)."""
        found = self._target(principal, key, account_id)
        now = self.core.now()
        built = build_messages(self.limits, now, messages)
        if expected_version is not None or state or shared_state:
            return self._record(
                principal, found, built, now, context, state, shared_state,
                expected_version, idempotency_key,
            )[0]  # fmt: skip
        built_context, write_key = build_context(self.limits, context), checked_key(idempotency_key)
        return writes.record_messages(
            self.core.sessions, principal, found, built, now, built_context, write_key
        )

    @public
    def commit(
        self,
        principal: Principal,
        key: str,
        *,
        wait: bool = True,
        account_id: str | None = None,
        idempotency_key: str | None = None,
        expected_version: int | None = None,
    ) -> CommitResult:
        """Fold the whole live buffer into a new archive (a retry with the same
        ``idempotency_key`` returns the recorded commit instead of committing again)."""
        found = self._target(principal, key, account_id)
        return self.core.commits.commit(
            principal, found, None, wait=wait, idempotency_key=checked_key(idempotency_key),
            expected_version=expected_version,
        )  # fmt: skip

    @public
    def commit_snapshot(
        self,
        principal: Principal,
        key: str,
        message_ids: Sequence[str],
        *,
        wait: bool = True,
        account_id: str | None = None,
        idempotency_key: str | None = None,
        expected_version: int | None = None,
        archive_id: str | None = None,
        keep: bool = False,
    ) -> CommitResult:
        """Fold exactly ``message_ids`` into a new archive; the rest stays live. With
        ``keep`` they stay live too (a snapshot archive); ``archive_id`` names the archive."""
        ids = checked_ids(message_ids)
        if archive_id is not None:
            validate_key(archive_id, what="archive id")
        found = self._target(principal, key, account_id)
        return self.core.commits.commit(
            principal, found, ids, wait=wait, idempotency_key=checked_key(idempotency_key),
            expected_version=expected_version, archive_id=archive_id, kept=bool(keep),
        )  # fmt: skip

    @public
    def merge_archives(
        self,
        principal: Principal,
        key: str,
        *,
        threshold: int | None = None,
        max_count: int | None = None,
        account_id: str | None = None,
        idempotency_key: str | None = None,
        expected_version: int | None = None,
    ) -> MergeResult:
        """Merge the oldest live archives into one when there are more than ``threshold``."""
        found = self._target(principal, key, account_id)
        return self.core.commits.merge(
            principal,
            found,
            threshold=threshold,
            max_count=max_count,
            idempotency_key=checked_key(idempotency_key),
            expected_version=expected_version,
        )

    @public
    def get_or_create(
        self,
        principal: Principal,
        key: str,
        *,
        context: ClientContext | None = None,
        account_id: str | None = None,
    ) -> tuple[SessionView, bool]:
        """The session under ``key``, starting it (with ``context``) if it does not exist.

        Returns the view and whether this call created it. Concurrent callers,
        in this process or others, end up with one session: the loser of a
        creation race sees a version conflict and returns the winner's session.
        """
        found = self._target(principal, key, account_id)
        built_context = build_context(self.limits, context)
        session, created = writes.get_or_create(
            self.core.sessions, principal, found, built_context, self.core.now
        )
        return self._view(session), created

    @public
    def close_session(
        self,
        principal: Principal,
        key: str,
        *,
        account_id: str | None = None,
        idempotency_key: str | None = None,
        expected_version: int | None = None,
    ) -> SessionView:
        """Record that the client closed the session (it leaves the working set)."""
        found, write_key = self._target(principal, key, account_id), checked_key(idempotency_key)
        return writes.close(
            self.core.sessions, principal, found, self.core.now(), write_key, self._view,
            expected_version,
        )  # fmt: skip

    @public
    def evict(
        self,
        principal: Principal,
        key: str,
        *,
        reason: EvictionReason = "admin",
        idle_seconds: float | None = None,
        account_id: str | None = None,
        idempotency_key: str | None = None,
        expected_version: int | None = None,
    ) -> SessionView:
        """Record that the session left the working set; its history stays."""
        if reason not in ("idle", "lru", "admin"):
            raise InvalidInput("reason must be 'idle', 'lru' or 'admin'.")
        seconds = None if idle_seconds is None else check_seconds(idle_seconds, "idle_seconds")
        found, write_key = self._target(principal, key, account_id), checked_key(idempotency_key)
        return writes.evict(
            self.core.sessions, principal, found, reason, seconds, self.core.now(), write_key,
            self._view, expected_version,
        )  # fmt: skip

    @public
    def delete_session(
        self,
        principal: Principal,
        key: str,
        *,
        account_id: str | None = None,
        idempotency_key: str | None = None,
        expected_version: int | None = None,
        erase: bool = False,
    ) -> None:
        """Delete the session: it leaves the working set and its key starts afresh (the next
        message starts a new session under it). Members no longer see what came before --
        history, time travel, context, archives, archive bodies read only the current
        incarnation; admins still do, for audit. With encryption on (and ``key_scope``
        ``session``) the deleted incarnation's content is erased with it: its keys are
        destroyed and an ``Erased`` (scope ``incarnation``) is recorded with the
        ``Deleted``. ``erase=True`` insists on that: ``InvalidInput``, and nothing recorded,
        where it cannot be done (docs/erasure.md)."""
        found, write_key = self._target(principal, key, account_id), checked_key(idempotency_key)
        if not isinstance(erase, bool):
            raise InvalidInput("erase must be True or False.")
        erasing.delete_session(
            self.core, principal, found, erase=erase,
            idempotency_key=write_key, expected_version=expected_version,
        )  # fmt: skip

    # ---------------------------------------------------------------- reads
    @public
    def session(
        self,
        principal: Principal,
        key: str,
        *,
        at_version: int | None = None,
        at_time: datetime | None = None,
        account_id: str | None = None,
    ) -> SessionView:
        """The session now, or as it was at a version or a moment."""
        found = self._target(principal, key, account_id)
        return self.core.sessions.read(found, self._view, at_version, at_time)

    @public
    def context(
        self,
        principal: Principal,
        key: str,
        token_budget: int = 128_000,
        *,
        at_version: int | None = None,
        at_time: datetime | None = None,
        account_id: str | None = None,
    ) -> ContextView:
        """The prompt context: latest archive summary plus the newest live messages that fit."""
        check_int(token_budget, "token_budget")
        found = self._target(principal, key, account_id)
        return self.core.sessions.read(
            found, lambda session: views.context_view(session, token_budget), at_version, at_time
        )

    @public
    def history(
        self,
        principal: Principal,
        key: str,
        *,
        after_version: int = 0,
        limit: int | None = None,
        account_id: str | None = None,
    ) -> list[LedgerEvent]:
        """The session's recorded events after ``after_version``, oldest first (at most
        ``limit`` of them: page through a long session by passing the last version seen).
        A member sees those since the session was last deleted (while it is deleted: its
        ``Deleted``), and an ``after_version`` before that is ``UnknownSession``; an admin
        sees every incarnation."""
        check_int(after_version, "after_version")
        if limit is not None:
            check_int(limit, "limit (or None for no limit)", minimum=1)
        found = self._target(principal, key, account_id)
        sessions = self.core.sessions
        # A member sees the current incarnation only (a deleted one stays for admins): from
        # its start, or from a version in it -- not from one of a deleted incarnation.
        first = sessions.visible_from(found)
        if 0 < after_version < first - 1:
            raise UnknownSession(
                f"Version {after_version + 1} of session {found.key!r} belongs to an "
                f"incarnation deleted since (the current one began at version {first}); only "
                "an admin reads deleted incarnations (audit)."
            )
        after_version = max(after_version, first - 1)
        events = sessions.events(found.session_id, gt=after_version or None, limit=limit)
        if not events and (after_version == 0 or not sessions.exists(found.session_id)):
            raise UnknownSession(unknown(found.key, found.tenant))
        return [views.ledger_event(found.key, e) for e in events]

    @public
    def task(self, task_id: str) -> CommitTask | None:
        """The task record of a commit (every commit has one, waited for or not): its status,
        error and result; ``None`` for an unknown id."""
        return self.core.commits.task(task_id)

    # ---------------------------------------------------------- read models
    @property
    def read_models(self) -> ReadModels:
        """The persisted read models (working set, archives, audit, usage), opened on first use."""
        with self._read_models_lock:
            if self._read_models is None:
                if self.core.closed:
                    raise StoreUnavailable("This ledger is closed; open a new SessionLedger.")
                self._read_models = ReadModels(self)
            return self._read_models

    working_set = delegate("read_models", ReadModels.working_set)
    archives = delegate("read_models", ReadModels.archives)
    audit = delegate("read_models", ReadModels.audit)
    usage = delegate("read_models", ReadModels.usage)
    evict_idle = delegate("read_models", ReadModels.evict_idle)
    wait_for_projections = delegate("read_models", ReadModels.wait_for_projections)
