"""The log order under concurrent writers: read models never skip, repeat or reorder an event.

On PostgreSQL writers append without a global lock, so transactions commit
in any order; the projector follows only the part of the log below the
oldest running transaction (``chatledger.adapters.schema.LogCursor``).
These tests hammer that: writer threads and processes on their own and on
shared sessions, "stragglers" whose appends commit late on purpose, and a
follower applying spans as they become final, all at once. Afterwards every
event must have been applied exactly once, in the log order (so each
session's events in version order), the read models must equal a rebuild,
and every chain must verify. A transaction left open elsewhere may delay
the read models, never break them. Everything also runs on SQLite, whose
single writer makes the order trivially right; the stragglers and the open
transaction are PostgreSQL's.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID

import psycopg
import pytest
from sqlalchemy import BigInteger, Column, Connection, MetaData, Table, Text, func, select, text
from typer.testing import CliRunner

from chatledger import AddedMessage, SessionLedger
from chatledger.adapters.migrations import SCHEMA_HEAD
from chatledger.adapters.sql_projector import EventLog, Projector
from chatledger.adapters.sql_read_models import (
    READ_MODELS,
    Span,
    SqlReadModel,
    dump_rows,
)
from chatledger.cli import app
from chatledger.read_models import ProjectionTimeout, ReadModels
from support import ADMIN, ALICE, BOB

JOIN_TIMEOUT = 120.0
TOOL = {"tool_name": "search", "prompt_tokens": 3, "completion_tokens": 2}

# ------------------------------------------------------- the applied log
_metadata = MetaData()
applied_table = Table(
    "test_applied_log",
    _metadata,
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("position", BigInteger, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("version", BigInteger, nullable=False),
)


class AppliedLog(SqlReadModel):
    """A read model of the tests: every event applied, in the order it was applied."""

    name = "test_applied_log"
    version = 1
    tables = (applied_table,)

    def apply(self, connection: Connection, span: Span) -> None:
        order = "tx_id, id" if span.by_transaction else "id"
        rows = connection.execute(
            text(
                f"SELECT id, originator_id, originator_version FROM {span.source} "
                f"WHERE {span.where()} ORDER BY {order}"
            ),
            span.bounds,
        ).all()
        start = connection.execute(select(func.count()).select_from(applied_table)).scalar_one()
        connection.execute(
            applied_table.insert(),
            [
                {"seq": start + i, "position": p, "session_id": UUID(str(s)).hex, "version": v}
                for i, (p, s, v) in enumerate(rows)
            ],
        )


def _projector(ledger: SessionLedger, batch_size: int) -> Projector:
    engine = ledger.core.store.event_recorder.engine
    models = [model() for model in READ_MODELS] + [AppliedLog()]
    projector = Projector(
        EventLog(engine, ledger.core.store.mapper), engine, models, batch_size=batch_size
    )
    projector.prepare()
    return projector


def _rows(projector: Projector) -> dict[str, Any]:
    with projector.engine.connect() as connection:
        found = {m.name: dump_rows(connection, m.name) for m in READ_MODELS}
        found["applied"] = connection.execute(
            select(
                applied_table.c.position, applied_table.c.session_id, applied_table.c.version
            ).order_by(applied_table.c.seq)
        ).all()
    return found


# ---------------------------------------------------------------- writers
def _write(ledger: SessionLedger, prefix: str, count: int, seed: int) -> list[tuple[str, Any]]:
    """Messages on an own session and on shared ones (tool calls, commits); the acknowledgements."""
    rng = random.Random(seed)
    done: list[tuple[str, Any]] = []
    for n in range(count):
        key = f"own-{prefix}" if rng.random() < 0.6 else f"shared-{rng.randrange(3)}"
        extra = {"tool_call": TOOL} if rng.random() < 0.3 else {}
        added = ledger.add_message(ALICE, key, "user", f"{prefix} {n}", **extra)
        done.append((key, added))
        if key.startswith("own") and rng.random() < 0.1:
            ledger.commit(ALICE, key)
    return done


def _straggle(ledger: SessionLedger, seed: int) -> None:
    """Make this ledger's appends commit late: the insert, then a pause, then the commit."""
    appender = ledger.core.store.event_recorder.postgres
    assert appender is not None
    insert = appender.insert
    rng = random.Random(seed)

    def late(cursor: Any, numbered: Any, *, draw: bool = False) -> list[int]:
        cursor.execute("BEGIN")
        try:
            drawn = insert(cursor, numbered, draw=draw)
        except BaseException:
            cursor.execute("ROLLBACK")
            raise
        time.sleep(rng.uniform(0.0, 0.05))  # others begin and commit meanwhile
        cursor.execute("COMMIT")
        return drawn

    appender.insert = late  # type: ignore[method-assign]


_PROCESS_WRITER = """
import json, random, sys
from chatledger import Principal, SessionLedger
url, prefix, count, seed = sys.argv[1:5]
actor = Principal(account_id="globex", user_id="bob", agent_id="helper")
ledger = SessionLedger(url)
print("READY", flush=True)
if sys.stdin.readline() != "go\\n":
    sys.exit(3)
rng = random.Random(int(seed))
done = []
for n in range(int(count)):
    key = f"own-{prefix}" if rng.random() < 0.6 else f"shared-{rng.randrange(3)}"
    added = ledger.add_message(actor, key, "user", f"{prefix} {n}")
    done.append([key, added.model_dump(mode="json")])
ledger.close()
print(json.dumps(done), flush=True)
"""


def _start_processes(url: str, count: int, each: int) -> list[subprocess.Popen[str]]:
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _PROCESS_WRITER, url, f"p{i}", str(each), str(i)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    for process in processes:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "READY", process.stderr
    return processes


def _hammer(
    make_ledger: Callable[..., SessionLedger],
    database_url: str,
    backend: str,
    *,
    threads: int,
    stragglers: int,
    processes: int,
    each: int,
) -> None:
    reader = make_ledger()
    reader.add_message(ALICE, "first", "user", "the log is not empty")
    projector = _projector(reader, batch_size=7)
    follower = threading.Thread(target=projector.run, kwargs={"max_interval": 0.01}, daemon=True)
    follower.start()
    spawned = _start_processes(database_url, processes, each)
    writers = [make_ledger() for _ in range(threads + stragglers)]
    if backend == "postgres":
        for index, ledger in enumerate(writers[threads:]):
            _straggle(ledger, seed=index)
    acknowledged: list[tuple[str, Any]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(writers) + 1)

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=JOIN_TIMEOUT)
            acknowledged.extend(_write(writers[index], f"t{index}", each, seed=index))
        except BaseException as error:
            errors.append(error)

    workers = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(writers))]
    for worker in workers:
        worker.start()
    barrier.wait(timeout=JOIN_TIMEOUT)
    for process in spawned:  # released with the threads
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    try:
        for worker in workers:
            worker.join(timeout=JOIN_TIMEOUT)
        for process in spawned:
            out, err = process.communicate(timeout=JOIN_TIMEOUT)
            assert process.returncode == 0, err
            for key, added in json.loads(out.strip().splitlines()[-1]):
                acknowledged.append((key, AddedMessage.model_validate(added)))
    finally:
        for process in spawned:
            if process.poll() is None:
                process.kill()
        projector.stop()
        follower.join(timeout=JOIN_TIMEOUT)
    assert not errors, errors[0]
    assert not any(w.is_alive() for w in workers) and not follower.is_alive()
    assert projector.last_error is None
    projector.catch_up(settle=10)

    # Every event applied exactly once, in the log order; each session in version order.
    engine = reader.core.store.event_recorder.engine
    order = "tx_id, id" if backend == "postgres" else "id"
    with engine.connect() as connection:
        log = connection.execute(
            text(
                "SELECT id, originator_id, originator_version FROM chatledger_events "
                f"ORDER BY {order}"
            )
        ).all()
    incremental = _rows(projector)
    applied = incremental["applied"]
    assert [a.position for a in applied] == [r.id for r in log], "not applied once each, in order"
    versions: dict[str, list[int]] = defaultdict(list)
    for entry in applied:
        versions[entry.session_id].append(entry.version)
    for session, seen in versions.items():
        assert seen == list(range(1, len(seen) + 1)), f"session {session} applied as {seen}"
    # Every acknowledged message is in its session at its version, positions unique.
    by_position = {r.id: (UUID(str(r.originator_id)).hex, r.originator_version) for r in log}
    assert len({added.position for _, added in acknowledged}) == len(acknowledged)
    for _key, added in acknowledged:
        assert by_position[added.position][1] == added.version
    assert len(acknowledged) == (threads + stragglers + processes) * each
    # The read models equal a rebuild, and every chain holds.
    projector.rebuild([m.name for m in READ_MODELS] + [AppliedLog.name], settle=10)
    assert _rows(projector) == incremental
    report = reader.verify(ADMIN, deep=True)
    assert report.ok, report.issues
    assert report.events_checked == len(log)


def test_concurrent_writers_and_a_follower_apply_every_event_once_in_log_order(
    make_ledger: Callable[..., SessionLedger], database_url: str, backend: str
) -> None:
    """Writers (threads, late committers, processes) and a follower: once each, in order."""
    _hammer(make_ledger, database_url, backend, threads=4, stragglers=3, processes=2, each=20)


@pytest.mark.slow
def test_concurrent_writers_and_a_follower_apply_every_event_once_in_log_order_heavy(
    make_ledger: Callable[..., SessionLedger], database_url: str, backend: str
) -> None:
    """Sixteen threads, four late committers, four processes, 80 appends each, a follower."""
    _hammer(make_ledger, database_url, backend, threads=16, stragglers=4, processes=4, each=80)


# ----------------------------------------------------- transactions left open
@pytest.fixture
def open_transaction(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection to the test's schema, in a transaction that holds a transaction id."""
    from sqlalchemy.engine import make_url

    parsed = make_url(database_url)
    schema = database_url.rsplit("search_path%3D", 1)[-1].split("&", 1)[0]
    with psycopg.connect(
        f"host={parsed.host} port={parsed.port or 5432} dbname={parsed.database} "
        f"user={parsed.username} options=-csearch_path={schema}"
    ) as connection:
        connection.execute("SELECT pg_current_xact_id()")  # what any writing transaction holds
        yield connection


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)  # SQLite has one writer
def test_a_transaction_open_elsewhere_never_holds_the_read_models_back(
    make_ledger: Callable[..., SessionLedger], open_transaction: psycopg.Connection[Any]
) -> None:
    """A writing transaction that never touched the events table does not delay anything."""
    ledger = make_ledger()
    with ReadModels(ledger) as models:
        added = [ledger.add_message(ALICE, "a", "user", f"while open {n}") for n in range(3)]
        assert models.projector.catch_up() == 4  # no waiting: it cannot add an event
        models.wait_for_projections(added[-1].position, timeout=1)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_writer_left_open_delays_the_read_models_but_never_breaks_them(
    make_ledger: Callable[..., SessionLedger], open_transaction: psycopg.Connection[Any]
) -> None:
    """A writer idle in its transaction holds back events committed after it; then all apply."""
    ledger = make_ledger()
    models = ReadModels(ledger, poll_interval=0.01)
    open_transaction.execute("LOCK TABLE chatledger_events IN ROW EXCLUSIVE MODE")
    try:
        before = models.positions()
        added = [ledger.add_message(ALICE, "a", "user", f"during {n}") for n in range(3)]
        added.append(ledger.add_message(BOB, "b", "user", "also during"))
        assert models.projector.catch_up() == 0  # nothing final yet: nothing applied
        with pytest.raises(ProjectionTimeout):
            models.wait_for_projections(added[0].position, timeout=0.3)
        models.start()
        time.sleep(0.3)
        assert models.positions() == before  # the follower waits too, without an error
        assert models.last_error is None
        models.stop()
        # catch_up() waits for the open writer (up to busy_timeout), then applies all.
        caught: list[int] = []
        catching = threading.Thread(target=lambda: caught.append(models.catch_up()))
        catching.start()
        time.sleep(0.3)
        assert catching.is_alive() and caught == []
        open_transaction.rollback()
        catching.join(timeout=10)
        assert caught == [6]  # two Started, four messages
        models.wait_for_projections(added[-1].position, timeout=1)
        assert {(r.session_key, r.message_count) for r in models.working_set(ADMIN)} == {
            ("a", 3),
            ("b", 1),
        }
    finally:
        models.close()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_catch_up_gives_up_waiting_for_a_writer_after_busy_timeout(
    make_ledger: Callable[..., SessionLedger], open_transaction: psycopg.Connection[Any]
) -> None:
    """A writer open longer than busy_timeout: catch_up returns with what is final."""
    ledger = make_ledger(busy_timeout=0.5)
    with ReadModels(ledger) as models:
        open_transaction.execute("LOCK TABLE chatledger_events IN ROW EXCLUSIVE MODE")
        ledger.add_message(ALICE, "a", "user", "during")
        started = time.monotonic()
        assert models.catch_up() == 0
        assert 0.4 < time.monotonic() - started < 5
        open_transaction.rollback()
        assert models.catch_up() == 2


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)  # SQLite: no transaction ids
def test_a_database_restored_from_a_server_ahead_keeps_following_the_log(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Stored transaction ids ahead of the server's (a dump restored elsewhere): opening
    the ledger numbers new events after them, and the read models apply every event."""
    with SessionLedger(database_url) as ledger:
        for i in range(3):
            ledger.add_message(ALICE, "s1", "user", f"before the move {i}")
        with (
            ledger.core.store.event_recorder.engine.begin() as connection
        ):  # as if written by a server far ahead
            connection.execute(text("UPDATE chatledger_events SET tx_id = tx_id + 1000000000"))
    with caplog.at_level("WARNING", logger="chatledger.store"):
        ledger = SessionLedger(database_url)
    try:
        assert "restored or moved from another server" in caplog.text
        with ReadModels(ledger) as models:
            models.catch_up()
            ledger.add_message(BOB, "s2", "user", "after the move")
            ledger.add_message(ALICE, "s1", "user", "after the move")
            models.catch_up()
            assert set(models.positions().values()) == {models.head()}
            assert {r.session_key: r.message_count for r in models.working_set(ADMIN)} == {
                "s1": 4, "s2": 1,
            }  # fmt: skip
        with ledger.core.store.event_recorder.engine.connect() as connection:
            tx = (
                connection.execute(text("SELECT tx_id FROM chatledger_events ORDER BY id"))
                .scalars()
                .all()
            )
        assert min(tx[4:]) > max(tx[:4])  # the three new events come last in the log order
        assert ledger.verify(ADMIN).ok
    finally:
        ledger.close()
    caplog.clear()
    with caplog.at_level("WARNING", logger="chatledger.store"), SessionLedger(database_url):
        pass
    assert "restored or moved" not in caplog.text  # aligned once: reopening changes nothing


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_chatledger_migrate_aligns_a_restored_database_for_readers_without_ddl(
    database_url: str,
) -> None:
    """`chatledger migrate` on a current but restored database numbers new events after the
    stored ones, so ledgers opened without table creation keep their read models moving."""
    with SessionLedger(database_url) as ledger:
        ledger.add_message(ALICE, "s1", "user", "before the move")
        with ledger.core.store.event_recorder.engine.begin() as connection:
            connection.execute(text("UPDATE chatledger_events SET tx_id = tx_id + 1000000000"))
    result = CliRunner().invoke(app, ["migrate", "--url", database_url, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "from": SCHEMA_HEAD, "to": SCHEMA_HEAD, "changed": False,
    }  # fmt: skip
    with SessionLedger(database_url, create_tables=False) as ledger, ReadModels(ledger) as models:
        ledger.add_message(ALICE, "s1", "user", "after the move")
        models.catch_up()
        assert set(models.positions().values()) == {models.head()} and models.head() == 3
