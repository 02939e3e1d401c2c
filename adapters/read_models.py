"""Persisted read models: their SQL tables, how a batch of events updates them, queries.

Four read models, each a ``SqlReadModel`` with a name, a version and its own
tables: the working set (one row per session, plus the live-buffer rows it
needs to count pending tokens), the archive history, the audit log (one row
per event) and tool usage. ``apply(connection, batch, identities)`` folds a
batch of ``EventFacts`` with the pure folds of ``chatledger.projections``
and writes the net changes with a few set-wise statements; it runs inside
the projector's transaction, which also moves the model's tracking position
(see ``chatledger.adapters.projector``), so it never commits by itself.
Nothing here reads the event store or imports the package face.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, TypeVar
from uuid import UUID

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    Uuid,
    and_,
    bindparam,
    delete,
    select,
    update,
)

from chatledger.projections.audit import EventFacts, audit_record
from chatledger.projections.usage import UsageCounts, UsageKey, fold_usage
from chatledger.projections.working_set import (
    LIVE,
    ArchivesMerged,
    WorkingSetState,
    archive_changes,
    fold_working_set,
)

read_model_metadata = MetaData()
_position_type = BigInteger().with_variant(Integer(), "sqlite")
_IN_CHUNK = 500
_ORDINAL_STEP = 1024  # room for the archives a fork copies at one position
_T = TypeVar("_T")

Identities = Mapping[UUID, tuple[str, str]]
"""Session id -> (tenant account id, session key), for every session of a batch."""

tracking_table = Table(
    "chatledger_projections",
    read_model_metadata,
    Column("name", String(64), primary_key=True),
    Column("version", Integer, nullable=False),
    Column("position", BigInteger, nullable=False),
)

working_set_table = Table(
    "chatledger_working_set",
    read_model_metadata,
    Column("session_id", Uuid(as_uuid=True), primary_key=True),
    Column("account_id", Text, nullable=False),
    Column("user_id", Text, nullable=False),
    Column("agent_id", Text, nullable=False),
    Column("session_key", Text, nullable=False),
    Column("created_at_us", BigInteger, nullable=False),
    Column("last_activity_us", BigInteger, nullable=False),
    Column("message_count", Integer, nullable=False),
    Column("pending_tokens", BigInteger, nullable=False),
    Column("turn_count", Integer, nullable=False),
    Column("commit_count", Integer, nullable=False),
    Column("archive_count", Integer, nullable=False),
    Column("last_commit_us", BigInteger, nullable=True),
    Column("status", String(16), nullable=False),
    Column("version", BigInteger, nullable=False),
    Index("chatledger_working_set_activity", "status", "last_activity_us"),
    Index("chatledger_working_set_account", "account_id", "status", "last_activity_us"),
)

working_set_buffer_table = Table(
    "chatledger_working_set_buffer",
    read_model_metadata,
    Column("session_id", Uuid(as_uuid=True), primary_key=True),
    Column("message_id", Text, primary_key=True),
    Column("tokens", Integer, nullable=False),
    Column("is_user", Boolean, nullable=False),
)

archives_table = Table(
    "chatledger_archives",
    read_model_metadata,
    Column("session_id", Uuid(as_uuid=True), primary_key=True),
    Column("archive_id", Text, primary_key=True),
    Column("account_id", Text, nullable=False),
    Column("session_key", Text, nullable=False),
    Column("overview", Text, nullable=False),
    Column("abstract", Text, nullable=False),
    Column("message_ids", Text, nullable=False),  # JSON list
    Column("tokens", Integer, nullable=False),
    Column("created_at_us", BigInteger, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("version", BigInteger, nullable=False),
    # Where the archive sits among the session's archives: a merge takes the
    # place of its first source (as in the aggregate), so it inherits its ordinal.
    Column("ordinal", BigInteger, nullable=False),
    Column("merged_into", Text, nullable=True),
    Column("merged_from", Text, nullable=False),  # JSON list
    Column("live", Boolean, nullable=False),
)

audit_table = Table(
    "chatledger_audit",
    read_model_metadata,
    Column("position", _position_type, primary_key=True, autoincrement=False),
    Column("session_id", Uuid(as_uuid=True), nullable=False),
    Column("account_id", Text, nullable=False),
    Column("session_key", Text, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("event_type", String(64), nullable=False),
    Column("actor_account", Text, nullable=False),
    Column("actor_user", Text, nullable=False),
    Column("actor_agent", Text, nullable=False),
    Column("actor_role", String(16), nullable=False),
    Column("trace_id", Text, nullable=False),
    Column("timestamp_us", BigInteger, nullable=False),
    Column("summary", Text, nullable=False),
    Index("chatledger_audit_account", "account_id", "position"),
    Index("chatledger_audit_session", "session_id", "position"),
)

usage_table = Table(
    "chatledger_usage",
    read_model_metadata,
    Column("session_id", Uuid(as_uuid=True), primary_key=True),
    Column("tool_name", Text, primary_key=True),
    Column("account_id", Text, nullable=False),
    Column("session_key", Text, nullable=False),
    Column("call_count", BigInteger, nullable=False),
    Column("success_count", BigInteger, nullable=False),
    Column("fail_count", BigInteger, nullable=False),
    Column("prompt_tokens", BigInteger, nullable=False),
    Column("completion_tokens", BigInteger, nullable=False),
    Column("total_tokens", BigInteger, nullable=False),
    Index("chatledger_usage_account", "account_id"),
)


def _chunks(items: Sequence[_T], size: int = _IN_CHUNK) -> Iterator[Sequence[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class SqlReadModel(ABC):
    """A read model kept in SQL tables; ``version`` changes whenever its rows would."""

    name: ClassVar[str]
    version: ClassVar[int]
    tables: ClassVar[tuple[Table, ...]]

    @abstractmethod
    def apply(self, connection: Connection, batch: Sequence[EventFacts], ids: Identities) -> None:
        """Apply ``batch`` (in log order, none applied before) inside the caller's transaction."""


# ------------------------------------------------------------- working set
_WS_COLUMNS = (
    "account_id",
    "user_id",
    "agent_id",
    "session_key",
    "created_at_us",
    "last_activity_us",
    "message_count",
    "pending_tokens",
    "turn_count",
    "commit_count",
    "archive_count",
    "last_commit_us",
    "status",
    "version",
)


class WorkingSetModel(SqlReadModel):
    """One row per session: who started it, counters, last activity, live or evicted."""

    name = "working_set"
    version = 1
    tables = (working_set_table, working_set_buffer_table)

    def apply(self, connection: Connection, batch: Sequence[EventFacts], ids: Identities) -> None:
        t, b = working_set_table, working_set_buffer_table
        sids = list(dict.fromkeys(f.session_id for f in batch))
        states: dict[UUID, WorkingSetState] = {}
        for chunk in _chunks(sids):
            rows = connection.execute(select(t).where(t.c.session_id.in_(chunk))).mappings()
            for row in rows:
                state = WorkingSetState(row["session_id"])
                for column in _WS_COLUMNS:
                    setattr(state, column, row[column])
                states[state.session_id] = state
        stored = set(states)
        # A commit needs the tokens of the messages it covers: load those buffers.
        committing = list({f.session_id for f in batch if f.type == "Committed"} & stored)
        before: dict[UUID, set[str]] = {}
        for chunk in _chunks(committing):
            query = select(b.c.session_id, b.c.message_id, b.c.tokens, b.c.is_user).where(
                b.c.session_id.in_(chunk)
            )
            for sid, message_id, tokens, is_user in connection.execute(query):
                states[sid].buffer[message_id] = (tokens, bool(is_user))
                before.setdefault(sid, set()).add(message_id)
        for facts in batch:
            states[facts.session_id] = fold_working_set(states.get(facts.session_id), facts)

        inserts: list[dict[str, Any]] = []
        updates: list[dict[str, Any]] = []
        added: list[dict[str, Any]] = []
        removed: list[dict[str, Any]] = []
        for sid, state in states.items():
            values = {column: getattr(state, column) for column in _WS_COLUMNS}
            if sid in stored:
                updates.append({"_sid": sid, **values})
            else:
                inserts.append({"session_id": sid, **values})
            held = before.get(sid, set())
            for message_id, (tokens, user) in state.buffer.items():
                if message_id not in held:
                    added.append(
                        {
                            "session_id": sid,
                            "message_id": message_id,
                            "tokens": tokens,
                            "is_user": user,
                        }
                    )
            removed.extend({"_sid": sid, "_mid": m} for m in held - state.buffer.keys())
        if inserts:
            connection.execute(t.insert(), inserts)
        if updates:
            statement = (
                update(t)
                .where(t.c.session_id == bindparam("_sid"))
                .values({c: bindparam(c) for c in _WS_COLUMNS})
            )
            connection.execute(statement, updates)
        if removed:
            removal = delete(b).where(
                and_(b.c.session_id == bindparam("_sid"), b.c.message_id == bindparam("_mid"))
            )
            connection.execute(removal, removed)
        if added:
            connection.execute(b.insert(), added)


# ---------------------------------------------------------- archive history
class ArchivesModel(SqlReadModel):
    """Every archive ever made, live or merged, with its merge lineage."""

    name = "archives"
    version = 1
    tables = (archives_table,)

    def apply(self, connection: Connection, batch: Sequence[EventFacts], ids: Identities) -> None:
        t = archives_table
        new: dict[tuple[UUID, str], dict[str, Any]] = {}
        merged: list[dict[str, Any]] = []
        for facts in batch:
            sid = facts.session_id
            for index, change in enumerate(archive_changes(facts)):
                if isinstance(change, ArchivesMerged):
                    for archive_id in change.archive_ids:
                        row = new.get((sid, archive_id))
                        if row is not None:  # created in this batch: not stored yet
                            row.update(merged_into=change.merged_into, live=False)
                        else:
                            merged.append(
                                {"_sid": sid, "_aid": archive_id, "merged_into": change.merged_into}
                            )
                    continue
                ordinal = change.position * _ORDINAL_STEP + index
                a = change.archive
                message_ids = list(a.message_ids)
                if change.merged_from:
                    sources = self._sources(connection, sid, change.merged_from, new)
                    ordinal = min((o for o, _ in sources.values()), default=ordinal)
                    if not message_ids:  # merges name their sources, not the messages again
                        message_ids = [
                            i
                            for source in change.merged_from
                            for i in json.loads(sources.get(source, (0, "[]"))[1])
                        ]
                tenant, key = ids[sid]
                new[(sid, a.archive_id)] = {
                    "session_id": sid,
                    "archive_id": a.archive_id,
                    "account_id": tenant,
                    "session_key": key,
                    "overview": a.overview,
                    "abstract": a.abstract,
                    "message_ids": json.dumps(message_ids),
                    "tokens": a.tokens,
                    "created_at_us": a.created_at_us,
                    "position": change.position,
                    "version": change.version,
                    "ordinal": ordinal,
                    "merged_into": None,
                    "merged_from": json.dumps(list(change.merged_from)),
                    "live": True,
                }
        if merged:
            statement = (
                update(t)
                .where(
                    and_(t.c.session_id == bindparam("_sid"), t.c.archive_id == bindparam("_aid"))
                )
                .values(merged_into=bindparam("merged_into"), live=False)
            )
            connection.execute(statement, merged)
        if new:
            connection.execute(t.insert(), list(new.values()))

    def _sources(
        self,
        connection: Connection,
        sid: UUID,
        archive_ids: Sequence[str],
        new: dict[tuple[UUID, str], dict[str, Any]],
    ) -> dict[str, tuple[int, str]]:
        """Ordinal and message ids (JSON) of each source archive, stored or new in the batch."""
        t = archives_table
        found = {
            a: (new[(sid, a)]["ordinal"], new[(sid, a)]["message_ids"])
            for a in archive_ids
            if (sid, a) in new
        }
        stored = [a for a in archive_ids if (sid, a) not in new]
        if stored:
            query = select(t.c.archive_id, t.c.ordinal, t.c.message_ids).where(
                t.c.session_id == sid, t.c.archive_id.in_(stored)
            )
            for archive_id, ordinal, message_ids in connection.execute(query):
                found[archive_id] = (int(ordinal), message_ids)
        return found


# ---------------------------------------------------------------- audit log
class AuditModel(SqlReadModel):
    """One row per event: position, session, version, type, actor, time, summary."""

    name = "audit"
    version = 1
    tables = (audit_table,)

    def apply(self, connection: Connection, batch: Sequence[EventFacts], ids: Identities) -> None:
        # The hot path of a rebuild (one row per event): plain DB-API executemany.
        sqlite = connection.dialect.name == "sqlite"
        mark = "?" if sqlite else "%s"
        columns = [c.name for c in audit_table.columns]
        sql = (
            f"INSERT INTO {audit_table.name} ({', '.join(columns)}) "
            f"VALUES ({', '.join([mark] * len(columns))})"
        )
        rows = []
        for facts in batch:
            tenant, key = ids[facts.session_id]
            r = audit_record(facts, tenant, key)
            rows.append(
                (
                    r.position,
                    r.session_id.hex if sqlite else r.session_id,
                    r.account_id,
                    r.session_key,
                    r.version,
                    r.event_type,
                    r.actor_account,
                    r.actor_user,
                    r.actor_agent,
                    r.actor_role,
                    r.trace_id,
                    r.timestamp_us,
                    r.summary,
                )
            )
        if rows:
            connection.exec_driver_sql(sql, rows)


# -------------------------------------------------------------------- usage
_USAGE_COUNTS = ("call_count", "success_count", "fail_count", "prompt_tokens", "completion_tokens")


class UsageModel(SqlReadModel):
    """Per session and tool: calls, successes, failures and tokens, merged into stored totals."""

    name = "usage"
    version = 1
    tables = (usage_table,)

    def apply(self, connection: Connection, batch: Sequence[EventFacts], ids: Identities) -> None:
        t = usage_table
        increments: dict[UsageKey, UsageCounts] = {}
        for facts in batch:
            fold_usage(increments, facts)
        if not increments:
            return
        stored: dict[UsageKey, UsageCounts] = {}
        sids = list({sid for sid, _ in increments})
        for chunk in _chunks(sids):
            query = select(t.c.session_id, t.c.tool_name, *(t.c[c] for c in _USAGE_COUNTS))
            for row in connection.execute(query.where(t.c.session_id.in_(chunk))):
                stored[(row[0], row[1])] = UsageCounts(*row[2:])
        inserts: list[dict[str, Any]] = []
        updates: list[dict[str, Any]] = []
        for key, increment in increments.items():
            total = stored.get(key)
            merged = increment if total is None else total.merge(increment)
            values = {c: getattr(merged, c) for c in _USAGE_COUNTS}
            values["total_tokens"] = merged.total_tokens
            if total is None:
                tenant, session_key = ids[key[0]]
                inserts.append(
                    {
                        "session_id": key[0],
                        "tool_name": key[1],
                        "account_id": tenant,
                        "session_key": session_key,
                        **values,
                    }
                )
            else:
                updates.append({"_sid": key[0], "_tool": key[1], **values})
        if inserts:
            connection.execute(t.insert(), inserts)
        if updates:
            statement = (
                update(t)
                .where(
                    and_(t.c.session_id == bindparam("_sid"), t.c.tool_name == bindparam("_tool"))
                )
                .values({c: bindparam(c) for c in (*_USAGE_COUNTS, "total_tokens")})
            )
            connection.execute(statement, updates)


READ_MODELS: tuple[type[SqlReadModel], ...] = (
    WorkingSetModel,
    ArchivesModel,
    AuditModel,
    UsageModel,
)
READ_MODEL_NAMES: tuple[str, ...] = tuple(m.name for m in READ_MODELS)


# ------------------------------------------------------------------ queries
WorkingSetOrder = str  # "last_activity" | "created" | "key" (validated by the caller)


def query_working_set(
    connection: Connection,
    *,
    account_id: str | None,
    include_evicted: bool,
    order: WorkingSetOrder,
    limit: int,
    offset: int,
) -> list[dict[str, Any]]:
    """Working-set rows, newest activity (or creation) first; ``key`` orders by key."""
    t = working_set_table
    query = select(t)
    if account_id is not None:
        query = query.where(t.c.account_id == account_id)
    if not include_evicted:
        query = query.where(t.c.status == LIVE)
    if order == "created":
        query = query.order_by(t.c.created_at_us.desc(), t.c.account_id, t.c.session_key)
    elif order == "key":
        query = query.order_by(t.c.session_key, t.c.account_id)
    else:
        query = query.order_by(t.c.last_activity_us.desc(), t.c.account_id, t.c.session_key)
    rows = connection.execute(query.limit(limit).offset(offset)).mappings()
    return [dict(row) for row in rows]


def query_idle(
    connection: Connection, *, account_id: str | None, before_us: int
) -> list[dict[str, Any]]:
    """Live sessions whose last activity is older than ``before_us``, by (account, key)."""
    t = working_set_table
    query = select(t).where(t.c.status == LIVE, t.c.last_activity_us < before_us)
    if account_id is not None:
        query = query.where(t.c.account_id == account_id)
    rows = connection.execute(query.order_by(t.c.account_id, t.c.session_key)).mappings()
    return [dict(row) for row in rows]


def query_archives(
    connection: Connection, *, session_id: UUID, include_merged: bool
) -> list[dict[str, Any]]:
    """The archives of one session in the order they were made."""
    t = archives_table
    query = select(t).where(t.c.session_id == session_id)
    if not include_merged:
        query = query.where(t.c.live.is_(True))
    rows = connection.execute(query.order_by(t.c.ordinal, t.c.position)).mappings()
    return [
        {
            **row,
            "message_ids": tuple(json.loads(row["message_ids"])),
            "merged_from": tuple(json.loads(row["merged_from"])),
        }
        for row in rows
    ]


def query_audit(
    connection: Connection,
    *,
    account_id: str | None,
    session_id: UUID | None,
    since_us: int | None,
    until_us: int | None,
    types: Iterable[str] | None,
    limit: int,
    offset: int,
) -> list[dict[str, Any]]:
    """Audit rows in log order, filtered; ``until`` is exclusive."""
    t = audit_table
    query = select(t)
    if account_id is not None:
        query = query.where(t.c.account_id == account_id)
    if session_id is not None:
        query = query.where(t.c.session_id == session_id)
    if since_us is not None:
        query = query.where(t.c.timestamp_us >= since_us)
    if until_us is not None:
        query = query.where(t.c.timestamp_us < until_us)
    if types is not None:
        query = query.where(t.c.event_type.in_(list(types)))
    rows = connection.execute(query.order_by(t.c.position).limit(limit).offset(offset))
    return [dict(row) for row in rows.mappings()]


def query_usage(
    connection: Connection, *, account_id: str | None, session_id: UUID | None
) -> list[dict[str, Any]]:
    """Usage rows by (account, key, tool)."""
    t = usage_table
    query = select(t)
    if account_id is not None:
        query = query.where(t.c.account_id == account_id)
    if session_id is not None:
        query = query.where(t.c.session_id == session_id)
    rows = connection.execute(query.order_by(t.c.account_id, t.c.session_key, t.c.tool_name))
    return [dict(row) for row in rows.mappings()]


def dump_rows(connection: Connection, model: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of a read model's tables, sorted (to compare two builds of it)."""
    classes = {m.name: m for m in READ_MODELS}
    tables = classes[model].tables
    return {
        t.name: sorted((tuple(row) for row in connection.execute(select(t))), key=lambda r: repr(r))
        for t in tables
    }
