"""Verify results of the sessions list: one cached verdict per session version.

The list shows a verify badge per session; verifying is not free, so each
verdict is kept per (account, key, version) -- a new event makes a new one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime

from chatledger.domain.values import Principal
from chatledger.errors import UnknownSession
from chatledger.ledger import SessionLedger
from chatledger.results import VerifyIssue


@dataclass(frozen=True)
class Verdict:
    """The outcome of the last ``verify`` of one session run by this viewer."""

    ok: bool
    checked_at: datetime
    version: int  # the newest version checked
    events: int
    issue: VerifyIssue | None


class VerdictCache:
    """Recent verify outcomes by (account, key), for the badges; bounded, thread-safe."""

    def __init__(self, size: int = 10_000) -> None:
        self._size = size
        self._items: OrderedDict[tuple[str, str], Verdict] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, account: str, key: str) -> Verdict | None:
        with self._lock:
            return self._items.get((account, key))

    def put(self, account: str, key: str, verdict: Verdict) -> None:
        with self._lock:
            self._items[(account, key)] = verdict
            self._items.move_to_end((account, key))
            while len(self._items) > self._size:
                self._items.popitem(last=False)


def verify_session(
    ledger: SessionLedger, principal: Principal, account: str, key: str, cache: VerdictCache
) -> Verdict:
    """Recompute one session's hash chain now, replaying it too (one session: the deep check
    costs little), and remember the outcome for its badge."""
    report = ledger.verify(principal, key, account_id=account, deep=True)
    if report.sessions_checked == 0:
        raise UnknownSession(f"No session {key!r} in account {account!r}.")
    issue = report.issues[0] if report.issues else None
    version = report.heads[0].version if report.heads else (issue.version if issue else 0)
    verdict = Verdict(
        ok=report.ok,
        checked_at=datetime.now(UTC),
        version=version,
        events=report.events_checked,
        issue=issue,
    )
    cache.put(account, key, verdict)
    return verdict
