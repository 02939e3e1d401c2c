"""Registry retention: what closing or evicting a session records (``on_close`` /
``on_evict``), and the warning when kept history lives only in memory."""

from __future__ import annotations

import warnings

import pytest

from chatledger import InvalidSettings, SessionLedger, UnknownSession
from chatledger.registry import RegistryConfig, SessionRegistry
from support import ALICE, Ticker, run_scenario

run = run_scenario


def types(ledger: SessionLedger, key: str) -> list[str]:
    return [e.type for e in ledger.history(ALICE, key)]


def test_close_with_delete_records_deleted_and_the_id_starts_afresh(
    ledger: SessionLedger,
) -> None:
    """on_close="delete": close() records Deleted; the session leaves the working set and
    adopting its id starts an empty session (the old history stays readable)."""

    async def scenario() -> None:
        registry = SessionRegistry(ledger, ALICE, on_close="delete")
        live = await registry.create(cwd="/srv")
        async with live.turn():
            await live.add_message("user", "my card number is 4111")
        await registry.close(live.session_id)
        assert types(ledger, live.session_id) == ["Started", "MessageAdded", "Deleted"]
        with pytest.raises(UnknownSession, match="deleted"):
            ledger.session(ALICE, live.session_id)
        ledger.read_models.catch_up()
        assert [r.session_key for r in ledger.working_set(ALICE)] == []
        back, adopted = await registry.get_or_adopt(live.session_id)
        assert adopted and (await back.view()).message_count == 0
        assert types(ledger, live.session_id)[-2:] == ["Deleted", "Restarted"]

    run(scenario())


def test_close_keeps_by_default(ledger: SessionLedger) -> None:
    """The default on_close="keep" records Closed, and adoption brings the buffer back."""

    async def scenario() -> None:
        registry = SessionRegistry(ledger, ALICE)
        live = await registry.create()
        async with live.turn():
            await live.add_message("user", "keep me")
        await registry.close(live.session_id)
        assert types(ledger, live.session_id)[-1] == "Closed"
        back, _ = await registry.get_or_adopt(live.session_id)
        assert (await back.view()).message_count == 1

    run(scenario())


def test_ttl_eviction_with_delete_records_deleted(ledger: SessionLedger) -> None:
    """on_evict="delete": an expired session is recorded Deleted, not Evicted; close() of
    another still records Closed (the two settings are independent)."""

    async def scenario() -> None:
        clock = Ticker()
        registry = SessionRegistry(ledger, ALICE, ttl=10, clock=clock, on_evict="delete")
        idle = await registry.create()
        async with idle.turn():
            await idle.add_message("user", "forget me when idle")
        other = await registry.create()
        clock.advance(10)
        assert await registry.sweep() == 2
        assert types(ledger, idle.session_id) == ["Started", "MessageAdded", "Deleted"]
        fresh = await registry.create()
        await registry.close(fresh.session_id)
        assert types(ledger, fresh.session_id)[-1] == "Closed"
        assert types(ledger, other.session_id)[-1] == "Deleted"

    run(scenario())


def test_lru_eviction_with_delete_records_deleted(ledger: SessionLedger) -> None:
    """on_evict="delete" applies to the cap's LRU evictions too."""

    async def scenario() -> None:
        registry = SessionRegistry(ledger, ALICE, max_sessions=1, on_evict="delete")
        first = await registry.create()
        await registry.create()
        assert first.session_id not in registry
        assert types(ledger, first.session_id)[-1] == "Deleted"

    run(scenario())


@pytest.mark.parametrize("setting", ["on_close", "on_evict"])
def test_an_unknown_retention_is_invalid_settings(ledger: SessionLedger, setting: str) -> None:
    """Only 'keep' and 'delete' are accepted, by the registry and by RegistryConfig."""
    with pytest.raises(InvalidSettings, match="'keep' or 'delete'"):
        SessionRegistry(ledger, ALICE, **{setting: "drop"})
    with pytest.raises(ValueError):
        RegistryConfig(**{setting: "drop"})


def test_kept_history_in_an_in_memory_ledger_warns() -> None:
    """Keeping history in in-memory SQLite warns (it dies with the process); deleting on both
    close and eviction, or a file database, does not."""
    ledger = SessionLedger(url="sqlite://")
    try:
        with pytest.warns(RuntimeWarning, match="in-memory SQLite"):
            SessionRegistry(ledger, ALICE)
        with pytest.warns(RuntimeWarning, match="in-memory SQLite"):
            SessionRegistry(ledger, ALICE, on_close="delete")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            SessionRegistry(ledger, ALICE, on_close="delete", on_evict="delete")
    finally:
        ledger.close()


def test_a_file_ledger_does_not_warn(ledger: SessionLedger) -> None:
    """Persistent ledgers (SQLite file, PostgreSQL) keep history without a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SessionRegistry(ledger, ALICE)
