"""``ChatLedgerSessionService``: Google ADK's ``BaseSessionService`` kept in a chatledger ledger.

Identity: every ADK session lives in one tenant -- the principal's account,
or ``account_id`` for an admin -- and each ADK user is a user of the ledger:
the service writes as its principal with ``user_id`` set to the user's
pseudonym (``SessionLedger.pseudonym``), under the ledger key
``adk/<app_name>/<user pseudonym>/<session id pseudonym>``. So
``erase_user(principal, "<the ADK user id>")`` reaches every session, the
user's ``user:`` state and the pseudonyms themselves, and no key, scope name or
actor field holds the ADK user id or session id (the session's own state keeps
them, encrypted like all content, for ``list_sessions``). ADK's state prefixes
map onto chatledger's state: plain keys are the session's own state; ``app:``
keys live in the shared scope ``app:<app_name>`` (the account's) and ``user:``
keys in ``user:<app_name>:<user pseudonym>`` (the user's: erased with them),
written in the same transaction as the event that changes them; ``temp:`` keys
are applied to the in-memory session only and never recorded.

Each ADK ``Event`` is one item of the session's live buffer, its JSON
(``model_dump(mode="json", exclude_none=True)``) kept exactly, so
``get_session`` rebuilds events equal to those appended. Stale sessions: the
service remembers the ledger version each ``Session`` object it returned was
read at; ``append_event`` writes with ``expected_version`` and raises ADK's
``StaleSessionError`` when the stored session moved on (another writer,
process or service instance appended first). A session object this service
did not hand out is checked the way ADK's database service checks one: its
newest event must be the stored newest event. Deleting records a ``Deleted``
event. An erased session is gone for ADK: ``get_session`` returns ``None``,
``append_event`` raises ``SessionNotFoundError``.

Requires ``pip install 'chatledger[adk]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.metadata
import json
import re
import uuid
import weakref
from typing import Any
from urllib.parse import quote

from chatledger import (
    AsyncSessionLedger,
    ConcurrencyConflict,
    InvalidInput,
    Principal,
    SessionErased,
    SessionLedger,
    SessionView,
    UnknownSession,
)

MIN_ADK = (2, 13)
"""The oldest google-adk release whose session-service contract this service implements."""

try:
    _adk_version = importlib.metadata.version("google-adk")
except importlib.metadata.PackageNotFoundError as missing:  # pragma: no cover - without the SDK
    raise ImportError(
        "chatledger.integrations.adk needs Google's Agent Development Kit: "
        "pip install 'chatledger[adk]'"
    ) from missing
if tuple(int(n) for n in re.findall(r"\d+", _adk_version)[:2]) < MIN_ADK:
    raise ImportError(
        f"chatledger.integrations.adk needs google-adk >= {MIN_ADK[0]}.{MIN_ADK[1]}, but "
        f"google-adk {_adk_version} is installed: pip install 'chatledger[adk]' to upgrade it"
    )

try:
    from google.adk.errors import StaleSessionError
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events.event import Event
    from google.adk.sessions import BaseSessionService, Session, State
    from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
except ImportError as missing:  # pragma: no cover - exercised only without the SDK
    raise ImportError(
        "chatledger.integrations.adk needs Google's Agent Development Kit: "
        "pip install 'chatledger[adk]'"
    ) from missing

__all__ = ["ChatLedgerSessionService"]

KEY_PREFIX = "adk/"
IDENTITY = "chatledger.adk"
"""The session state key holding the ADK identity (app, user and session id), which the
ledger key only names by pseudonyms; never shown in an ADK ``Session``'s state."""
_PAGE = 1000


def _app_scope(app_name: str) -> str:
    return f"app:{quote(app_name, safe='')}"


class _User:
    """One ADK user as the ledger knows them: the principal that writes for them, and the
    pseudonyms naming their keys."""

    def __init__(self, principal: Principal, app_name: str) -> None:
        self.principal = principal
        self.prefix = KEY_PREFIX + quote(app_name, safe="") + "/" + principal.user_id + "/"
        self.scope = f"user:{quote(app_name, safe='')}:{principal.user_id}"


class ChatLedgerSessionService(BaseSessionService):
    """ADK sessions, events and state in a chatledger ledger (see the module docstring)."""

    def __init__(
        self,
        ledger: AsyncSessionLedger | SessionLedger,
        principal: Principal,
        *,
        account_id: str | None = None,
    ) -> None:
        if not isinstance(ledger, AsyncSessionLedger | SessionLedger):
            raise InvalidInput("ledger must be a SessionLedger or an AsyncSessionLedger.")
        self.ledger = (
            ledger if isinstance(ledger, AsyncSessionLedger) else AsyncSessionLedger(ledger)
        )
        self.principal = principal
        self.account_id = account_id
        # id(session object) -> (a weak reference to it, the ledger version it reflects)
        self._versions: dict[int, tuple[weakref.ref[Session], int]] = {}

    async def ledger_key(self, app_name: str, user_id: str, session_id: str) -> str:
        """The ledger key of an ADK session: ``adk/<app>/<user pseudonym>/<session pseudonym>``
        (for ledger calls such as ``history``, ``session(at_version=...)`` or ``verify``)."""
        user = await self._user(app_name, user_id)
        return user.prefix + await self._pseudonym(user_id, session_id)

    async def _user(self, app_name: str, user_id: str) -> _User:
        if not isinstance(user_id, str) or not user_id:
            raise InvalidInput("An ADK user_id must be a non-empty str.")
        alias = await self._pseudonym(user_id, None)
        return _User(self.principal.model_copy(update={"user_id": alias}), app_name)

    async def _pseudonym(self, user_id: str, value: str | None) -> str:
        return await self.ledger.pseudonym(
            self.principal, user_id, value, account_id=self.account_id
        )

    # -------------------------------------------------------------- sessions
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Start a session (``AlreadyExistsError`` if ``session_id`` is taken), with its
        initial state -- ``app:``/``user:`` keys to their scopes -- in the same transaction."""
        session_id = session_id.strip() if session_id else None
        session_id = session_id or str(uuid.uuid4())
        user = await self._user(app_name, user_id)
        key = user.prefix + await self._pseudonym(user_id, session_id)
        own, shared = _split_state(app_name, user.scope, state or {})
        own[IDENTITY] = {"app_name": app_name, "user_id": user_id, "session_id": session_id}
        expected = 0  # a key never used
        for _ in range(3):
            try:
                await self.ledger.update_state(
                    user.principal, key, own, shared_state=shared,
                    expected_version=expected, account_id=self.account_id,
                )  # fmt: skip
                break
            except ConcurrencyConflict:
                expected = await self._version_if_deleted(key)
            except SessionErased:  # erased as its user was being erased: the id is spent
                raise AlreadyExistsError(f"Session with id {session_id} was erased.") from None
        else:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.")
        found = await self._load(key, user, config=None)
        if found is None:  # deleted again at once by another writer
            raise SessionNotFoundError(f"Session {session_id} not found.")
        return found

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with its events (``config``: the newest ``num_recent_events``, those
        at or after ``after_timestamp``) and merged state; ``None`` if it does not exist (or
        was erased)."""
        user = await self._user(app_name, user_id)
        key = user.prefix + await self._pseudonym(user_id, session_id)
        return await self._load(key, user, config)

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions (of one user, or all), without events, oldest update first."""
        if user_id is not None:
            prefix = (await self._user(app_name, user_id)).prefix
        else:
            prefix = KEY_PREFIX + quote(app_name, safe="") + "/"
        keys = await asyncio.to_thread(self._keys_under, prefix)
        sessions = []
        for key in keys:
            found = await self._load(key, None, GetSessionConfig(num_recent_events=0))
            if found is not None and found.app_name == app_name:
                sessions.append(found)
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Record ``Deleted``; nothing happens for an unknown (or erased) session."""
        user = await self._user(app_name, user_id)
        key = user.prefix + await self._pseudonym(user_id, session_id)
        with contextlib.suppress(UnknownSession, SessionErased):
            await self.ledger.delete_session(user.principal, key, account_id=self.account_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's shared state (keys without the ``user:`` prefix)."""
        user = await self._user(app_name, user_id)
        found = await self.ledger.shared_state(
            user.principal, user.scope, account_id=self.account_id
        )
        return dict(found.state)

    # ---------------------------------------------------------------- events
    async def append_event(self, session: Session, event: Event) -> Event:
        """Record ``event`` with its state delta atomically; ``StaleSessionError`` if the
        stored session changed since ``session`` was read, ``SessionNotFoundError`` if gone."""
        if event.partial:
            return event
        delta = dict(event.actions.state_delta or {})
        temporary = {k: v for k, v in delta.items() if k.startswith(State.TEMP_PREFIX)}
        session.state.update(temporary)  # for this invocation only: never recorded
        if temporary:
            event.actions.state_delta = {k: v for k, v in delta.items() if k not in temporary}
        # A value JSON cannot hold (a function in state['callback']) is kept as its string
        # form, in the event and in the state, as ADK's database services keep it.
        item = event.model_dump(mode="json", exclude_none=True, fallback=str)
        delta = dict(item.get("actions", {}).get("state_delta", {}))
        user = await self._user(session.app_name, session.user_id)
        own, shared = _split_state(session.app_name, user.scope, delta)
        key = user.prefix + await self._pseudonym(session.user_id, session.id)
        expected = await self._expected_version(session, key)
        digest = hashlib.sha256(json.dumps(item, sort_keys=True).encode()).hexdigest()
        try:
            added = await self.ledger.add_items(
                user.principal, key, [item], state=own, shared_state=shared,
                expected_version=expected, idempotency_key=f"adk-event:{digest}",
                account_id=self.account_id,
            )  # fmt: skip
        except SessionErased:
            raise SessionNotFoundError(f"Session {session.id} not found (erased).") from None
        except ConcurrencyConflict:
            if not await self._exists(key):
                raise SessionNotFoundError(f"Session {session.id} not found.") from None
            raise StaleSessionError(
                "The session has been modified in storage since it was loaded. "
                "Please reload the session before appending more events."
            ) from None
        if added[-1].version <= expected:  # a re-delivery of a recorded event: no change
            return event
        await super().append_event(session, event)  # the in-memory session, as ADK does it
        session.last_update_time = event.timestamp
        self._remember(session, added[-1].version + (1 if own else 0))
        return event

    # --------------------------------------------------------------- helpers
    async def _load(
        self, key: str, user: _User | None, config: GetSessionConfig | None
    ) -> Session | None:
        """The ADK session stored under ``key`` (``None``: there is none, or it is erased);
        ``user`` if the caller knows whose it is (else its stored identity says)."""
        try:
            view: SessionView = await self.ledger.session(
                self.principal, key, account_id=self.account_id
            )
        except UnknownSession:
            return None
        if view.status == "erased":
            return None  # its content is gone: for ADK the session no longer exists
        identity = view.state.get(IDENTITY)
        if not isinstance(identity, dict):
            return None  # not a session this service made
        app_name, user_id = str(identity["app_name"]), str(identity["user_id"])
        if user is None:
            user = await self._user(app_name, user_id)
        events = [Event.model_validate(m.as_item()) for m in view.buffer]
        if config is not None and config.num_recent_events is not None:
            events = (
                events[len(events) - config.num_recent_events :] if config.num_recent_events else []
            )
        if config is not None and config.after_timestamp is not None:
            events = [e for e in events if e.timestamp >= config.after_timestamp]
        state = {k: v for k, v in view.state.items() if k != IDENTITY}
        for scope, prefix in (
            (_app_scope(app_name), State.APP_PREFIX),
            (user.scope, State.USER_PREFIX),
        ):
            shared = await self.ledger.shared_state(
                self.principal, scope, account_id=self.account_id
            )
            state.update({prefix + name: value for name, value in shared.state.items()})
        newest = view.buffer[-1].as_item().get("timestamp") if view.buffer else None
        found = Session(
            id=str(identity["session_id"]), app_name=app_name, user_id=user_id, state=state,
            events=events,
            last_update_time=newest if isinstance(newest, float) else view.created_at.timestamp(),
        )  # fmt: skip
        self._remember(found, view.version)
        return found

    def _remember(self, session: Session, version: int) -> None:
        ident = id(session)
        self._versions[ident] = (
            weakref.ref(session, lambda _: self._versions.pop(ident, None)),
            version,
        )

    async def _expected_version(self, session: Session, key: str) -> int:
        """The version ``session`` reflects: remembered, or (for an object this service did not
        hand out) the stored version if its newest event is the stored newest event."""
        remembered = self._versions.get(id(session))
        if remembered is not None and remembered[0]() is session:
            return remembered[1]
        try:
            view = await self.ledger.session(self.principal, key, account_id=self.account_id)
        except UnknownSession:
            raise SessionNotFoundError(f"Session {session.id} not found.") from None
        if view.status == "erased":
            raise SessionNotFoundError(f"Session {session.id} not found (erased).")
        stored = view.buffer[-1].as_item().get("id") if view.buffer else None
        if stored != (session.events[-1].id if session.events else None):
            raise StaleSessionError(
                "The session has been modified in storage since it was loaded. "
                "Please reload the session before appending more events."
            )
        return view.version

    async def _exists(self, key: str) -> bool:
        """Whether a live (not deleted, not erased) session is stored under ``key``."""
        try:
            view = await self.ledger.session(self.principal, key, account_id=self.account_id)
        except UnknownSession:
            return False
        return view.status != "erased"

    async def _version_if_deleted(self, key: str) -> int:
        """The version of a deleted session under ``key`` (to start it afresh there);
        ``AlreadyExistsError`` if it is live."""
        if await self._exists(key):
            raise AlreadyExistsError(f"Session {key} already exists.")
        history = await self.ledger.history(self.principal, key, account_id=self.account_id)
        return history[-1].version

    def _keys_under(self, prefix: str) -> list[str]:
        """Keys of the live sessions starting with ``prefix`` (the read models caught up)."""
        models = self.ledger.ledger.read_models
        models.catch_up()
        keys: list[str] = []
        offset = 0
        while True:
            rows = models.working_set(
                self.principal, account_id=self.account_id, include_evicted=True,
                search=prefix[:256], limit=_PAGE, offset=offset,
            )  # fmt: skip
            keys += [r.session_key for r in rows if r.session_key.startswith(prefix)]
            if len(rows) < _PAGE:
                return keys
            offset += _PAGE


def _split_state(
    app_name: str, user_scope: str, delta: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """ADK state (prefixed keys) as (the session's own changes, changes of shared scopes)."""
    own: dict[str, Any] = {}
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    for name, value in delta.items():
        if name.startswith(State.APP_PREFIX):
            app[name.removeprefix(State.APP_PREFIX)] = value
        elif name.startswith(State.USER_PREFIX):
            user[name.removeprefix(State.USER_PREFIX)] = value
        elif not name.startswith(State.TEMP_PREFIX):
            own[name] = value
    shared = {}
    if app:
        shared[_app_scope(app_name)] = app
    if user:
        shared[user_scope] = user
    return own, shared
