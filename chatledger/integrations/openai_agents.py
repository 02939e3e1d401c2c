"""``ChatLedgerSession``: an OpenAI Agents SDK ``Session`` kept in a chatledger ledger.

The SDK's session protocol (openai-agents 0.24: ``get_items``, ``add_items``,
``pop_item``, ``clear_session``, ``session_settings``) maps one to one onto
``SessionLedger``'s agent-framework items: each SDK item is recorded verbatim
(``add_items``) in the ledger session named by ``session_id``, and the
session's history is its live buffer. Popped and cleared items leave the
buffer but stay in the ledger's history, so time travel, forks, diffs and
``verify`` see every turn.

Compaction: the SDK's ``OpenAIResponsesCompactionSession`` asks the store it
wraps for ``_get_compaction_snapshot(limit)`` -- the newest ``limit`` items
and a ``replace_suffix(start, output)`` that swaps the newest of them for the
compacted output atomically or reports ``False`` when the tail moved on. The
SDK documents this underscore hook as the way a store opts in; here it is
one ``replace_tail`` call (one ``TailReplaced`` event, or
``ConcurrencyConflict`` and nothing recorded).

Users: the SDK has no user of its own, so the ledger session belongs to the
principal's user -- or, with ``user_id=``, to that end user under a pseudonym
(``SessionLedger.pseudonym``): the principal's ``user_id`` becomes the user's
pseudonym and the ledger key ``agents/<user pseudonym>/<session id pseudonym>``,
so ``erase_user(principal, user_id)`` erases the user's sessions and no key or
actor field holds the user id or the session id.

Writes survive the caller's cancellation (the outcome is awaited before the
cancellation is passed on). On PostgreSQL they carry an idempotency key, so
that a write whose COMMIT went unanswered (``WriteOutcomeUnknown``) is
retried once without a duplicate; SQLite cannot leave an outcome unknown.
Requires ``pip install 'chatledger[openai-agents]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

import msgspec

from chatledger import (
    AsyncSessionLedger,
    ConcurrencyConflict,
    InvalidInput,
    Message,
    Principal,
    SessionLedger,
    UnknownSession,
    WriteOutcomeUnknown,
)

try:
    from agents import TResponseInputItem
    from agents.memory import SessionSettings
    from agents.memory.session import _CompactionSnapshot as CompactionSnapshot
    from agents.memory.session_settings import coerce_session_settings, resolve_session_limit
except ImportError as missing:  # pragma: no cover - exercised only without the SDK
    raise ImportError(
        "chatledger.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'chatledger[openai-agents]'"
    ) from missing

__all__ = ["ChatLedgerSession"]

T = TypeVar("T")
PrunePrefix = Callable[[TResponseInputItem], bool]


class ChatLedgerSession:
    """An OpenAI Agents SDK ``Session`` whose items live in the ledger session ``session_id``.

    ``ledger`` is an ``AsyncSessionLedger`` or a ``SessionLedger`` (wrapped);
    every call acts as ``principal`` (in ``account_id``, for an admin).
    ``session_settings`` (or a dict of its fields) gives the default ``limit``
    of ``get_items``. ``user_id`` names the end user the session belongs to: it is
    then kept under a pseudonym of that user, which ``erase_user`` reaches (see the
    module docstring); without it the ledger key is ``session_id`` itself.
    """

    def __init__(
        self,
        session_id: str,
        ledger: AsyncSessionLedger | SessionLedger,
        principal: Principal,
        *,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        account_id: str | None = None,
        user_id: str | None = None,
    ) -> None:
        if not isinstance(ledger, AsyncSessionLedger | SessionLedger):
            raise InvalidInput("ledger must be a SessionLedger or an AsyncSessionLedger.")
        if user_id is not None and (not isinstance(user_id, str) or not user_id):
            raise InvalidInput("user_id must be None or a non-empty str.")
        self.session_id = session_id
        self.user_id = user_id
        self.ledger = (
            ledger if isinstance(ledger, AsyncSessionLedger) else AsyncSessionLedger(ledger)
        )
        self.principal = principal
        self.account_id = account_id
        # Only a server database can leave a COMMIT's outcome unknown (WriteOutcomeUnknown);
        # on SQLite a keyed write would only cost time (a key lookup per write).
        self.keyed_writes = not str(self.ledger.ledger.settings.url).startswith("sqlite")
        self.session_settings: SessionSettings | None = (
            coerce_session_settings(dict(session_settings))
            if isinstance(session_settings, Mapping)
            else session_settings or SessionSettings()
        )

    # ------------------------------------------------------------- protocol
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The newest ``limit`` items (default: ``session_settings.limit``; ``None`` or a
        negative limit: all), oldest first; an unknown session has none."""
        wanted = resolve_session_limit(limit, self.session_settings)
        return [
            _copied(m) for m in await self._live(None if wanted is None or wanted < 0 else wanted)
        ]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Record the items, in order, in one transaction (starting the session if new)."""
        if items:
            await self._write(self.ledger.add_items, _plain_items(items))

    async def pop_item(self) -> TResponseInputItem | None:
        """Take the newest item out of the history and return it (``None`` if empty)."""
        try:
            popped = await self._write(self.ledger.pop_item)
        except UnknownSession:
            return None
        return None if popped is None else _copied(popped)

    async def clear_session(self) -> None:
        """Take every item out of the history (they stay in the ledger's history)."""
        with contextlib.suppress(UnknownSession):
            await self._write(self.ledger.clear_buffer)

    # ----------------------------------------------------------- compaction
    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: PrunePrefix | None = None
    ) -> CompactionSnapshot | None:
        """The newest ``limit`` items and an atomic replacement of their newest ones.

        The SDK's compaction hook for stores (see the module docstring). A
        subclass that changes how items are read or written gets ``None`` (the
        SDK then compacts only complete histories through the public methods),
        since a snapshot taken here would bypass its changes.
        """
        cls = type(self)
        if cls.get_items is not ChatLedgerSession.get_items or (
            cls.add_items is not ChatLedgerSession.add_items
        ):
            return None
        window = await self._live(limit + 1)
        complete = len(window) <= limit
        window = window[max(0, len(window) - limit) :] if limit > 0 else []
        ids = [m.id for m in window]

        async def replace_suffix(start: int, output: list[TResponseInputItem]) -> bool:
            expected = ids[start:]
            if not expected:
                return False
            try:
                added = await self._write(self.ledger.replace_tail, expected, _plain_items(output))
            except (ConcurrencyConflict, UnknownSession):
                return False
            if prune_prefix is not None:
                await self._prune(prune_prefix, {a.message_id for a in added})
            return True

        return CompactionSnapshot([_copied(m) for m in window], complete, replace_suffix)

    async def _prune(self, expired: PrunePrefix, kept: set[str]) -> None:
        """Take the oldest items out while ``expired`` says so (the SDK's encrypted sessions
        reclaim items whose key lifetime ran out this way), in one event."""
        ids = []
        for message in await self._live(None):
            if message.id in kept or not expired(_copied(message)):
                break
            ids.append(message.id)
        if ids:
            # InvalidInput: another writer took some of them first; nothing left to reclaim.
            with contextlib.suppress(ConcurrencyConflict, InvalidInput):
                await self._write(self.ledger.remove_items, ids)

    # -------------------------------------------------------------- helpers
    async def ledger_key(self) -> str:
        """The ledger key of this session (``session_id``, or its pseudonymous key with
        ``user_id``), for ledger calls such as ``history`` or ``fork``."""
        return (await self._target())[1]

    async def _target(self) -> tuple[Principal, str]:
        """Who writes, and under which key (see the module docstring)."""
        if self.user_id is None:
            return self.principal, self.session_id
        pseudonym = self.ledger.pseudonym
        user = await pseudonym(self.principal, self.user_id, account_id=self.account_id)
        name = await pseudonym(
            self.principal, self.user_id, self.session_id, account_id=self.account_id
        )
        return self.principal.model_copy(update={"user_id": user}), f"agents/{user}/{name}"

    async def _live(self, limit: int | None) -> list[Message]:
        principal, key = await self._target()
        try:
            return await self.ledger.items(principal, key, limit=limit, account_id=self.account_id)
        except UnknownSession:
            return []

    async def _write(self, method: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``method(principal, session_id, *args)`` awaited to its outcome (see ``_settled``);
        on a server database under a fresh idempotency key, tried once more with the same key
        if the outcome is unknown, so it lands exactly once."""
        key = f"openai-agents:{uuid.uuid4().hex}" if self.keyed_writes else None
        principal, target = await self._target()

        def call() -> Awaitable[T]:
            return method(
                principal, target, *args, account_id=self.account_id, idempotency_key=key,
            )  # fmt: skip

        try:
            return await _settled(call())
        except WriteOutcomeUnknown:
            if key is None:
                raise
            return await _settled(call())


def _plain_items(items: Sequence[Any]) -> list[dict[str, Any]]:
    """The items as plain JSON objects, copied (a caller's later change cannot reach the
    ledger); pydantic models are dumped first."""
    plain = []
    for item in items:
        if hasattr(item, "model_dump"):
            item = item.model_dump(mode="json", exclude_unset=True)
        if not isinstance(item, Mapping):
            raise InvalidInput(f"Session items must be JSON objects (dicts), not {type(item)}.")
        try:
            plain.append(json.loads(json.dumps(item, ensure_ascii=False)))
        except (TypeError, ValueError) as error:
            raise InvalidInput(f"A session item is not JSON: {error}") from None
    return plain


def _copied(message: Message) -> TResponseInputItem:
    """The item of ``message`` as a fresh object (callers may change what they get); msgspec
    copies a JSON object some twenty times faster than a json round trip."""
    return cast(TResponseInputItem, msgspec.json.decode(msgspec.json.encode(message.as_item())))


async def _settled(write: Awaitable[T]) -> T:
    """The outcome of ``write``, awaited to the end even if the caller is cancelled meanwhile
    (the cancellation is raised afterwards): the SDK must know whether a write landed."""
    task = asyncio.ensure_future(write)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation is what the caller hears of
        raise asyncio.CancelledError
    return task.result()
