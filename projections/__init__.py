"""Pure folds from session events to read models (``chatledger.projections``).

Imports only ``chatledger.domain``; nothing here touches storage.
"""

from chatledger.projections.archive_history import (
    ArchiveHistory,
    ArchiveRecord,
    fold_archive_history,
)
from chatledger.projections.buffer import Buffer, fold_buffer
from chatledger.projections.session import SessionProjection, fold_session, project
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
