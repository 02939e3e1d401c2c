"""The composition root: ``build`` makes every collaborator of a ledger, once.

It reads the settings, opens (and creates or upgrades, or only checks) the
database, checks the chain key, and wires the event store, the session store
and the commit runner into a ``Core``. ``SessionLedger`` calls it; every other
entry point (read models, CLI, projector process, demo, viewer, registry) goes
through a ``SessionLedger`` and so through here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from chatledger.adapters.chain_key import check_chain_key
from chatledger.adapters.database import (
    SQLITE_HEADER,
    SQLAlchemyError,
    create_store_engine,
    sqlite_file,
)
from chatledger.adapters.key_store import SqlKeyStore
from chatledger.adapters.keyring import KeyRing
from chatledger.adapters.schema import create_tables, keys_table, require_tables
from chatledger.adapters.store import EventStoreApplication
from chatledger.adapters.summarizer import ExtractiveSummarizer
from chatledger.domain.failures import (
    InvalidSettings,
    LedgerNotFound,
    StoreUnavailable,
)
from chatledger.domain.limits import Limits
from chatledger.domain.ports import ArchiveStore, Clock, KeyStore, Summarizer
from chatledger.service.commits import CommitPolicy, CommitRunner
from chatledger.service.core import Core, checked_clock
from chatledger.service.sessions import SessionStore
from chatledger.settings import LedgerSettings, load_settings

utc_now: Callable[[], datetime] = partial(datetime.now, UTC)
"""The default clock (a partial: no Python frame on the path of every write)."""


def build(
    url: str | None = None,
    *,
    settings: LedgerSettings | None = None,
    summarizer: Summarizer | None = None,
    archive_store: ArchiveStore | None = None,
    key_store: KeyStore | None = None,
    clock: Clock | None = None,
    **options: Any,
) -> Core:
    """The core of a ledger at ``url`` (or ``settings.url``; see ``SessionLedger``)."""
    settings = load_settings(settings, url=url, **options)
    if summarizer is not None and not isinstance(summarizer, Summarizer):
        raise InvalidSettings("summarizer must have summarize() and merge() methods.")
    if archive_store is not None and not isinstance(archive_store, ArchiveStore):
        raise InvalidSettings("archive_store must have put() and get() methods.")
    if key_store is not None and not isinstance(key_store, KeyStore):
        raise InvalidSettings(
            "key_store must have key_for(), get(), records(), destroy(), restore() and purge()."
        )
    limits = Limits(
        max_content_chars=settings.max_content_chars,
        max_meta_bytes=settings.max_meta_bytes,
        max_event_bytes=settings.max_event_bytes,
    )
    store = open_store(settings, key_store)
    sessions = SessionStore(
        store, cache_size=settings.cache_size, busy_timeout=settings.busy_timeout
    )
    now = utc_now if clock is None else checked_clock(clock)  # ours needs no checking
    policy = CommitPolicy(
        limits=limits,
        entity_retention=settings.entity_retention,
        require_archive_store=settings.require_archive_store,
        summarizer_timeout=settings.summarizer_timeout,
        commit_workers=settings.commit_workers,
        merge_threshold=settings.merge_threshold,
        merge_max_count=settings.merge_max_count,
        derive_objective=settings.derive_objective,
    )
    commits = CommitRunner(
        sessions, summarizer or ExtractiveSummarizer(), archive_store, policy, now,
        body_sealer=lambda session: store.keyring.archive_sealer(session, now()),
    )  # fmt: skip
    return Core(settings, limits, now, store, sessions, commits)


def open_store(
    settings: LedgerSettings, key_store: KeyStore | None = None
) -> EventStoreApplication:
    """The event store at ``settings.url``: created or upgraded with ``create_tables``,
    else only checked (``LedgerNotFound`` for a missing ledger); the chain key checked;
    content sealed with keys from ``key_store`` (default: the database's key table)."""
    path = sqlite_file(settings.url)
    if not settings.create_tables and path is not None:
        _check_sqlite_file(Path(path))
    # Without table creation nothing is written before the file is known to be a ledger
    # (require_tables): not even the switch to WAL mode, which a ledger has since it was
    # created -- and an opener that only reads never writes at all.
    engine = create_store_engine(
        settings.url, synchronous=settings.sqlite_synchronous, busy_timeout=settings.busy_timeout,
        wal=settings.create_tables,
    )  # fmt: skip
    try:
        if settings.create_tables:
            create_tables(engine)
        else:
            require_tables(engine)
        chain_key = settings.chain_key
        key = chain_key.get_secret_value().encode() if chain_key else None
        check_chain_key(engine, key, record=settings.create_tables)
        keyring = KeyRing(
            key_store or SqlKeyStore(engine, keys_table),
            scope=settings.key_scope,
            seal=settings.encryption,
            ttl=settings.key_cache_seconds,
        )
        return EventStoreApplication(
            engine,
            snapshot_interval=settings.snapshot_interval,
            chain_key=key,
            max_event_bytes=settings.max_event_bytes,
            keyring=keyring,
        )
    except (LedgerNotFound, InvalidSettings, StoreUnavailable):
        engine.dispose()
        raise
    except SQLAlchemyError as error:
        engine.dispose()
        raise StoreUnavailable(
            f"Cannot open the event store at {engine.url!r}: {error}. Check the URL "
            "and that the database is running."
        ) from error


def _check_sqlite_file(path: Path) -> None:
    """``LedgerNotFound`` unless ``path`` is a file that may hold a SQLite database (read
    only: its first bytes)."""
    if not path.is_file():
        raise LedgerNotFound(
            f"No chatledger database at {path} (the file does not exist). Check the URL; "
            "a new ledger is created only with table creation on (create_tables=True)."
        )
    with path.open("rb") as file:
        start = file.read(len(SQLITE_HEADER))
    if start and start != SQLITE_HEADER:
        raise LedgerNotFound(
            f"{path} is not a SQLite database, so it holds no chatledger ledger; check the "
            "URL. Nothing was changed."
        )
