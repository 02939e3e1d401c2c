"""The agent-framework half of ``SessionLedger``: items, taking them out, state.

``ItemOperations`` is mixed into ``SessionLedger`` (it works on the ledger's
``core``): framework items kept verbatim (``add_items``), read from the tail
of the buffer (``items``), removed by id, popped or cleared without being
archived, the tail replaced atomically (what framework-side compaction
needs), and the session's key-value state -- with shared state scopes
written in the same transaction. Each method checks its arguments, resolves
the tenant and makes one core call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from chatledger.boundary import public
from chatledger.domain.access import Target, scope_target
from chatledger.domain.failures import ConcurrencyConflict
from chatledger.domain.limits import check_int
from chatledger.domain.session import Session
from chatledger.domain.values import ClientContext, Message, Principal
from chatledger.ledger_base import LedgerBase
from chatledger.results import AddedMessage, StateView
from chatledger.service import item_writes as item_ops
from chatledger.service.messages import build_context
from chatledger.service.messages import idempotency_key as checked_key
from chatledger.service.messages import message_ids as checked_ids


class ItemOperations(LedgerBase):
    """Items, removal, tail replacement and state (mixed into ``SessionLedger``)."""

    @public
    def add_items(
        self,
        principal: Principal,
        key: str,
        items: Sequence[Mapping[str, Any]],
        *,
        account_id: str | None = None,
        context: ClientContext | None = None,
        state: Mapping[str, Any] | None = None,
        shared_state: Mapping[str, Mapping[str, Any]] | None = None,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> list[AddedMessage]:
        """Record agent-framework items (JSON objects, kept exactly) in one transaction.

        ``state`` sets keys of the session's state and ``shared_state`` keys of
        shared scopes (``{"app:shop": {...}}``), in the same transaction;
        ``expected_version`` makes it conditional (``ConcurrencyConflict``).
        """
        found = self._target(principal, key, account_id)
        now = self.core.now()
        built = item_ops.build_items(self.limits, now, items)
        return self._record(
            principal, found, built, now, context, state, shared_state,
            expected_version, idempotency_key,
        )[0]  # fmt: skip

    def _record(
        self,
        principal: Principal,
        found: Target,
        messages: list[Message],
        now: datetime,
        context: ClientContext | None,
        state: Mapping[str, Any] | None,
        shared_state: Mapping[str, Mapping[str, Any]] | None,
        expected_version: int | None,
        idempotency_key: str | None,
    ) -> tuple[list[AddedMessage], int]:
        """The write of ``add_items`` (and of ``add_message(s)`` with state or a condition):
        the messages added, and the session's version right after the write."""
        # (Each check is skipped for what was not passed: the usual append passes none.)
        if expected_version is not None:
            check_int(expected_version, "expected_version")
        limits = self.limits
        shared = {} if shared_state is None else {
            scope: item_ops.state_changes(limits, changes, f"shared_state[{scope!r}]")
            for scope, changes in item_ops.state_changes(
                limits, shared_state, "shared_state"
            ).items()
        }  # fmt: skip
        return item_ops.record_with_state(
            self.core.sessions, principal, found, messages, now,
            context=None if context is None else build_context(limits, context),
            state={} if state is None else item_ops.state_changes(limits, state, "state"),
            shared=shared, expected_version=expected_version,
            idempotency_key=None if idempotency_key is None else checked_key(idempotency_key),
        )  # fmt: skip

    @public
    def items(
        self,
        principal: Principal,
        key: str,
        *,
        limit: int | None = None,
        after_version: int | None = None,
        account_id: str | None = None,
    ) -> list[Message]:
        """The live buffer's items, oldest first: the last ``limit``, or those added after
        ``after_version`` (``Message.as_item()`` gives each one's JSON object back)."""
        if limit is not None:
            check_int(limit, "limit", minimum=0)
        if after_version is not None:
            check_int(after_version, "after_version")
        found = self._target(principal, key, account_id)
        return item_ops.live_items(
            self.core.sessions, found, limit=limit, after_version=after_version
        )

    @public
    def remove_items(
        self,
        principal: Principal,
        key: str,
        message_ids: Sequence[str],
        *,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
        account_id: str | None = None,
    ) -> list[Message]:
        """Take these live items out of the buffer without archiving them (they stay in the
        history); returns them. Unknown or duplicate ids are ``InvalidInput``."""
        ids = checked_ids(message_ids)
        found = self._target(principal, key, account_id)
        return item_ops.remove(
            self.core.sessions, principal, found, lambda _: ids, "remove", self.core.now(),
            expected_version=expected_version, idempotency_key=checked_key(idempotency_key),
            same=lambda taken: set(taken) == set(ids),
        )  # fmt: skip

    @public
    def pop_item(
        self,
        principal: Principal,
        key: str,
        *,
        expected_id: str | None = None,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
        account_id: str | None = None,
    ) -> Message | None:
        """Take the newest live item out of the buffer and return it (``None`` if empty).

        With ``expected_id`` only if the newest item is still that one, else
        ``ConcurrencyConflict`` and nothing is recorded.
        """
        found = self._target(principal, key, account_id)

        def newest(session: Session) -> list[str]:
            last = next(reversed(session.buffer), None)
            if expected_id is not None and last != expected_id:
                raise ConcurrencyConflict(
                    f"The newest item of session {found.key!r} is {last!r}, not {expected_id!r}; "
                    "nothing was removed."
                )
            return [] if last is None else [last]

        popped = item_ops.remove(
            self.core.sessions, principal, found, newest, "pop", self.core.now(),
            expected_version=expected_version, idempotency_key=checked_key(idempotency_key),
            same=lambda taken: expected_id is None or taken == (expected_id,),
        )  # fmt: skip
        return popped[0] if popped else None

    @public
    def clear_buffer(
        self,
        principal: Principal,
        key: str,
        *,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
        account_id: str | None = None,
    ) -> list[Message]:
        """Empty the live buffer without archiving (the items stay in the history)."""
        found = self._target(principal, key, account_id)
        return item_ops.remove(
            self.core.sessions, principal, found, lambda s: list(s.buffer), "clear",
            self.core.now(), expected_version=expected_version,
            idempotency_key=checked_key(idempotency_key),
        )  # fmt: skip

    @public
    def replace_tail(
        self,
        principal: Principal,
        key: str,
        expected_ids: Sequence[str],
        items: Sequence[Mapping[str, Any]],
        *,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
        account_id: str | None = None,
    ) -> list[AddedMessage]:
        """If the newest live items are still ``expected_ids`` (oldest first), replace them
        by ``items`` in one ``TailReplaced`` event; else ``ConcurrencyConflict`` and nothing
        is recorded. What framework-side compaction needs."""
        ids = checked_ids(expected_ids)
        found = self._target(principal, key, account_id)
        now = self.core.now()
        built = item_ops.build_items(self.limits, now, items) if items else []
        return item_ops.replace_tail(
            self.core.sessions, principal, found, ids, built, now,
            expected_version=expected_version, idempotency_key=checked_key(idempotency_key),
        )  # fmt: skip

    @public
    def update_state(
        self,
        principal: Principal,
        key: str,
        changes: Mapping[str, Any] | None = None,
        *,
        shared_state: Mapping[str, Mapping[str, Any]] | None = None,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
        account_id: str | None = None,
    ) -> StateView:
        """Set keys of the session's state (and of shared scopes) in one transaction; the
        session is started if it does not exist."""
        found = self._target(principal, key, account_id)
        _, version = self._record(
            principal, found, [], self.core.now(), None, changes, shared_state,
            expected_version, idempotency_key,
        )  # fmt: skip
        # The state the write left (a retry's too): as of its version if others wrote since.
        view = self.state(principal, key, account_id=account_id)
        if view.version != version:
            view = self.state(principal, key, at_version=version, account_id=account_id)
        return view

    @public
    def state(
        self,
        principal: Principal,
        key: str,
        *,
        at_version: int | None = None,
        account_id: str | None = None,
    ) -> StateView:
        """The session's key-value state, now or as it was at ``at_version``."""
        found = self._target(principal, key, account_id)
        return self.core.sessions.read(
            found,
            lambda session: StateView(
                key=found.key, version=session.version, state=dict(session.state)
            ),
            at_version,
        )

    @public
    def shared_state(
        self, principal: Principal, scope: str, *, account_id: str | None = None
    ) -> StateView:
        """The state of a shared scope (e.g. ``app:shop``); empty at version 0 if unwritten."""
        self.core.check_open()
        found = scope_target(principal, scope, account_id)
        sessions = self.core.sessions
        with sessions.lock(found.session_id):
            session = sessions.load(found.session_id)
        if session is None:
            return StateView(key=scope, version=0, state={})
        return StateView(key=scope, version=session.version, state=dict(session.state))
