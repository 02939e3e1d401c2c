"""Fold: every archive a session ever had, live ones in order, with merge lineage."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from chatledger.domain.events import ArchiveMerged, Committed, Deleted, Forked
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.rules import with_merge
from chatledger.domain.values import ArchiveSummary


class ArchiveRecord(BaseModel):
    """One archive and where it went: still live, or merged into another."""

    model_config = ConfigDict(frozen=True)

    summary: ArchiveSummary
    merged_into: str | None = None
    merged_from: tuple[str, ...] = ()
    created_version: int

    @property
    def live(self) -> bool:
        return self.merged_into is None


class ArchiveHistory(BaseModel):
    """Live archives (merged ones replaced by their merge) and the full lineage."""

    model_config = ConfigDict(frozen=True)

    live: tuple[ArchiveSummary, ...] = ()
    records: tuple[ArchiveRecord, ...] = ()

    def record(self, archive_id: str) -> ArchiveRecord | None:
        return next((r for r in self.records if r.summary.archive_id == archive_id), None)

    def message_ids(self, archive_id: str) -> tuple[str, ...]:
        """The messages an archive covers, following a merge back to its sources."""
        record = self.record(archive_id)
        if record is None:
            return ()
        if not record.merged_from:
            return record.summary.message_ids
        return tuple(i for source in record.merged_from for i in self.message_ids(source))


def fold_archive_history(state: ArchiveHistory, event: SessionEvent) -> ArchiveHistory:
    """The archive history after ``event``."""
    version = event.originator_version
    if isinstance(event, Forked):
        return ArchiveHistory(
            live=event.archives,
            records=tuple(
                ArchiveRecord(summary=a, created_version=version) for a in event.archives
            ),
        )
    if isinstance(event, Deleted):  # no live archives; the records stay (history)
        return ArchiveHistory(live=(), records=state.records)
    if isinstance(event, Committed):
        return ArchiveHistory(
            live=(*state.live, event.archive),
            records=(*state.records, ArchiveRecord(summary=event.archive, created_version=version)),
        )
    if isinstance(event, ArchiveMerged):
        sources = set(event.source_archive_ids)
        merged_id = event.archive.archive_id
        records = tuple(
            r.model_copy(update={"merged_into": merged_id})
            if r.summary.archive_id in sources
            else r
            for r in state.records
        )
        merged = ArchiveRecord(
            summary=event.archive,
            merged_from=event.source_archive_ids,
            created_version=version,
        )
        return ArchiveHistory(
            live=tuple(with_merge(state.live, event.archive, event.source_archive_ids)),
            records=(*records, merged),
        )
    return state
