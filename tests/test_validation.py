"""Bad input gets a typed chatledger error with advice, and records nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from chatledger import (
    AccessDenied,
    ChatLedgerError,
    InvalidInput,
    InvalidSettings,
    Principal,
    SessionLedger,
    StoreUnavailable,
)
from support import ALICE, BOB

BAD_MESSAGES: list[tuple[str, dict[str, Any]]] = [
    ("unknown role", {"role": "robot", "content": "x"}),
    ("non-str content", {"role": "user", "content": 42}),
    ("bytes content", {"role": "user", "content": b"x"}),
    ("over-long content", {"role": "user", "content": "x" * 101}),
    ("bad tool call", {"role": "tool", "content": "x", "tool_call": {"status": "maybe"}}),
    (
        "negative tokens",
        {"role": "tool", "content": "x", "tool_call": {"tool_name": "t", "prompt_tokens": -1}},
    ),
    ("unknown field", {"role": "user", "content": "x", "colour": "red"}),
    ("control char in id", {"role": "user", "content": "x", "message_id": "a\nb"}),
    (
        "NUL in tool name",
        {"role": "tool", "content": "x", "tool_call": {"tool_name": "search\x00"}},
    ),
]


@pytest.mark.parametrize(("label", "message"), BAD_MESSAGES, ids=[b[0] for b in BAD_MESSAGES])
def test_bad_message_is_rejected_and_nothing_recorded(
    make_ledger: Callable[..., SessionLedger], label: str, message: dict[str, Any]
) -> None:
    """Each kind of invalid message raises InvalidInput; the session history is unchanged."""
    ledger = make_ledger(max_content_chars=100)
    ledger.add_message(ALICE, "s1", "user", "hello")
    before = ledger.history(ALICE, "s1")
    with pytest.raises(InvalidInput):
        ledger.add_messages(ALICE, "s1", [message])
    assert ledger.history(ALICE, "s1") == before


@pytest.mark.parametrize(
    "key", ["", "x" * 257, "tab\there", "nul\x00", "bell\x07", 17, None], ids=repr
)
def test_bad_session_key_is_rejected_before_anything_is_recorded(
    ledger: SessionLedger, key: Any
) -> None:
    """Empty, over-long, control-character or non-str keys raise InvalidInput; no session starts."""
    with pytest.raises(InvalidInput):
        ledger.add_message(ALICE, key, "user", "hi")
    assert ledger.core.store.recorder.max_notification_id() is None


def test_duplicate_message_id_in_buffer_is_rejected(ledger: SessionLedger) -> None:
    """Reusing the id of a live message raises InvalidInput and records nothing."""
    ledger.add_message(ALICE, "s1", "user", "one", message_id="m1")
    before = ledger.history(ALICE, "s1")
    with pytest.raises(InvalidInput, match="m1"):
        ledger.add_message(ALICE, "s1", "user", "two", message_id="m1")
    assert ledger.history(ALICE, "s1") == before


@pytest.mark.parametrize("budget", [-1, 1.5, "10", True])
def test_bad_token_budget_is_rejected(ledger: SessionLedger, budget: Any) -> None:
    """A negative or non-integer token budget raises InvalidInput."""
    ledger.add_message(ALICE, "s1", "user", "hi")
    with pytest.raises(InvalidInput):
        ledger.context(ALICE, "s1", budget)


def test_non_principal_is_rejected(ledger: SessionLedger) -> None:
    """Passing anything but a Principal raises InvalidInput."""
    with pytest.raises(InvalidInput):
        ledger.add_message("acme", "s1", "user", "hi")  # type: ignore[arg-type]


def test_invalid_principal_fields_raise_a_typed_error() -> None:
    """Principal validation failures surface as pydantic errors at construction (user code)."""
    with pytest.raises(ValueError):
        Principal(account_id="")
    with pytest.raises(ValueError):
        Principal(account_id="a\x00")


def test_member_cannot_touch_another_account(ledger: SessionLedger) -> None:
    """A member naming another account gets AccessDenied, and nothing is recorded there."""
    with pytest.raises(AccessDenied):
        ledger.add_message(ALICE, "s1", "user", "sneaky", account_id=BOB.account_id)
    ledger.add_message(BOB, "s1", "user", "mine")
    with pytest.raises(AccessDenied):
        ledger.session(ALICE, "s1", account_id=BOB.account_id)
    assert len(ledger.history(BOB, "s1")) == 2


def test_admin_may_name_another_account(ledger: SessionLedger) -> None:
    """An admin passing account_id acts on that tenant's session, recorded as the admin."""
    from support import ADMIN

    ledger.add_message(BOB, "s1", "user", "hello")
    ledger.add_message(ADMIN, "s1", "system", "policy note", account_id=BOB.account_id)
    events = ledger.history(BOB, "s1")
    assert events[-1].actor == ADMIN
    assert [m.content for m in ledger.session(BOB, "s1").buffer] == ["hello", "policy note"]


@pytest.mark.parametrize(
    "options",
    [
        {"snapshot_interval": 0},
        {"snapshot_interval": -5},
        {"compress_threshold": 0},
        {"merge_max_count": 1},
        {"sqlite_synchronous": "off"},
        {"busy_timeout": 0},
        {"no_such_setting": 1},
    ],
    ids=repr,
)
def test_invalid_settings_raise_invalid_settings(tmp_path: Any, options: dict[str, Any]) -> None:
    """Out-of-range or unknown settings raise InvalidSettings naming the problem."""
    with pytest.raises(InvalidSettings):
        SessionLedger(f"sqlite:///{tmp_path / 'x.db'}", **options)


def test_invalid_settings_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """CHATLEDGER_* variables are validated like arguments."""
    monkeypatch.setenv("CHATLEDGER_SNAPSHOT_INTERVAL", "many")
    with pytest.raises(InvalidSettings, match="snapshot_interval"):
        SessionLedger(f"sqlite:///{tmp_path / 'x.db'}")


@pytest.mark.parametrize("url", ["nosuchdb://x", "mysql://u@h/db", "not a url at all"])
def test_unsupported_urls_raise_invalid_settings(url: str) -> None:
    """Unparseable or unsupported database URLs raise InvalidSettings."""
    with pytest.raises(InvalidSettings):
        SessionLedger(url)


def test_unreachable_database_raises_store_unavailable(tmp_path: Any) -> None:
    """A database that cannot be opened raises StoreUnavailable, not a driver error."""
    with pytest.raises(StoreUnavailable):
        SessionLedger(f"sqlite:///{tmp_path / 'missing-dir' / 'x.db'}")
    with pytest.raises(StoreUnavailable):
        SessionLedger("postgresql+psycopg://nobody@127.0.0.1:1/none", busy_timeout=1)


def test_closed_ledger_refuses_work(ledger: SessionLedger) -> None:
    """After close(), calls raise StoreUnavailable instead of touching a disposed engine."""
    ledger.close()
    with pytest.raises(StoreUnavailable):
        ledger.add_message(ALICE, "s1", "user", "late")


def test_all_errors_share_one_base() -> None:
    """Every public error is a ChatLedgerError."""
    for error in (InvalidInput, InvalidSettings, AccessDenied, StoreUnavailable):
        assert issubclass(error, ChatLedgerError)
