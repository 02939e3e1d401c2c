"""A pytest plugin that runs the OpenAI Agents SDK's own session tests on chatledger.

Loaded with ``-p agents_sdk_plugin`` (this folder on ``PYTHONPATH``) while
``CHATLEDGER_AGENTS_SDK_STORE=chatledger``: before any test module is
imported it rebinds ``agents.SQLiteSession`` and ``agents.memory.SQLiteSession``
-- the names the SDK's test files construct -- to ``LedgerBackedSQLiteSession``,
a ``ChatLedgerSession`` with ``SQLiteSession``'s constructor shape. The SDK's
own modules keep their ``SQLiteSession`` (``agents.memory.sqlite_session``),
so code of the SDK that special-cases it treats the chatledger store as any
third-party store. With any other value (or none) the plugin does nothing:
the baseline run.

``db_path`` becomes a SQLite URL (``:memory:``, one new database per
session, becomes a fresh temporary file); sessions on the same file share
one ``SessionLedger``, closed with the last of them. With
``CHATLEDGER_AGENTS_SDK_URL`` set (a PostgreSQL URL), every session is kept
in that one database instead: each ``db_path`` is an account of its own
there (``:memory:`` a new one each time), so what the tests keep apart stays
apart.
"""

from __future__ import annotations

import os
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

from chatledger import Principal, SessionLedger
from chatledger.integrations.openai_agents import ChatLedgerSession

STORE = os.environ.get("CHATLEDGER_AGENTS_SDK_STORE", "sqlite")
SERVER_URL = os.environ.get("CHATLEDGER_AGENTS_SDK_URL", "")
PRINCIPAL = Principal(account_id="agents-sdk-tests", user_id="pytest", agent_id="runner")

_ledgers: dict[str, tuple[SessionLedger, int]] = {}
_ledgers_lock = threading.Lock()
_scratch = Path(tempfile.mkdtemp(prefix="chatledger-agents-sdk-"))


def _open(url: str) -> SessionLedger:
    with _ledgers_lock:
        ledger, count = _ledgers.get(url) or (SessionLedger(url), 0)
        _ledgers[url] = (ledger, count + 1)
        return ledger


def _release(url: str) -> None:
    with _ledgers_lock:
        ledger, count = _ledgers[url]
        if count > 1:
            _ledgers[url] = (ledger, count - 1)
            return
        del _ledgers[url]
    ledger.close()


class LedgerBackedSQLiteSession(ChatLedgerSession):
    """``SQLiteSession(session_id, db_path=..., sessions_table=..., messages_table=...,
    session_settings=...)``, kept in a chatledger ledger at ``db_path``."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        if str(db_path) == ":memory:":
            path = Path(tempfile.mkstemp(suffix=".db", dir=_scratch)[1])
            path.unlink()
        else:
            path = Path(db_path).expanduser().resolve()
        self.db_path = db_path
        self.url = SERVER_URL or f"sqlite:///{path}"
        self.closed = False
        principal = PRINCIPAL
        if SERVER_URL:  # one database for all: the file names an account in it
            account = uuid.uuid5(uuid.NAMESPACE_URL, str(path)).hex[:24]
            principal = Principal(account_id=f"sdk-{account}", user_id="pytest", agent_id="runner")
        super().__init__(session_id, _open(self.url), principal, session_settings=session_settings)

    def close(self) -> None:
        """Release the ledger (closed when no other session on the same file uses it)."""
        if not self.closed:
            self.closed = True
            _release(self.url)


def pytest_configure(config: Any) -> None:
    """Rebind the SDK's ``SQLiteSession`` names before the test modules import them."""
    if STORE != "chatledger":
        return
    import agents
    import agents.memory

    agents.SQLiteSession = LedgerBackedSQLiteSession  # type: ignore[misc]
    agents.memory.SQLiteSession = LedgerBackedSQLiteSession  # type: ignore[misc]


def pytest_unconfigure(config: Any) -> None:
    """Close the ledgers tests left open (before the interpreter tears its modules down)."""
    with _ledgers_lock:
        left = [ledger for ledger, _ in _ledgers.values()]
        _ledgers.clear()
    for ledger in left:
        ledger.close()


def pytest_report_header(config: Any) -> str:
    where = f" on {SERVER_URL.split('@')[-1]}" if SERVER_URL and STORE == "chatledger" else ""
    return f"session store under test: {STORE}{where} (chatledger plugin)"
