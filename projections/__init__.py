"""Pure folds from session events to read models (``chatledger.projections``).

Two halves, both pure (they import only ``chatledger.domain``; nothing here
touches storage):

- **In production**: ``facts`` (the stored facts written next to every event,
  which the SQL read models are built from), ``archive_events`` (the
  archive-carrying events the archive history decodes) and ``describe`` (one
  line per event for history views).
- **The executable specification** -- the folds re-exported here (``Buffer``,
  ``ArchiveHistory``, ``SessionMeta``, ``project``): what each event means,
  written as plain folds. Production state comes from the aggregate and the
  SQL read models; the tests hold both against these folds (every event kind,
  random histories), so the three can never drift apart unnoticed.
"""

from chatledger.projections.archive_history import (
    ArchiveHistory,
    ArchiveRecord,
    fold_archive_history,
)
from chatledger.projections.buffer import Buffer, fold_buffer
from chatledger.projections.session_fold import SessionProjection, fold_session, project
from chatledger.projections.session_meta import SessionMeta, fold_session_meta

__all__ = [
    "ArchiveHistory",
    "ArchiveRecord",
    "Buffer",
    "SessionMeta",
    "SessionProjection",
    "fold_archive_history",
    "fold_buffer",
    "fold_session",
    "fold_session_meta",
    "project",
]
