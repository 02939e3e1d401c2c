"""Archive merges: the oldest live archives of a session folded into one ``ArchiveMerged``.

The same shape as a commit (see ``service.commits``): the sources are read
under the session's lock, merged by the summarizer outside it, and recorded in
one event, or nothing (another writer that merged them first makes this merge
fail, and it changes nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from chatledger.adapters.recorders import KeyedRow
from chatledger.domain.access import Target
from chatledger.domain.events import ArchiveMerged, new_id
from chatledger.domain.failures import ConcurrencyConflict
from chatledger.domain.limits import Limits, check_int, check_summary, error_text
from chatledger.domain.ports import Summary
from chatledger.domain.session import Session
from chatledger.domain.values import ArchiveSummary, Principal, estimate_tokens
from chatledger.results import MergeResult
from chatledger.service import retries
from chatledger.service.sessions import AlreadyRecorded, SessionStore, check_expected

logger = logging.getLogger("chatledger.commits")
MergeCall = Callable[[Sequence[ArchiveSummary]], Summary]
"""The summarizer's merge, bounded by its timeout (``CommitRunner`` makes it)."""


def merge(
    sessions: SessionStore,
    merge_call: MergeCall,
    limits: Limits,
    now: Callable[[], datetime],
    principal: Principal,
    target: Target,
    *,
    threshold: int,
    max_count: int,
    idempotency_key: str | None,
    expected_version: int | None = None,
) -> MergeResult:
    """Merge the oldest live archives into one when there are more than ``threshold``."""
    sid = target.session_id
    if idempotency_key is not None:
        with sessions.lock(sid):
            rows = sessions.recorded_write(sid, idempotency_key)
        if rows:
            return _merge_recorded(sessions, rows)
    check_int(threshold, "threshold", minimum=1)
    check_int(max_count, "max_count", minimum=2)
    with sessions.lock(sid):
        current = sessions.require(target)
        current.require_writable()
        if expected_version is not None:
            check_expected(current, expected_version)
        live = list(current.archives)
    if len(live) < 2:
        return MergeResult(merged=False, reason="too_few_archives")
    if len(live) <= threshold:
        return MergeResult(merged=False, reason="below_threshold")
    sources = live[: max(2, min(max_count, len(live) - threshold + 1))]
    source_ids = tuple(a.archive_id for a in sources)
    try:
        summary = check_summary(merge_call(sources), limits, source="The summarizer's merge")
        moment = now()
        archive = ArchiveSummary(
            archive_id=new_id(),
            overview=summary.overview,
            abstract=summary.abstract,
            # The covered ids stay with the source archives (ArchiveMerged names
            # them): repeating them here would make the state grow with history.
            message_ids=(),
            tokens=estimate_tokens(summary.overview + summary.abstract),
            created_at=moment,
            metadata={
                **summary.metadata,
                "merged_from": list(source_ids),
                "message_count": sum(a.covered_count for a in sources),
            },
        )

        def apply(session: Session) -> None:
            if any(a not in {x.archive_id for x in session.archives} for a in source_ids):
                raise ConcurrencyConflict(
                    "Another writer merged these archives meanwhile; call merge again."
                )
            session.merge_archives(archive, source_ids, actor=principal, timestamp=moment)

        sessions.write(
            sid, apply, idempotency_key=idempotency_key, expected_version=expected_version
        )
    except AlreadyRecorded as done:
        return _merge_recorded(sessions, done.rows)
    except Exception as error:
        logger.warning("merge of session %r failed: %s", target.key, error_text(error))
        return MergeResult(merged=False, reason="failed", error=error_text(error))
    return MergeResult(merged=True, archive_id=archive.archive_id, source_archive_ids=source_ids)


def _merge_recorded(sessions: SessionStore, rows: list[KeyedRow]) -> MergeResult:
    event = retries.first_event(sessions, rows, lambda e: isinstance(e, ArchiveMerged))
    return MergeResult(
        merged=True,
        archive_id=event.archive.archive_id,
        source_archive_ids=tuple(event.source_archive_ids),
    )
