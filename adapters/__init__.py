"""Everything that touches the outside world (``chatledger.adapters``).

The event store on SQLAlchemy (SQLite, PostgreSQL), the pydantic mapper, the
default summarizer and the archive stores. May import domain and projections.
"""

from chatledger.adapters.archive_store import InMemoryArchiveStore, SqlArchiveStore
from chatledger.adapters.summarizer import ExtractiveSummarizer

__all__ = ["ExtractiveSummarizer", "InMemoryArchiveStore", "SqlArchiveStore"]
