"""``ChatLedgerSessionService``: Google ADK's session-service contract on SQLite and PostgreSQL.

ADK ships its own session tests only in its repository, so the public
contract of ``BaseSessionService`` is pinned here: create/get/list/delete,
``append_event`` with state deltas (session, ``app:``, ``user:`` and
``temp:`` keys), ``GetSessionConfig``, stale-session detection, and events
coming back equal to those appended. The history the ledger keeps (time
travel, verify) is pinned too.
"""

from __future__ import annotations

import asyncio
import copy
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from chatledger import ERASED, AsyncSessionLedger, SessionLedger, UnknownSession
from erasure_support import stored_text
from support import ADMIN, ALICE, BOB

if os.environ.get("CHATLEDGER_REQUIRE_INTEGRATIONS", "") not in ("", "0"):
    pass  # CI installs ADK: a missing one is a failure there, not a skip
else:
    pytest.importorskip(
        "google.adk", reason="google-adk is not installed: pip install 'chatledger[adk]'"
    )

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event, EventActions
from google.adk.sessions import BaseSessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from chatledger.integrations.adk import ChatLedgerSessionService


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


@pytest.fixture
def service(ledger: SessionLedger) -> ChatLedgerSessionService:
    """The service on the test database, acting as ALICE (account ``acme``)."""
    return ChatLedgerSessionService(ledger, ALICE)


def user_event(text: str, *, at: float, **delta: Any) -> Event:
    return Event(
        invocation_id="inv-1",
        author="user",
        timestamp=at,
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=dict(delta)),
    )


def tool_events(at: float) -> list[Event]:
    call = types.FunctionCall(id="c1", name="lookup", args={"order": 7})
    answer = types.FunctionResponse(id="c1", name="lookup", response={"status": "shipped"})
    return [
        Event(invocation_id="inv-1", author="agent", timestamp=at,
              content=types.Content(role="model", parts=[types.Part(function_call=call)])),
        Event(invocation_id="inv-1", author="agent", timestamp=at + 1,
              content=types.Content(role="user", parts=[types.Part(function_response=answer)])),
    ]  # fmt: skip


def create(service: ChatLedgerSessionService, **kwargs: Any) -> Session:
    kwargs.setdefault("app_name", "shop")
    kwargs.setdefault("user_id", "ann")
    return run(service.create_session(**kwargs))


def get(service: ChatLedgerSessionService, session_id: str, **kwargs: Any) -> Session | None:
    return run(service.get_session(app_name="shop", user_id="ann", session_id=session_id, **kwargs))


def test_it_is_an_adk_session_service(service: ChatLedgerSessionService) -> None:
    """The class is a ``BaseSessionService`` (what ADK's Runner takes)."""
    assert isinstance(service, BaseSessionService)


def test_create_and_get_a_session_with_state_scopes(service: ChatLedgerSessionService) -> None:
    """Initial state: plain keys to the session, ``app:``/``user:`` to scopes, ``temp:`` nowhere."""
    state = {"cart": [1], "app:region": "eu", "user:name": "Ann", "temp:scratch": 1}
    created = create(service, state=state, session_id=" s1 ")
    assert (created.id, created.app_name, created.user_id) == ("s1", "shop", "ann")
    assert created.state == {"cart": [1], "app:region": "eu", "user:name": "Ann"}
    got = get(service, "s1")
    assert got is not None and got.state == created.state and got.events == []
    assert run(service.get_user_state(app_name="shop", user_id="ann")) == {"name": "Ann"}
    other = create(service, user_id="bob")
    assert other.state == {"app:region": "eu"}  # the app's scope is shared, the user's is not
    assert len(other.id) == 36  # a generated uuid


def test_a_taken_session_id_is_already_exists(service: ChatLedgerSessionService) -> None:
    """Creating an existing id raises ADK's ``AlreadyExistsError`` and changes nothing."""
    create(service, session_id="s1", state={"a": 1})
    with pytest.raises(AlreadyExistsError):
        create(service, session_id="s1", state={"a": 2})
    assert get(service, "s1").state == {"a": 1}  # type: ignore[union-attr]
    assert get(service, "missing") is None


def test_appended_events_come_back_equal(service: ChatLedgerSessionService) -> None:
    """Events of every part kind are rebuilt equal to the appended ones, in order."""
    session = create(service, session_id="s1")
    events = [user_event("Where is order 7?", at=100.0), *tool_events(101.0)]
    for event in events:
        assert run(service.append_event(session, event)) is event
    assert session.events == events
    got = get(service, "s1")
    assert got is not None and got.events == events
    assert got.last_update_time == 102.0


def test_state_deltas_are_applied_with_the_event(service: ChatLedgerSessionService) -> None:
    """A state delta changes the session, the app scope and the user scope; ``temp:`` keys
    reach the in-memory session only and are trimmed from the stored event."""
    session = create(service, session_id="s1")
    event = user_event("hi", at=100.0, step=1, **{"app:v": 2, "user:lang": "de", "temp:t": 3})
    run(service.append_event(session, event))
    assert session.state == {"step": 1, "app:v": 2, "user:lang": "de", "temp:t": 3}
    assert event.actions.state_delta == {"step": 1, "app:v": 2, "user:lang": "de"}
    got = get(service, "s1")
    assert got is not None and got.state == {"step": 1, "app:v": 2, "user:lang": "de"}
    assert got.events[0].actions.state_delta == {"step": 1, "app:v": 2, "user:lang": "de"}
    assert create(service, user_id="bob").state == {"app:v": 2}


def test_a_state_value_that_is_not_json_is_kept_as_its_string(
    service: ChatLedgerSessionService,
) -> None:
    """A function in a state delta is stored as its string form and the event is kept, as
    ADK's database services do (test_append_event_with_non_serializable_state_delta)."""
    session = create(service, session_id="s1")
    event = user_event("hi", at=100.0, ok=2, callback=lambda: 1, **{"user:hook": print})
    run(service.append_event(session, event))
    got = get(service, "s1")
    assert got is not None and len(got.events) == 1
    assert got.state["ok"] == 2
    assert isinstance(got.state["callback"], str) and "lambda" in got.state["callback"]
    assert got.state["user:hook"] == str(print)
    assert got.events[0].actions.state_delta["callback"] == got.state["callback"]


def test_an_adk_older_than_supported_says_which_is_installed_and_needed() -> None:
    """Importing the integration with google-adk 1.9.0 installed names both versions."""
    probe = (
        "import importlib.metadata as m\n"
        "real = m.version\n"
        "m.version = lambda name: '1.9.0' if name == 'google-adk' else real(name)\n"
        "try:\n"
        "    import chatledger.integrations.adk\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert "google-adk 1.9.0 is installed" in out and "needs google-adk >= 2.13" in out


def test_get_session_config_filters_events(service: ChatLedgerSessionService) -> None:
    """``num_recent_events`` keeps the newest events (0: none); ``after_timestamp`` those at
    or after it."""
    session = create(service, session_id="s1")
    events = [user_event(str(i), at=100.0 + i) for i in range(5)]
    for event in events:
        run(service.append_event(session, event))
    newest = get(service, "s1", config=GetSessionConfig(num_recent_events=2))
    assert newest is not None and newest.events == events[-2:]
    assert get(service, "s1", config=GetSessionConfig(num_recent_events=0)).events == []  # type: ignore[union-attr]
    later = get(service, "s1", config=GetSessionConfig(after_timestamp=102.0))
    assert later is not None and later.events == events[2:]


def test_partial_events_are_not_recorded(service: ChatLedgerSessionService) -> None:
    """A streaming ``partial`` event is returned and neither stored nor applied."""
    session = create(service, session_id="s1")
    partial = user_event("typing", at=100.0, x=1)
    partial.partial = True
    assert run(service.append_event(session, partial)) is partial
    assert session.events == [] and get(service, "s1").events == []  # type: ignore[union-attr]


def test_a_stale_session_cannot_append(service: ChatLedgerSessionService) -> None:
    """Appending through a session object read before another append is ``StaleSessionError``
    and records nothing; a reloaded one appends."""
    first = create(service, session_id="s1")
    second = get(service, "s1")
    assert second is not None
    run(service.append_event(first, user_event("one", at=100.0)))
    run(service.append_event(first, user_event("two", at=101.0, k=1)))  # its own writes: fine
    with pytest.raises(StaleSessionError):
        run(service.append_event(second, user_event("stale", at=102.0)))
    reloaded = get(service, "s1")
    assert reloaded is not None and [e.content.parts[0].text for e in reloaded.events] == [
        "one",
        "two",
    ]  # type: ignore[union-attr,index]
    run(service.append_event(reloaded, user_event("three", at=103.0)))
    assert len(get(service, "s1").events) == 3  # type: ignore[union-attr]


def test_an_eviction_makes_a_loaded_session_stale_and_a_reload_appends(
    service: ChatLedgerSessionService, ledger: SessionLedger
) -> None:
    """A ledger write outside ADK (here an eviction) moves the version: the loaded object is
    stale; get_session returns every event and the reloaded object appends."""
    loaded = create(service, session_id="s1")
    run(service.append_event(loaded, user_event("one", at=100.0)))
    ledger.evict(ALICE, run(service.ledger_key("shop", "ann", "s1")))
    with pytest.raises(StaleSessionError):
        run(service.append_event(loaded, user_event("two", at=101.0)))
    reloaded = get(service, "s1")
    assert reloaded is not None and len(reloaded.events) == 1
    run(service.append_event(reloaded, user_event("two", at=102.0)))
    assert len(get(service, "s1").events) == 2  # type: ignore[union-attr]


def test_the_ledger_reads_adk_events_text_from_their_parts(
    service: ChatLedgerSessionService, ledger: SessionLedger
) -> None:
    """Token estimates, context() and summaries see an ADK event's text, call and response."""
    session = create(service, session_id="s1")
    run(service.append_event(session, user_event("Where is order 7?", at=100.0)))
    for event in tool_events(at=101.0):
        run(service.append_event(session, event))
    buffer = ledger.session(ALICE, run(service.ledger_key("shop", "ann", "s1"))).buffer
    assert [(m.role, m.content) for m in buffer] == [
        ("user", "Where is order 7?"),
        ("assistant", 'lookup({"order":7})'),
        ("tool", '{"status":"shipped"}'),
    ]


def test_staleness_holds_across_service_instances_and_copies(
    ledger: SessionLedger, database_url: str
) -> None:
    """Another service (another process, another ledger) appending first makes a session stale;
    a copied session object is checked by its newest event."""
    mine = ChatLedgerSessionService(ledger, ALICE)
    theirs = ChatLedgerSessionService(SessionLedger(database_url), ALICE)
    try:
        session = create(mine, session_id="s1")
        run(mine.append_event(session, user_event("one", at=100.0)))
        copied = copy.deepcopy(session)
        run(mine.append_event(copied, user_event("two", at=101.0)))  # newest event matches
        other = run(theirs.get_session(app_name="shop", user_id="ann", session_id="s1"))
        run(theirs.append_event(other, user_event("three", at=102.0)))
        for stale in (session, copied):
            with pytest.raises(StaleSessionError):
                run(mine.append_event(stale, user_event("late", at=103.0)))
    finally:
        theirs.ledger.ledger.close()


def test_concurrent_appends_to_one_session_object_one_wins(
    service: ChatLedgerSessionService,
) -> None:
    """Two services racing on copies of one session: exactly one append lands."""
    create(service, session_id="s1")
    a, b = get(service, "s1"), get(service, "s1")

    async def race() -> list[Any]:
        return await asyncio.gather(
            service.append_event(a, user_event("a", at=100.0)),  # type: ignore[arg-type]
            service.append_event(b, user_event("b", at=100.0)),  # type: ignore[arg-type]
            return_exceptions=True,
        )

    outcomes = run(race())
    assert sum(isinstance(o, StaleSessionError) for o in outcomes) == 1
    assert len(get(service, "s1").events) == 1  # type: ignore[union-attr]


def test_redelivering_an_event_records_it_once(service: ChatLedgerSessionService) -> None:
    """Appending an equal event again (a retry) is a no-op, as in ADK's in-memory service."""
    session = create(service, session_id="s1")
    event = user_event("once", at=100.0, n=1)
    run(service.append_event(session, event))
    run(service.append_event(session, copy.deepcopy(event)))
    assert get(service, "s1").events == [event]  # type: ignore[union-attr]
    assert session.events == [event]


def test_list_sessions_by_app_and_user(service: ChatLedgerSessionService) -> None:
    """Listing gives the app's sessions (of one user or all) without events, merged state,
    oldest update first; other apps and deleted sessions are not listed."""
    ann1 = create(service, session_id="a1", state={"user:tier": "gold"})
    create(service, session_id="a/2")  # a '/' in an id cannot collide with another key
    create(service, user_id="bob", session_id="b1")
    create(service, app_name="other", session_id="o1")
    run(service.append_event(ann1, user_event("hi", at=4_000_000_000.0)))
    create(service, session_id="gone")
    run(service.delete_session(app_name="shop", user_id="ann", session_id="gone"))
    listed = run(service.list_sessions(app_name="shop", user_id="ann")).sessions
    assert [s.id for s in listed] == ["a/2", "a1"]
    assert all(s.events == [] for s in listed) and listed[1].state == {"user:tier": "gold"}
    everyone = run(service.list_sessions(app_name="shop")).sessions
    assert sorted((s.user_id, s.id) for s in everyone) == [
        ("ann", "a/2"),
        ("ann", "a1"),
        ("bob", "b1"),
    ]
    assert run(service.list_sessions(app_name="none")).sessions == []


def test_delete_keeps_the_history_and_frees_the_id(
    service: ChatLedgerSessionService, ledger: SessionLedger
) -> None:
    """A deleted session is gone for ADK (appends too) and for the service's reads of the
    ledger, but stays in an admin's audit; its id can be created afresh."""
    session = create(service, session_id="s1", state={"k": 1})
    run(service.append_event(session, user_event("remember me", at=100.0)))
    run(service.delete_session(app_name="shop", user_id="ann", session_id="s1"))
    run(service.delete_session(app_name="shop", user_id="ann", session_id="never"))
    assert get(service, "s1") is None
    with pytest.raises(SessionNotFoundError):
        run(service.append_event(session, user_event("after", at=101.0)))
    key = run(service.ledger_key("shop", "ann", "s1"))
    assert [e.type for e in ledger.history(ALICE, key)] == ["Deleted"]
    audit = ledger.history(ADMIN, key, account_id="acme")
    before = [e.version for e in audit if e.type == "MessageAdded"][-1]
    with pytest.raises(UnknownSession):
        ledger.session(ALICE, key, at_version=before)
    old = ledger.session(ADMIN, key, at_version=before, account_id="acme")
    assert "remember me" in old.buffer[0].as_item()["content"]["parts"][0]["text"]
    fresh = create(service, session_id="s1")
    assert fresh.state == {} and fresh.events == []
    assert ledger.verify(ALICE, key).ok


def test_sessions_are_kept_per_tenant(ledger: SessionLedger) -> None:
    """Two services acting for different accounts never see each other's sessions."""
    acme = ChatLedgerSessionService(AsyncSessionLedger(ledger), ALICE)
    globex = ChatLedgerSessionService(ledger, BOB)
    create(acme, session_id="s1", state={"app:x": 1})
    assert run(globex.get_session(app_name="shop", user_id="ann", session_id="s1")) is None
    assert create(globex, session_id="s1").state == {}


# ------------------------------------------------------------- erasure
ANN = "ann.lee@example.com"  # an identifier that must not stay readable


def test_erasing_one_adk_user_erases_their_sessions_state_and_identifiers(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """erase_user(principal, "<ADK user id>") erases that user's sessions and user: state,
    and no key, scope name, actor or other stored field names the user in the clear; other
    ADK users, app: state and the service's own user are untouched; afterwards ADK sees the
    sessions as gone and the user can start afresh."""
    ledger = make_ledger(encryption=True, busy_timeout=1)
    service = ChatLedgerSessionService(ledger, ALICE)
    ann = create(service, user_id=ANN, session_id=f"{ANN}-s1", state={"user:tier": "gold"})
    run(service.append_event(ann, user_event("my card is 4111", at=100.0, **{"app:v": 2})))
    cid = create(service, user_id="cid", session_id="c1", state={"user:tier": "tin"})
    run(service.append_event(cid, user_event("hello", at=100.0)))
    ledger.add_message(ALICE, "alice-own", "user", "the service's own session")
    assert ANN not in stored_text(ledger)
    assert ledger.erase_user(ALICE, "alice").erased == ("alice-own",)  # not the ADK users
    result = ledger.erase_user(ALICE, ANN)
    assert len(result.erased) == 2 and all(ANN not in key for key in result.erased)
    assert ANN not in stored_text(ledger)
    (scope,) = [key for key in result.erased if key.startswith("~state:user:shop:")]
    assert ledger.shared_state(ALICE, scope.removeprefix("~state:")).state == {"tier": ERASED}
    (key,) = [key for key in result.erased if key.startswith("adk/shop/")]
    history = ledger.history(ALICE, key)
    assert history[-1].type == "Erased"
    assert all(e.actor.user_id.startswith("p") for e in history[:-1])  # the pseudonym
    assert "4111" not in ledger.session(ALICE, key).model_dump_json()
    gone = service.get_session(app_name="shop", user_id=ANN, session_id=f"{ANN}-s1")
    assert run(gone) is None  # gone for ADK: not a crash
    assert [s.id for s in run(service.list_sessions(app_name="shop")).sessions] == ["c1"]
    with pytest.raises(SessionNotFoundError):
        run(service.append_event(ann, user_event("again", at=101.0)))
    assert run(service.get_user_state(app_name="shop", user_id=ANN)) == {}
    kept = run(service.get_session(app_name="shop", user_id="cid", session_id="c1"))
    assert kept is not None and kept.state == {"user:tier": "tin", "app:v": 2}
    again = create(service, user_id=ANN, session_id=f"{ANN}-s1")
    assert again.events == [] and again.state == {"app:v": 2}
    assert ledger.verify(ALICE).ok


def test_an_erased_session_reads_as_not_found_everywhere_in_adk(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """A session erased on its own (erase of its ledger key) is None for get_session, left
    out of list_sessions, and SessionNotFoundError for append_event -- never pydantic's
    ValidationError."""
    ledger = make_ledger(encryption=True)
    service = ChatLedgerSessionService(ledger, ALICE)
    loaded = create(service, session_id="s1")
    run(service.append_event(loaded, user_event("secret", at=100.0)))
    ledger.erase(ALICE, run(service.ledger_key("shop", "ann", "s1")))
    assert get(service, "s1") is None
    assert run(service.list_sessions(app_name="shop", user_id="ann")).sessions == []
    with pytest.raises(SessionNotFoundError):
        run(service.append_event(loaded, user_event("more", at=101.0)))
    with pytest.raises(SessionNotFoundError):  # an object this service did not hand out
        run(service.append_event(copy.deepcopy(loaded), user_event("more", at=101.0)))
