"""Registry retention, after AG2's ACP ``SessionStore``: a close drops a session's history,
an eviction (LRU, TTL) and ``aclose()`` drop it unless ``retain_history``; ``"erase"``
destroys the content for sure; a kept history in in-memory SQLite warns. "Drop" is a
deletion that removes: members no longer read the old incarnation, admins audit it."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import pytest

from chatledger import ERASED, InvalidSettings, SessionLedger, UnknownSession
from chatledger.registry import RegistryConfig, SessionRegistry
from support import ADMIN, ALICE, Ticker, run_scenario

run = run_scenario


def types(ledger: SessionLedger, key: str, principal: object = ALICE) -> list[str]:
    account = "acme" if principal is ADMIN else None
    return [e.type for e in ledger.history(principal, key, account_id=account)]  # type: ignore[arg-type]


def contents(ledger: SessionLedger, key: str) -> list[str]:
    """The message texts an admin's audit reads in every incarnation of ``key``."""
    return [
        e.event.message.content  # type: ignore[attr-defined]
        for e in ledger.history(ADMIN, key, account_id="acme")
        if e.type == "MessageAdded"
    ]


def test_close_drops_the_history_by_default(ledger: SessionLedger) -> None:
    """close() records Deleted: the member's reads (LiveSession.history, ledger.history,
    session at a version, context) no longer return the messages; adopting the id starts
    an empty session; an admin's audit still has the events."""

    async def scenario() -> None:
        registry = SessionRegistry(ledger, ALICE)
        live = await registry.create(cwd="/srv")
        async with live.turn():
            await live.add_message("user", "my card number is 4111")
        await registry.close(live.session_id)
        assert types(ledger, live.session_id) == ["Deleted"]
        assert [e.type for e in await live.history()] == ["Deleted"]
        for read in (ledger.session, ledger.context):
            with pytest.raises(UnknownSession):
                read(ALICE, live.session_id, at_version=2)
        with pytest.raises(UnknownSession, match="deleted"):
            ledger.session(ALICE, live.session_id)
        ledger.read_models.catch_up()
        assert [r.session_key for r in ledger.working_set(ALICE)] == []
        back, adopted = await registry.get_or_adopt(live.session_id)
        assert adopted and (await back.view()).message_count == 0
        assert types(ledger, live.session_id) == ["Restarted"]
        assert "my card" not in (await back.prompt_context()).model_dump_json()
        assert types(ledger, live.session_id, ADMIN) == [
            "Started", "MessageAdded", "Deleted", "Restarted"
        ]  # fmt: skip
        await registry.aclose()

    run(scenario())


def test_close_drops_even_when_history_is_retained(ledger: SessionLedger) -> None:
    """retain_history keeps what is let go, not what is closed: close() still deletes;
    on_close="keep" is the explicit way to record Closed and keep the buffer."""

    async def scenario() -> None:
        retaining = SessionRegistry(ledger, ALICE, retain_history=True)
        live = await retaining.create()
        async with live.turn():
            await live.add_message("user", "gone on close")
        await retaining.close(live.session_id)
        assert types(ledger, live.session_id) == ["Deleted"]
        keeping = SessionRegistry(ledger, ALICE, on_close="keep")
        kept = await keeping.create()
        async with kept.turn():
            await kept.add_message("user", "keep me")
        await keeping.close(kept.session_id)
        assert types(ledger, kept.session_id)[-1] == "Closed"
        back, _ = await keeping.get_or_adopt(kept.session_id)
        assert (await back.view()).message_count == 1
        await keeping.aclose()

    run(scenario())


def test_eviction_drops_unless_history_is_retained(ledger: SessionLedger) -> None:
    """A TTL or LRU eviction records Deleted by default; with retain_history=True (or
    on_evict="keep") it records Evicted and adoption brings the session back."""

    async def scenario() -> None:
        clock = Ticker()
        dropping = SessionRegistry(ledger, ALICE, ttl=10, max_sessions=2, clock=clock)
        idle = await dropping.create()
        async with idle.turn():
            await idle.add_message("user", "forget me when idle")
        clock.advance(10)
        assert await dropping.sweep() == 1
        assert types(ledger, idle.session_id) == ["Deleted"]
        a, b = await dropping.create(), await dropping.create()
        await dropping.create()  # at the cap: a, the least recently used, is evicted
        assert types(ledger, a.session_id) == ["Deleted"] and b.is_live
        for retaining in (
            SessionRegistry(ledger, ALICE, ttl=10, clock=clock, retain_history=True),
            SessionRegistry(ledger, ALICE, ttl=10, clock=clock, on_evict="keep"),
        ):
            assert retaining.config.retain_history and retaining.config.on_evict == "keep"
            kept = await retaining.create()
            async with kept.turn():
                await kept.add_message("user", "keep me")
            clock.advance(10)
            await retaining.sweep()
            assert types(ledger, kept.session_id)[-1] == "Evicted"
            back, _ = await retaining.get_or_adopt(kept.session_id)
            assert (await back.view()).message_count == 1
            await retaining.aclose()
        await dropping.aclose()

    run(scenario())


def test_shutdown_drops_unless_history_is_retained(ledger: SessionLedger) -> None:
    """aclose() deletes every session it lets go, busy ones after their work unwound;
    with retain_history it records nothing."""

    async def scenario() -> None:
        dropping = SessionRegistry(ledger, ALICE)
        live = await dropping.create()
        async with live.turn():
            await live.add_message("user", "shut down")
        await dropping.aclose()
        assert types(ledger, live.session_id) == ["Deleted"] and len(dropping) == 0
        retaining = SessionRegistry(ledger, ALICE, retain_history=True)
        kept = await retaining.create()
        async with kept.turn():
            await kept.add_message("user", "stay")
        await retaining.aclose()
        assert types(ledger, kept.session_id) == ["Started", "MessageAdded"]

    run(scenario())


def test_erase_destroys_the_content_and_keeps_the_audit_trail(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """on_close/on_evict="erase" (encryption on): the deleted incarnation's keys are destroyed
    -- an admin's audit shows its events, their content erased -- and the id starts afresh."""
    ledger = make_ledger(encryption=True)

    async def scenario() -> None:
        clock = Ticker()
        registry = SessionRegistry(
            ledger, ALICE, ttl=10, clock=clock, on_close="erase", on_evict="erase"
        )
        closed, idle = await registry.create(), await registry.create()
        for live in (closed, idle):
            async with live.turn():
                await live.add_message("user", "my card number is 4111")
        await registry.close(closed.session_id)
        clock.advance(10)
        await registry.sweep()
        for live in (closed, idle):
            assert types(ledger, live.session_id) == ["Deleted"]
            assert types(ledger, live.session_id, ADMIN)[-2:] == ["Erased", "Deleted"]
            assert contents(ledger, live.session_id) == [ERASED]
        back, _ = await registry.get_or_adopt(closed.session_id)
        async with back.turn():
            await back.add_message("user", "a new start")
        assert contents(ledger, closed.session_id) == [ERASED, "a new start"]
        await registry.aclose()
        assert ledger.verify(ALICE).ok

    run(scenario())


def test_erase_needs_an_encrypted_ledger(make_ledger: Callable[..., SessionLedger]) -> None:
    """A registry to "erase" on a ledger that cannot destroy a session's content (encryption
    off, or one key per user) is InvalidSettings when built; "delete" is accepted."""
    for ledger in (make_ledger(), make_ledger(encryption=True, key_scope="user")):
        for setting in ("on_close", "on_evict"):
            with pytest.raises(InvalidSettings, match="encryption"):
                SessionRegistry(ledger, ALICE, **{setting: "erase"})
        SessionRegistry(ledger, ALICE, on_close="delete")


def test_with_encryption_a_plain_delete_destroys_the_content_too(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """delete_session with encryption on erases the deleted incarnation (Erased, scope
    incarnation): an admin reads its events without content; without encryption the admin
    still reads it, and erase=True refuses (nothing recorded)."""
    sealed = make_ledger(encryption=True)
    sealed.add_message(ALICE, "s1", "user", "secret one")
    sealed.delete_session(ALICE, "s1")
    assert contents(sealed, "s1") == [ERASED]
    plain = functools.partial(make_ledger, encryption=False)()
    plain.add_message(ALICE, "s2", "user", "secret two")
    version = plain.session(ALICE, "s2").version
    with pytest.raises(Exception, match="encryption"):
        plain.delete_session(ALICE, "s2", erase=True)
    assert plain.session(ALICE, "s2").version == version
    plain.delete_session(ALICE, "s2")
    assert contents(plain, "s2") == ["secret two"]  # the admin's audit: encryption was off
    assert types(plain, "s2") == ["Deleted"]  # the member's read: gone


@pytest.mark.parametrize("setting", ["on_close", "on_evict"])
def test_an_unknown_retention_is_invalid_settings(ledger: SessionLedger, setting: str) -> None:
    """Only 'keep', 'delete' and 'erase' are accepted, by the registry and RegistryConfig."""
    with pytest.raises(InvalidSettings, match="'keep', 'delete' or 'erase'"):
        SessionRegistry(ledger, ALICE, **{setting: "drop"})
    with pytest.raises(ValueError):
        RegistryConfig(**{setting: "drop"})


def test_retain_history_and_on_evict_must_agree(ledger: SessionLedger) -> None:
    """retain_history=True with an on_evict that drops (or False with "keep") is refused."""
    with pytest.raises(InvalidSettings, match="retain_history"):
        SessionRegistry(ledger, ALICE, retain_history=True, on_evict="delete")
    with pytest.raises(ValueError):
        RegistryConfig(retain_history=False, on_evict="keep")
    assert RegistryConfig().on_evict == "delete" and RegistryConfig().on_close == "delete"


def test_kept_history_in_an_in_memory_ledger_warns() -> None:
    """Keeping history in in-memory SQLite warns (it dies with the process); the default,
    which drops on close and eviction, or a file database, does not."""
    ledger = SessionLedger(url="sqlite://")
    try:
        with pytest.warns(RuntimeWarning, match="in-memory SQLite"):
            SessionRegistry(ledger, ALICE, retain_history=True)
        with pytest.warns(RuntimeWarning, match="in-memory SQLite"):
            SessionRegistry(ledger, ALICE, on_close="keep")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            SessionRegistry(ledger, ALICE)
    finally:
        ledger.close()


def test_a_file_ledger_does_not_warn(ledger: SessionLedger) -> None:
    """Persistent ledgers (SQLite file, PostgreSQL) keep history without a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SessionRegistry(ledger, ALICE, retain_history=True)
