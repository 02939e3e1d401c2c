"""``Core``: the collaborators of one ledger, built once by ``bootstrap.build``.

Every face -- ``SessionLedger``, ``AsyncSessionLedger`` (through it),
``ReadModels``, the CLI, the projector process, the viewer, the registry --
works on one ``Core``: its settings and limits, its clock, the event store,
the session store and the commit runner.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from chatledger.adapters.store import EventStoreApplication
from chatledger.domain.failures import InvalidSettings, StoreUnavailable
from chatledger.domain.limits import Limits
from chatledger.service.commits import CommitRunner
from chatledger.service.sessions import SessionStore
from chatledger.settings import LedgerSettings


def checked_clock(clock: Callable[[], datetime]) -> Callable[[], datetime]:
    """``clock``, refusing what is not a timezone-aware datetime (time is injected)."""

    def now() -> datetime:
        moment = clock()
        if not isinstance(moment, datetime) or moment.utcoffset() is None:
            raise InvalidSettings("The clock must return timezone-aware datetimes.")
        return moment

    return now


@dataclass
class Core:
    """One ledger's collaborators (see the module docstring)."""

    settings: LedgerSettings
    limits: Limits
    clock: Callable[[], datetime]  # checked_clock(...) of the configured clock
    store: EventStoreApplication
    sessions: SessionStore
    commits: CommitRunner
    closed: bool = field(default=False)

    def now(self) -> datetime:
        """The clock's current moment (checked to be timezone-aware)."""
        return self.clock()

    def check_open(self) -> None:
        if self.closed:
            raise StoreUnavailable("This ledger is closed; open a new SessionLedger.")

    def close(self) -> None:
        """Finish running commits, then release the database."""
        if self.closed:
            return
        self.closed = True
        self.commits.close()
        self.store.close()
