"""What every part of ``SessionLedger`` stands on: its core, and resolving a request.

``SessionLedger`` is assembled from ``ItemOperations`` (items, removal,
state) and ``HistoryOperations`` (diff, fork, verify, export, import) plus its
own core methods; all three resolve a principal's request to a session the
same way, here.
"""

from __future__ import annotations

from chatledger.domain.access import Target, target
from chatledger.domain.limits import Limits
from chatledger.domain.session import Session
from chatledger.domain.values import Principal
from chatledger.results import SessionView
from chatledger.service import views
from chatledger.service.core import Core


class LedgerBase:
    """The ledger's core, and the two steps every method starts or ends with."""

    core: Core

    @property
    def limits(self) -> Limits:
        return self.core.limits

    def _target(self, principal: Principal, key: str, account_id: str | None) -> Target:
        """The session ``key`` names for ``principal`` (tenant rule applied); open ledgers only."""
        self.core.check_open()
        return target(principal, key, account_id)

    def _view(self, session: Session) -> SessionView:
        return views.session_view(session, self.core.settings.compress_threshold)
