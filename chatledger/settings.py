"""Configuration: constructor arguments > ``CHATLEDGER_*`` environment > defaults.

Invalid values raise ``InvalidSettings`` naming the setting and what it accepts.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from chatledger.domain.failures import InvalidSettings
from chatledger.domain.limits import (
    DEFAULT_MAX_CONTENT_CHARS,
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_META_BYTES,
)

MAX_WAIT_SECONDS = 86_400.0
"""Longest timeout or poll interval a setting accepts (a day)."""


class LedgerSettings(BaseSettings):
    """Every knob of a ``SessionLedger``; each also reads ``CHATLEDGER_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="CHATLEDGER_", frozen=True, extra="forbid")

    url: str = Field(
        default="sqlite:///chatledger.db",
        min_length=1,
        description="SQLAlchemy URL of the event store (SQLite file or PostgreSQL).",
    )
    snapshot_interval: int = Field(
        default=200,
        ge=2,
        le=2**31 - 1,
        description=(
            "Consider a snapshot after this many events of a session (taken when it "
            "would at least halve what a load replays; one interval more for each 50 "
            "items it would hold past the first 50)."
        ),
    )
    compress_threshold: int = Field(
        default=10,
        ge=1,
        le=2**31 - 1,
        description="should_compress is true from this many user turns.",
    )
    merge_threshold: int = Field(
        default=8,
        ge=1,
        le=2**31 - 1,
        description="merge_archives merges when more live archives than this.",
    )
    merge_max_count: int = Field(
        default=8,
        ge=2,
        le=2**31 - 1,
        description="At most this many oldest archives are merged at once.",
    )
    sqlite_synchronous: Literal["full", "normal"] = Field(
        default="normal",
        description=(
            "SQLite durability. 'normal' (WAL) survives a process crash but may lose the "
            "last commits on power loss; 'full' also survives power loss, at about a "
            "sixth of the append rate."
        ),
    )
    busy_timeout: float = Field(
        default=10.0,
        gt=0,
        le=MAX_WAIT_SECONDS,
        allow_inf_nan=False,
        description="Seconds to wait for a database lock or connection.",
    )
    entity_retention: bool = Field(
        default=False, description="Store entity_retention_ratio in archive metadata."
    )
    summarizer_timeout: float = Field(
        default=300.0,
        gt=0,
        le=MAX_WAIT_SECONDS,
        allow_inf_nan=False,
        description=(
            "Seconds a summarizer call may take; past it the commit or merge fails "
            "(CommitFailed) and the summarizer's thread is abandoned."
        ),
    )
    derive_objective: bool = Field(
        default=False,
        description=(
            "A commit of a session whose task state has no objective sets one: the first "
            "sentence of the first user message it archives."
        ),
    )
    require_archive_store: bool = Field(
        default=False, description="Fail commits when no archive store is configured."
    )
    max_content_chars: int = Field(
        default=DEFAULT_MAX_CONTENT_CHARS,
        ge=1,
        le=100_000_000,
        description="Largest message content accepted, in characters.",
    )
    max_meta_bytes: int = Field(
        default=DEFAULT_MAX_META_BYTES,
        ge=64,
        le=DEFAULT_MAX_EVENT_BYTES,
        description="Largest JSON value (a context's meta, an archive's metadata), in bytes.",
    )
    max_event_bytes: int = Field(
        default=DEFAULT_MAX_EVENT_BYTES,
        ge=1024,
        le=2**31 - 1,
        description="Largest stored event (its serialised payload), in bytes.",
    )
    cache_size: int = Field(
        default=1024,
        ge=0,
        le=10_000_000,
        description="Sessions kept loaded in memory (0: no cache).",
    )
    commit_workers: int = Field(
        default=2,
        ge=1,
        le=256,
        description="Threads running commits started with wait=False.",
    )
    chain_key: SecretStr | None = Field(
        default=None,
        description=(
            "Secret for the events' hash chain (HMAC-SHA256); without it the chain is "
            "plain SHA-256. Must stay the same for the life of a ledger."
        ),
    )
    encryption: bool = Field(
        default=False,
        description=(
            "Encrypt each session's content at rest (AES-256-GCM, a data key per session or "
            "user), so that erase() can destroy it; appends cost a tenth to a fifth more. Off "
            "(the default), new content is stored in the clear and erasure cannot reach it "
            "(docs/erasure.md)."
        ),
    )
    key_scope: Literal["session", "user"] = Field(
        default="session",
        description=(
            "Whose data key encrypts a session's content: the session's own (each session "
            "erasable alone) or that of the user who started it (one key per user; "
            "erase_user)."
        ),
    )
    key_cache_seconds: float = Field(
        default=60.0,
        ge=0,
        le=MAX_WAIT_SECONDS,
        allow_inf_nan=False,
        description=(
            "How long a data key -- or the fact that it was destroyed -- is kept in memory; "
            "another process's erasure reaches this one within that time."
        ),
    )
    projections_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the read-model database (default: the ledger's own).",
    )
    projections_poll_interval: float = Field(
        default=0.05,
        gt=0,
        le=MAX_WAIT_SECONDS,
        allow_inf_nan=False,
        description="Longest idle back-off (s) of the read-model follower.",
    )
    create_tables: bool = Field(
        default=True,
        description=(
            "Create the database and its missing tables on start. Off (for workers without "
            "DDL rights, and read-only tools) a missing database or table raises LedgerNotFound."
        ),
    )


def load_settings(base: LedgerSettings | None = None, **overrides: Any) -> LedgerSettings:
    """Settings from ``base`` (or the environment) with ``overrides`` applied, validated."""
    values = {k: v for k, v in overrides.items() if v is not None}
    try:
        if base is None:
            return LedgerSettings(**values)
        return LedgerSettings(**{**base.model_dump(), **values})
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}"
            for e in error.errors()
        )
        raise InvalidSettings(f"Invalid chatledger settings: {problems}.") from None
    except TypeError as error:
        raise InvalidSettings(f"Invalid chatledger settings: {error}.") from None
