"""The history half of ``SessionLedger``: diffs, forks, verification, export and import.

``HistoryOperations`` is mixed into ``SessionLedger`` (it works on the
ledger's ``core``); each method checks its arguments, resolves the tenant and
makes one core call (``chatledger.service``: ``timetravel``, ``integrity``,
``transfer``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from chatledger.boundary import public, translated_errors
from chatledger.domain.access import check_principal, target
from chatledger.domain.failures import InvalidInput
from chatledger.domain.ports import ArchiveBody
from chatledger.domain.values import Principal
from chatledger.ledger_base import LedgerBase
from chatledger.results import ChainHead, ImportResult, SessionDiff, SessionView, VerifyReport
from chatledger.service import erasing, integrity, timetravel, transfer
from chatledger.service.messages import idempotency_key as checked_key


class HistoryOperations(LedgerBase):
    """Diff, fork, verify, export and import (mixed into ``SessionLedger``)."""

    @public
    def diff(
        self,
        principal: Principal,
        key: str,
        from_version: int,
        to_version: int,
        *,
        account_id: str | None = None,
    ) -> SessionDiff:
        """What changed between two versions: messages, commits, merges, counters."""
        found = self._target(principal, key, account_id)
        return timetravel.diff(self.core.sessions, found, from_version, to_version)

    @public
    def archive_body(
        self, principal: Principal, key: str, archive_id: str, *, account_id: str | None = None
    ) -> ArchiveBody | None:
        """The full body of one of the session's archives from the archive store, decrypted
        (erased content reads as erased); ``None`` without an archive store or such a body."""
        found = self._target(principal, key, account_id)
        return erasing.archive_body(self.core, found, archive_id)

    @public
    def fork(
        self,
        principal: Principal,
        key: str,
        at_version: int,
        new_key: str,
        *,
        account_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> SessionView:
        """Start ``new_key`` as a copy of ``key`` at ``at_version``; the origin is untouched."""
        origin = self._target(principal, key, account_id)
        new = target(principal, new_key, origin.tenant)
        return timetravel.fork(
            self.core.sessions, principal, origin, at_version, new,
            now=self.core.now(), idempotency_key=checked_key(idempotency_key), view=self._view,
        )  # fmt: skip

    @public
    def verify(
        self,
        principal: Principal,
        key: str | None = None,
        *,
        anchors: Iterable[ChainHead] = (),
        account_id: str | None = None,
        deep: bool = False,
    ) -> VerifyReport:
        """Recompute the hash chains (one session, or every session the principal sees).

        Checks every stored event's hash, each session's identity, the stored
        facts naming each event and its session, and the snapshots' versions,
        at about the cost of reading the rows. ``deep=True`` also replays every
        session, recomputing every stored fact and comparing every snapshot:
        facts and snapshots are not hashed, so only this finds them doctored
        (several times slower). ``anchors`` are heads from an earlier report
        kept outside the database; each must still be part of its chain, which
        catches cut-off endings.
        """
        check_principal(principal)
        self.core.check_open()
        if not isinstance(deep, bool):
            raise InvalidInput("deep must be True or False.")
        return integrity.verify(self.core.store, principal, key, anchors, account_id, deep=deep)

    def export(self, principal: Principal, key: str | None = None) -> Iterator[str]:
        """Events as self-describing JSON lines (a header line first), with their hashes."""
        check_principal(principal)
        if key is not None:
            self._target(principal, key, None)
        lines = transfer.export(self.core.store, principal, key)
        while True:
            with translated_errors():
                line = next(lines, None)
            if line is None:
                return
            yield line

    @public
    def import_(
        self,
        lines: Iterable[str],
        *,
        progress: transfer.ImportProgress | None = None,
        allow_missing_keys: bool = False,
    ) -> ImportResult:
        """Import an export into this (empty) ledger; a broken file imports nothing, and an
        import interrupted at any step imports when retried.

        ``progress`` is called with (phase, done, total) as the phases ``read``,
        ``verify`` (every event replayed and checked) and ``write`` advance. Content
        sealed with a data key the file does not bring (nor this ledger's key store
        holds) would read as erased: such a file is ``InvalidInput`` unless
        ``allow_missing_keys``; the result counts those sessions.
        """
        self.core.check_open()
        if not isinstance(allow_missing_keys, bool):
            raise InvalidInput("allow_missing_keys must be True or False.")
        result = transfer.import_(
            self.core.store, lines, progress, allow_missing_keys=allow_missing_keys
        )
        self.core.sessions.clear()
        return result
