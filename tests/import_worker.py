"""An import meant to be killed: ``python tests/import_worker.py URL FILE STEP``.

Used by ``tests/test_transfer.py``. It imports the export ``FILE`` into the ledger at
``URL`` and, at ``STEP``, prints ``AT <STEP>`` (flushed) and waits -- for the parent's
SIGKILL:

- ``verified``  every line read, every chain and event checked; nothing written yet
- ``key``       the first of the file's data keys taken over by the key store
- ``events``    every event inserted, their transaction not yet committed
- ``written``   the events committed; ``import_`` has not returned

It prints ``DONE <events>`` if it ever gets through (it should not).
"""

from __future__ import annotations

import sqlite3
import sys
import threading
from typing import Any

from sqlalchemy import event

from chatledger import SessionLedger


def stop(step: str) -> None:
    sys.stdout.write(f"AT {step}\n")
    sys.stdout.flush()
    threading.Event().wait()  # until killed


def main() -> int:
    url, path, step = sys.argv[1:4]
    ledger = SessionLedger(url)
    store = ledger.core.store
    if step == "key":
        keys = store.keyring.store
        restore = keys.restore

        def restore_then_stop(record: Any, material: Any) -> None:
            restore(record, material)
            stop(step)

        keys.restore = restore_then_stop  # type: ignore[method-assign]
    if step == "events":
        _stop_before_the_events_commit(store.event_recorder.engine)

    def progress(phase: str, done: int, total: int) -> None:
        if step == "verified" and phase == "verify" and done == total:
            stop(step)
        if step == "written" and phase == "write":
            stop(step)

    with open(path, encoding="utf-8") as source:
        result = ledger.import_(source, progress=progress)
    print(f"DONE {result.events}", flush=True)
    return 0


def _stop_before_the_events_commit(engine: Any) -> None:
    """Stop when the transaction that inserted events is about to commit: SQLite, in the
    trace callback of the COMMIT statement (called before it runs); PostgreSQL, where
    psycopg leaves a transaction block without an error (before it sends COMMIT)."""
    if engine.dialect.name == "sqlite":

        @event.listens_for(engine, "checkout")
        def trace(dbapi_connection: sqlite3.Connection, *_: Any) -> None:
            inserted: list[bool] = []

            def statement(sql: str) -> None:
                if sql.startswith("INSERT INTO chatledger_events"):
                    inserted.append(True)
                elif sql.startswith("COMMIT") and inserted:
                    stop("events")

            dbapi_connection.set_trace_callback(statement)

        return
    import psycopg

    leave = psycopg.Transaction.__exit__

    def exit_then_stop(self: Any, kind: Any, value: Any, traceback: Any) -> Any:
        if kind is None:
            stop("events")
        return leave(self, kind, value, traceback)

    psycopg.Transaction.__exit__ = exit_then_stop  # type: ignore[method-assign]


if __name__ == "__main__":
    sys.exit(main())
