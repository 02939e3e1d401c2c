"""A pytest plugin that runs AG2's own tests with ``LedgerStorage`` for ``MemoryStorage``.

Loaded with ``-p ag2_plugin`` (this folder on ``PYTHONPATH``) while
``CHATLEDGER_AG2_STORE=chatledger``: before any test module is imported it
rebinds ``MemoryStorage`` -- in ``ag2.history``, where the tests import it,
and in the AG2 modules that default to it (``ag2.stream``,
``ag2.acp.sessions``, ``ag2.mcp.sessions``) -- to ``LedgerBackedMemoryStorage``,
a ``LedgerStorage`` that takes no arguments. With any other value (or none)
the plugin does nothing: the baseline run.

All storages of one test process share one ledger (``CHATLEDGER_AG2_URL``, a
PostgreSQL URL, or else a fresh SQLite file); each storage is an account of
its own there, so two ``MemoryStorage()`` calls never see each other's
streams, as in AG2.
"""

from __future__ import annotations

import importlib
import os
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

from chatledger import Principal, SessionLedger
from chatledger.integrations.ag2 import LedgerStorage

STORE = os.environ.get("CHATLEDGER_AG2_STORE", "memory")
URL = os.environ.get("CHATLEDGER_AG2_URL", "")
REBOUND = ("ag2.history", "ag2.stream", "ag2.acp.sessions", "ag2.mcp.sessions")


class SharedLedger:
    """The one ledger of this test process, opened on first use."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ledger: SessionLedger | None = None

    def get(self) -> SessionLedger:
        with self.lock:
            if self.ledger is None:
                url = URL or "sqlite:///" + str(
                    Path(tempfile.mkdtemp(prefix="chatledger-ag2-")) / "ag2.db"
                )
                self.ledger = SessionLedger(url)
            return self.ledger

    def close(self) -> None:
        with self.lock:
            if self.ledger is not None:
                self.ledger.close()
                self.ledger = None


SHARED = SharedLedger()
CREATED = [0]  # LedgerBackedMemoryStorage instances made: the summary shows the swap happened


class LedgerBackedMemoryStorage(LedgerStorage):
    """``MemoryStorage()``: a fresh, empty history store -- here an account of its own in
    the process's ledger."""

    def __init__(self) -> None:
        principal = Principal(account_id=f"ag2-{uuid.uuid4().hex[:16]}", user_id="pytest")
        super().__init__(SHARED.get(), principal=principal)
        CREATED[0] += 1


def pytest_configure(config: Any) -> None:
    """Rebind AG2's ``MemoryStorage`` names before the test modules import them."""
    if STORE != "chatledger":
        return
    for name in REBOUND:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue  # an optional AG2 part that is not installed
        if hasattr(module, "MemoryStorage"):
            module.MemoryStorage = LedgerBackedMemoryStorage


def pytest_unconfigure(config: Any) -> None:
    SHARED.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if STORE == "chatledger":
        terminalreporter.write_line(
            f"LedgerStorage instances in place of MemoryStorage: {CREATED[0]}"
        )


def pytest_report_header(config: Any) -> str:
    where = f" on {URL.split('@')[-1]}" if URL and STORE == "chatledger" else ""
    return f"AG2 history storage under test: {STORE}{where} (chatledger plugin)"
