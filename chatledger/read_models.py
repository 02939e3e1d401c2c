"""``ReadModels``: the face of the read side -- persisted read models, kept exactly once.

Built from a ledger's core (its event store and mapper) and kept up to date
by a projector (``chatledger.adapters.sql_projector``) that applies every event
exactly once. Read models live in the ledger's database by default or in
another one (``url=`` / setting ``projections_url``). They are eventually
consistent: call ``catch_up()``, ``start()`` a follower thread, or run
``chatledger project --follow`` in another process; ``wait_for_projections``
reads your own writes. The queries (``ReadModelQueries``, bound here) read
them -- and the audit log and timelines straight from the store -- under the
tenant rule. ``evict_idle`` records ``Evicted`` events for idle sessions.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Protocol

from sqlalchemy import Engine

from chatledger.adapters.database import create_store_engine
from chatledger.adapters.sql_projector import EventLog, Progress, Projector
from chatledger.adapters.sql_read_models import READ_MODEL_NAMES, READ_MODELS
from chatledger.boundary import public
from chatledger.domain.access import check_principal
from chatledger.domain.failures import (
    ChatLedgerError,
    InvalidInput,
    ProjectionTimeout,
    StoreUnavailable,
)
from chatledger.domain.limits import check_aware, check_int, check_seconds
from chatledger.domain.timestamps import from_micros
from chatledger.domain.values import Principal
from chatledger.results import (
    ArchiveEntry,
    AuditEntry,
    ForkEntry,
    SkippedEvent,
    TimelineEntry,
    ToolUsage,
    WorkingSetEntry,
    WorkingSetOrder,
)
from chatledger.service import eviction
from chatledger.service.binding import delegate
from chatledger.service.core import Core
from chatledger.service.queries import ReadModelQueries
from chatledger.settings import MAX_WAIT_SECONDS

__all__ = [  # the rows are defined in chatledger.results; importable from here too
    "ArchiveEntry",
    "AuditEntry",
    "ForkEntry",
    "ProjectionTimeout",
    "ReadModels",
    "SkippedEvent",
    "TimelineEntry",
    "ToolUsage",
    "WorkingSetEntry",
    "WorkingSetOrder",
]
DEFAULT_POLL_INTERVAL = 0.05


class HasCore(Protocol):
    """Anything built on a ledger core (``SessionLedger``); ``ReadModels`` needs only that."""

    @property
    def core(self) -> Core: ...


class ReadModels:
    """Persisted, rebuildable read models of one ledger (see the module docstring)."""

    def __init__(
        self,
        ledger: HasCore,
        *,
        url: str | None = None,
        batch_size: int = 5000,
        poll_interval: float | None = None,
    ) -> None:
        core = ledger.core
        settings = core.settings
        self._core = core
        url = url if url is not None else settings.projections_url
        poll = poll_interval or settings.projections_poll_interval
        self.poll_interval: float = check_seconds(
            poll or DEFAULT_POLL_INTERVAL, "poll_interval", maximum=MAX_WAIT_SECONDS
        )
        if self.poll_interval <= 0:
            raise InvalidInput("poll_interval must be > 0 seconds.")
        check_int(batch_size, "batch_size", minimum=1, maximum=1_000_000)
        # How long catch_up() waits for a writer still open before events already
        # committed (PostgreSQL; see catch_up): as long as for a lock.
        self._settle = float(settings.busy_timeout)
        store = core.store.event_recorder.engine
        self._own_engine: Engine | None = None
        engine = store
        if url is not None and url != str(settings.url):
            engine = self._own_engine = create_store_engine(
                url, synchronous=settings.sqlite_synchronous, busy_timeout=settings.busy_timeout
            )
        self.projector = Projector(
            EventLog(store, core.store.mapper),
            engine,
            [model() for model in READ_MODELS],
            batch_size=batch_size,
        )
        self.queries = ReadModelQueries(engine, store, core.sessions)
        self._thread: threading.Thread | None = None
        self._closed = False
        try:
            self.reset_on_start: tuple[str, ...] = tuple(self.projector.prepare())
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Stop the follower thread (if any) and release a separate read-model database."""
        if self._closed:
            return
        self._closed = True
        self.stop()
        if self._own_engine is not None:
            self._own_engine.dispose()

    def __enter__(self) -> ReadModels:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def names(self) -> tuple[str, ...]:
        """The read models, in the order batches update them."""
        return READ_MODEL_NAMES

    @property
    def engine(self) -> Engine:
        """The database holding the read models (the ledger's, unless a URL was given)."""
        return self.projector.engine

    # ----------------------------------------------------------- processing
    @public
    def catch_up(self, *, progress: Progress | None = None) -> int:
        """Apply every event recorded so far to every read model; returns how many were read.

        On PostgreSQL an event committed while an older writer of the ledger
        is still open can be applied only once that writer ends, so that no
        event is ever skipped; this waits for such writers up to the ledger's
        ``busy_timeout``, then returns with what could be applied.
        """
        return self.projector.catch_up(progress=progress, settle=self._settle)

    @public
    def rebuild(self, name: str | None = None, *, progress: Progress | None = None) -> int:
        """Drop one read model (or all, ``name=None``) and replay the whole log into it."""
        names = list(READ_MODEL_NAMES) if name is None else [self.check_name(name)]
        return self.projector.rebuild(names, progress=progress, settle=self._settle)

    def check_name(self, name: str) -> str:
        """``name`` if it names a read model, else ``InvalidInput`` saying which do."""
        if name in READ_MODEL_NAMES:
            return name
        hint = ""
        if name == "audit":
            hint = (
                " The audit log is read straight from the event store (every event row "
                "carries its audit facts), so it is never behind and needs no rebuild."
            )
        raise InvalidInput(f"Unknown read model {name!r}; choose from {READ_MODEL_NAMES}.{hint}")

    @public
    def positions(self) -> dict[str, int]:
        """The position of the last event each read model has applied.

        Read models apply events in log order. On SQLite that is position
        order; on PostgreSQL it is commit order, so an event with a smaller
        position may still follow: ask ``wait_for_projections`` whether a
        given event was applied, rather than comparing positions.
        """
        return self.projector.positions()

    @public
    def head(self) -> int:
        """The position of the newest event in log order that the read models can apply.

        Once caught up, every read model's position equals it. (On PostgreSQL
        events committed after a writer that is still open are not counted
        yet; see ``catch_up``.)
        """
        return self.projector.log.head()

    def start(self) -> None:
        """Follow the log in a daemon thread until ``stop()``/``close()`` (idempotent)."""
        if self._closed:
            raise StoreUnavailable("These read models are closed; make new ones.")
        if self.running:
            return
        self.projector.resume()
        self._thread = threading.Thread(
            target=self.projector.run,
            kwargs={"max_interval": self.poll_interval},
            name="chatledger-projector",
            daemon=True,
        )
        self._thread.start()

    def run(self) -> None:
        """Follow the log in this thread until ``stop()`` is called (e.g. from a signal
        handler); if ``stop()`` was called before (and no ``start()`` since), return at once."""
        self.projector.run(max_interval=self.poll_interval)

    def stop(self) -> None:
        """Stop following (the batch in progress completes first)."""
        self.projector.stop()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    @property
    def running(self) -> bool:
        """Whether a follower thread of this object is running."""
        return self._thread is not None and self._thread.is_alive()

    @public
    def skipped(self) -> list[SkippedEvent]:
        """Events a read model skipped because it could not apply them (oldest first).

        Normally empty. An entry means one event could not be applied to that
        model (e.g. a value written by an older version that its SQL cannot
        hold); the model went on without it, so one event never stops the read
        models of every tenant. See docs/projections.md for what to do.
        """
        return [
            SkippedEvent(
                model=row["name"],
                position=row["position"],
                error=row["error"],
                skipped_at=from_micros(row["skipped_at_us"]),
            )
            for row in self.projector.skipped()
        ]

    @property
    def last_error(self) -> ChatLedgerError | None:
        """The error of the follower's last attempt, if it failed (it keeps retrying)."""
        return self.projector.last_error

    @public
    def wait_for_projections(self, position: int, timeout: float = 5.0) -> None:
        """Return once every read model has applied the event at ``position``.

        ``position`` is ``AddedMessage.position`` (or the position of any
        recorded event). With a follower thread running this wakes it and
        waits; otherwise it catches up in the calling thread. Raises
        ``ProjectionTimeout`` after ``timeout`` (for a position beyond the log,
        say).
        """
        check_int(position, "position (AddedMessage.position)")
        timeout = check_seconds(timeout, "timeout", maximum=MAX_WAIT_SECONDS)
        deadline = time.monotonic() + timeout
        if self.running:
            self.projector.wake()
            if self.projector.wait(position, timeout):
                return
        else:
            while True:
                self.projector.catch_up()
                if self.projector.applied(position):
                    return
                if time.monotonic() >= deadline:
                    break
                time.sleep(min(self.poll_interval, max(0.0, deadline - time.monotonic())))
        raise ProjectionTimeout(
            f"The read models did not reach position {position} within {timeout}s "
            f"(they are at {self.projector.positions()}); is the projector running? "
            "Start one (ReadModels.start() or `chatledger project --follow`) or wait longer."
        )

    # -------------------------------------------------------------- queries
    working_set = delegate("queries", ReadModelQueries.working_set)
    archives = delegate("queries", ReadModelQueries.archives)
    audit = delegate("queries", ReadModelQueries.audit)
    timeline = delegate("queries", ReadModelQueries.timeline)
    timeline_sample = delegate("queries", ReadModelQueries.timeline_sample)
    forks = delegate("queries", ReadModelQueries.forks)
    usage = delegate("queries", ReadModelQueries.usage)

    # ------------------------------------------------------------- eviction
    @public
    def evict_idle(
        self,
        principal: Principal,
        max_idle_seconds: float,
        now: datetime | None = None,
        *,
        skip_pending: bool = True,
        account_id: str | None = None,
    ) -> list[str]:
        """Record ``Evicted(reason="idle")`` for live sessions idle longer than the limit.

        Members evict within their account, admins across accounts (or in
        ``account_id``). Each event is recorded in the session's own tenant
        with the caller as actor. Skipped: sessions with a commit in flight in
        this ledger, and, with ``skip_pending`` (the default), sessions with
        uncommitted messages. Returns the evicted keys ordered by (account, key).
        """
        check_principal(principal)
        check_seconds(max_idle_seconds, "max_idle_seconds")
        moment = self._core.now() if now is None else check_aware(now, "now")
        self.projector.catch_up(settle=self._settle)  # decide on the newest state we can see
        return eviction.evict_idle(
            self._core.sessions,
            self.queries,
            self._core.commits.in_flight,
            principal,
            max_idle_seconds,
            moment,
            skip_pending=skip_pending,
            account_id=account_id,
        )
