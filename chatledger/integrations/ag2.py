"""``LedgerStorage``: AG2's history ``Storage`` kept in a chatledger ledger.

AG2 (``ag2`` 1.2) keeps a stream's transcript behind ``ag2.history.Storage``
(``save_event``, ``get_history``, ``set_history``, ``drop_history``); its ACP
``SessionStore`` takes one as ``storage=`` and, with ``retain_history=True``,
lets a later process adopt a stream by id (``get_or_adopt``) and read it back.
Here a stream is one ledger session of the principal's tenant, keyed by the
stream id's hex.

Each AG2 event is one item of the session's buffer: ``{"type": "message",
"role": ..., "content": <its text>, "ag2": {"module", "qualname", "data"}}``.
``data`` is the event's own ``to_dict()`` and is what ``get_history`` rebuilds
the event from (``from_dict`` of its class), so events come back equal; the
role and text (what the model read or said, tool calls as ``name(args)``)
are what token estimates, summaries, ``context()`` and the viewer read. An
event whose class cannot be imported any more comes back as AG2's
``UnknownEvent`` holding its data.

``set_history`` (AG2 repairs and compacts transcripts with it) is recorded as
what changed: the items after the longest unchanged prefix are replaced in one
``TailReplaced`` (or taken out in one ``ItemsRemoved``, or the new ones
appended), so what was there stays readable in the ledger's history.
``drop_history`` records ``Deleted`` -- or, on a ledger with encryption,
erases the session (its content is gone for good; the stream id then takes no
more writes). Writes to one stream from one ``LedgerStorage`` keep the order
they were called in; writers in other processes are linearised by the
ledger (a ``set_history`` that raced another write is re-applied to what the
other writer left, never merged into a mix of both).

Requires ``pip install 'chatledger[ag2]'``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from chatledger import (
    AsyncSessionLedger,
    ConcurrencyConflict,
    InvalidInput,
    Message,
    Principal,
    SessionErased,
    SessionLedger,
    UnknownSession,
)
from chatledger.integrations.framework_sessions import drop_session, open_ledger

try:
    from ag2.annotations import Context
    from ag2.context import StreamId
    from ag2.events import (
        BaseEvent,
        HumanMessage,
        Input,
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextInput,
        ToolCallEvent,
        ToolCallsEvent,
        ToolResultEvent,
        ToolResultsEvent,
        UnknownEvent,
    )
    from ag2.history import Storage
except ImportError as missing:  # pragma: no cover - exercised only without AG2
    raise ImportError(
        "chatledger.integrations.ag2 needs AG2 with its ACP extra: pip install 'chatledger[ag2]'"
    ) from missing

__all__ = ["LedgerStorage", "stream_key"]

_ATTEMPTS = 5  # a set_history re-read after this many lost races gives up (ConcurrencyConflict)


def stream_key(stream_id: StreamId) -> str:
    """The ledger key of an AG2 stream: its id's hex (what ``AgentSession.session_id`` is)."""
    return stream_id.hex


class LedgerStorage(Storage):
    """An ``ag2.history.Storage`` whose streams are sessions of a chatledger ledger.

    ``ledger_or_url`` is a ``SessionLedger``, an ``AsyncSessionLedger`` or a
    database URL (the storage then opens the ledger and ``close()`` closes it);
    every call acts as ``principal``, in its account (or ``account_id``, for an
    admin).
    """

    def __init__(
        self,
        ledger_or_url: SessionLedger | AsyncSessionLedger | str,
        *,
        principal: Principal,
        account_id: str | None = None,
    ) -> None:
        self.ledger, self._owned = open_ledger(ledger_or_url, principal)
        self.principal = principal
        self.account_id = account_id
        # Per event loop, per stream: one write at a time, in the order the calls came.
        self._locks: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[StreamId, asyncio.Lock]
        ] = weakref.WeakKeyDictionary()

    # ---------------------------------------------------------------- Storage
    async def save_event(self, event: BaseEvent, context: Context) -> None:
        """Append ``event`` to the stream of ``context`` (starting its session if new)."""
        stream_id = context.stream.id
        item = event_item(event)
        async with self._lock(stream_id):
            await asyncio.to_thread(
                self.ledger.add_items,
                self.principal,
                stream_key(stream_id),
                [item],
                account_id=self.account_id,
            )

    async def get_history(self, stream_id: StreamId) -> list[BaseEvent]:
        """The stream's events, oldest first (none for a stream never written, or dropped)."""
        return [item_event(m.as_item()) for m in await asyncio.to_thread(self._live, stream_id)]

    async def set_history(self, stream_id: StreamId, events: Iterable[BaseEvent]) -> None:
        """Make the stream's history ``events``, recording only the changed tail."""
        wanted = list(events)
        items = [event_item(e) for e in wanted]  # checked before anything is read or written
        async with self._lock(stream_id):
            await asyncio.to_thread(self._replace, stream_id, wanted, items)

    async def drop_history(self, stream_id: StreamId) -> None:
        """Delete the stream's session (erase it, on a ledger with encryption)."""
        async with self._lock(stream_id):
            await asyncio.to_thread(self._drop, stream_id)

    # --------------------------------------------------------------- lifetime
    def close(self) -> None:
        """Close the ledger if this storage opened it (from a URL)."""
        if self._owned:
            self.ledger.close()

    async def aclose(self) -> None:
        """``close()``, off the event loop."""
        await asyncio.to_thread(self.close)

    # ---------------------------------------------------------------- helpers
    def _lock(self, stream_id: StreamId) -> asyncio.Lock:
        locks = self._locks.setdefault(asyncio.get_running_loop(), {})
        lock = locks.get(stream_id)
        if lock is None:
            lock = locks[stream_id] = asyncio.Lock()
        return lock

    def _live(self, stream_id: StreamId) -> list[Message]:
        try:
            view = self.ledger.session(
                self.principal, stream_key(stream_id), account_id=self.account_id
            )
        except (UnknownSession, SessionErased):
            return []
        return [] if view.status == "erased" else list(view.buffer)

    def _replace(
        self, stream_id: StreamId, events: list[BaseEvent], items: list[dict[str, Any]]
    ) -> None:
        """Replace what differs after the longest prefix of equal events (AG2's equality:
        a re-created event with a new ``created_at`` is the same event), in one event written
        at the version read (re-read and re-applied if another writer came first)."""
        key = stream_key(stream_id)
        for _ in range(_ATTEMPTS):
            try:
                view = self.ledger.session(self.principal, key, account_id=self.account_id)
                live, version = list(view.buffer), view.version
            except UnknownSession:
                live, version = [], self._version_if_absent(key)
            same = 0
            for message, event in zip(live, events, strict=False):
                if item_event(message.as_item()) != event:
                    break
                same += 1
            stale, fresh = [m.id for m in live[same:]], items[same:]
            try:
                if stale and fresh:
                    self.ledger.replace_tail(
                        self.principal, key, stale, fresh,
                        expected_version=version, account_id=self.account_id,
                    )  # fmt: skip
                elif stale:
                    self.ledger.remove_items(
                        self.principal, key, stale,
                        expected_version=version, account_id=self.account_id,
                    )  # fmt: skip
                elif fresh:
                    self.ledger.add_items(
                        self.principal, key, fresh,
                        expected_version=version, account_id=self.account_id,
                    )  # fmt: skip
                return
            except ConcurrencyConflict:
                continue
        raise ConcurrencyConflict(
            f"AG2 stream {key}: set_history lost {_ATTEMPTS} races with other writers in a row; "
            "nothing was recorded. Retry when the stream is quieter."
        )

    def _version_if_absent(self, key: str) -> int:
        """The version a session that is not live stands at: 0 if the key was never used,
        its last version if it was deleted (a write there starts it afresh)."""
        try:
            history = self.ledger.history(self.principal, key, account_id=self.account_id)
        except UnknownSession:
            return 0
        return history[-1].version if history else 0

    def _drop(self, stream_id: StreamId) -> None:
        drop_session(self.ledger, self.principal, stream_key(stream_id), self.account_id)


# ------------------------------------------------------------------ the item form
def event_item(event: BaseEvent) -> dict[str, Any]:
    """The ledger item of an AG2 event: its role and text, and its data (see the module)."""
    if not isinstance(event, BaseEvent):
        raise InvalidInput(f"AG2 history holds BaseEvent objects, not {type(event).__name__}.")
    cls = type(event)
    role, text = _role_and_text(event)
    try:
        data = json.loads(json.dumps(event.to_dict(), ensure_ascii=False))
    except (TypeError, ValueError) as error:
        raise InvalidInput(
            f"The AG2 event {cls.__name__} holds a value that is not JSON ({error}); "
            "store only events whose fields AG2 can serialise. Nothing was recorded."
        ) from None
    return {
        "type": "message",
        "role": role,
        "content": text,
        "ag2": {"module": cls.__module__, "qualname": cls.__qualname__, "data": data},
    }


def item_event(item: Mapping[str, Any]) -> BaseEvent:
    """The AG2 event an item holds (``UnknownEvent`` if its class is gone)."""
    stored = item.get("ag2")
    if not isinstance(stored, Mapping) or not isinstance(stored.get("data"), Mapping):
        return UnknownEvent(type_name="chatledger item", data=dict(item))
    data = dict(stored["data"])
    module, qualname = str(stored.get("module", "")), str(stored.get("qualname", ""))
    cls = _event_class(module, qualname)
    if cls is None:
        return UnknownEvent(type_name=f"{module}.{qualname}", data=data)
    return cls.from_dict(data)


def _event_class(module: str, qualname: str) -> type[BaseEvent] | None:
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError):
        return None
    return found if isinstance(found, type) and issubclass(found, BaseEvent) else None


def _role_and_text(event: BaseEvent) -> tuple[str, str]:
    """Who speaks in an AG2 event and what it says (empty for telemetry)."""
    if not getattr(type(event), "__conversational__", True):  # telemetry (UsageEvent, ...)
        return "system", ""
    if isinstance(event, ModelRequest):
        return "user", _inputs_text(event.parts)
    if isinstance(event, HumanMessage):
        return "user", _str(event.content)
    if isinstance(event, ModelResponse):
        lines = [event.message.content] if event.message and event.message.content else []
        lines += [_call_text(call) for call in event.tool_calls.calls]
        return "assistant", "\n".join(lines)
    if isinstance(event, ToolCallsEvent):
        return "assistant", "\n".join(_call_text(call) for call in event.calls)
    if isinstance(event, ToolCallEvent):
        return "assistant", _call_text(event)
    if isinstance(event, ToolResultsEvent):
        return "tool", "\n".join(_inputs_text(r.result.parts) for r in event.results)
    if isinstance(event, ToolResultEvent):
        return "tool", _inputs_text(event.result.parts)
    if isinstance(event, ModelMessage):
        return "assistant", _str(event.content)
    for attribute in ("content", "summary"):
        value = getattr(event, attribute, None)
        if isinstance(value, str):
            return "assistant", value
    return "assistant", ""


def _call_text(call: Any) -> str:
    return f"{_str(getattr(call, 'name', ''))}({_str(getattr(call, 'arguments', ''))})"


def _inputs_text(parts: Sequence[Input]) -> str:
    texts = []
    for part in parts or ():
        if isinstance(part, TextInput):
            texts.append(part.content)
        elif hasattr(part, "data") and not isinstance(part.data, bytes | bytearray):
            texts.append(str(part.data))
        else:
            texts.append(f"[{type(part).__name__}]")
    return "\n".join(texts)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
