"""Persisted read models: their SQL tables, how a span of the log updates them, queries.

Three read models, each a ``SqlReadModel`` with a name, a version and its own
tables: the working set (one row per session), the archive history and tool
usage. (The audit log needs no copy: it is the store's own rows with their
stored facts, see ``chatledger.adapters.audit_log.query_audit``.)
``apply(connection, span)`` brings a model from one log position to another
inside the projector's transaction, which also moves the model's tracking
position (see ``chatledger.adapters.sql_projector``), so it never commits by
itself.

The working set and usage are set-wise SQL over the stored facts every event
row carries (``chatledger.projections.facts``), the same statements for five
events of a live follower and for the whole log of a rebuild: a session's
working-set row is the facts of its last event (counters and status right
after it), and usage adds up the tool-call columns into the stored totals.
The SQL reads ``span.source``: the events table itself when the read models
share the ledger's database, or a staging table the projector fills with the
span's fact rows when they live elsewhere. The archive history needs archive
ids, covered ids and lineage, so it decodes just the events that carry archives
(commits, merges, forks) with the pure fold of
``chatledger.projections.archive_events``. No read model holds content (message
text, summaries, state values): erasure never has anything to clean up here.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol
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
    select,
    text,
    update,
)

from chatledger.adapters.fact_reads import status_sql
from chatledger.adapters.schema import LogCursor, events_table
from chatledger.domain.access import SCOPE_PREFIX
from chatledger.domain.limits import MAX_INT, MAX_TOKENS
from chatledger.domain.session import LIVE
from chatledger.projections.archive_events import (
    ArchiveEvent,
    ArchivesMerged,
    ArchivesRetired,
    archive_changes,
)
from chatledger.projections.facts import FACT_COLUMNS

read_model_metadata = MetaData()
_position_type = BigInteger().with_variant(Integer(), "sqlite")
_ORDINAL_STEP = 1024  # room for the archives a fork copies at one position

tracking_table = Table(
    "chatledger_projections",
    read_model_metadata,
    Column("name", String(64), primary_key=True),
    Column("version", Integer, nullable=False),
    # The last event applied: its position and its transaction (LogCursor; the
    # transaction is 0 on SQLite, where positions alone are the log order).
    Column("position", BigInteger, nullable=False),
    Column("tx_id", BigInteger, nullable=False, server_default="0"),
)

skips_table = Table(
    "chatledger_projection_skips",
    read_model_metadata,
    Column("name", String(64), primary_key=True),
    Column("position", BigInteger, primary_key=True),
    Column("error", Text, nullable=False),
    Column("skipped_at_us", BigInteger, nullable=False),
)
"""Events a read model could not apply and skipped, so that the log could go on (see
``Projector._isolate``); an operator fixes the cause and rebuilds the model."""

stage_table = Table(
    "chatledger_projection_stage",
    read_model_metadata,
    Column("id", _position_type, primary_key=True, autoincrement=False),
    *(
        Column(c.name, c.type, nullable=c.nullable)
        for c in events_table.columns
        if c.name in ("originator_id", "originator_version", "timestamp_us", *FACT_COLUMNS, "tx_id")
    ),
)
"""A span's fact rows, copied here when the read models live in another database."""
STAGE_COLUMNS: tuple[str, ...] = tuple(c.name for c in stage_table.columns)

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
    Column("message_count", BigInteger, nullable=False),
    Column("pending_tokens", BigInteger, nullable=False),
    Column("turn_count", BigInteger, nullable=False),
    Column("commit_count", BigInteger, nullable=False),
    Column("archive_count", BigInteger, nullable=False),
    Column("last_commit_us", BigInteger, nullable=True),
    Column("status", String(16), nullable=False),
    Column("version", BigInteger, nullable=False),
    Index("chatledger_working_set_activity", "status", "last_activity_us"),
    Index("chatledger_working_set_account", "account_id", "status", "last_activity_us"),
)

archives_table = Table(
    "chatledger_archives",
    read_model_metadata,
    Column("session_id", Uuid(as_uuid=True), primary_key=True),
    Column("archive_id", Text, primary_key=True),
    Column("account_id", Text, nullable=False),
    Column("session_key", Text, nullable=False),
    # No overview or abstract: content is read from the archive's event (at
    # ``position``), so this table holds nothing erasure must reach.
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


class ArchiveEvents(Protocol):
    """Reads the events that carry archives (commits, merges, forks) in a span, decoded."""

    def archive_events(self, after: LogCursor, last: LogCursor) -> list[ArchiveEvent]: ...


@dataclass(frozen=True)
class Span:
    """The events after ``after`` up to and including ``last`` in log order, as a model sees them.

    ``where()`` is the SQL condition selecting exactly the span's rows of
    ``source``, with ``bounds`` as its parameters: by position where the log
    order is the position (SQLite), by ``(tx_id, id)`` where it is not
    (PostgreSQL; see ``chatledger.adapters.schema.LogCursor``).
    """

    after: LogCursor
    last: LogCursor
    source: str  # the table holding the span's fact rows
    log: ArchiveEvents
    shared: bool = True  # ``source`` is the events table itself (the whole log)
    at_head: bool = False  # nothing was recorded after ``last`` when the span was taken
    by_transaction: bool = False  # the log order is (tx_id, id), not the position

    def where(self, alias: str = "") -> str:
        a = f"{alias}." if alias else ""
        if self.by_transaction:
            return (
                f"({a}tx_id, {a}id) > (:after_tx, :after) "
                f"AND ({a}tx_id, {a}id) <= (:last_tx, :last)"
            )
        return f"{a}id > :after AND {a}id <= :last"

    @property
    def bounds(self) -> dict[str, int]:
        bounds = {"after": self.after.position, "last": self.last.position}
        if self.by_transaction:
            bounds.update(after_tx=self.after.tx, last_tx=self.last.tx)
        return bounds


class SqlReadModel(ABC):
    """A read model kept in SQL tables; ``version`` changes whenever its rows would."""

    name: ClassVar[str]
    version: ClassVar[int]
    tables: ClassVar[tuple[Table, ...]]

    @abstractmethod
    def apply(self, connection: Connection, span: Span) -> None:
        """Apply the span (none of it applied before) inside the caller's transaction."""


# ------------------------------------------------------------- working set
_WS_INSERT = """
INSERT INTO chatledger_working_set (session_id, account_id, user_id, agent_id, session_key,
    created_at_us, last_activity_us, message_count, pending_tokens, turn_count, commit_count,
    archive_count, last_commit_us, status, version)
SELECT originator_id, tenant, actor_user, actor_agent, session_key, timestamp_us,
    timestamp_us, 0, 0, 0, 0, 0, NULL, status, 0
FROM {source} WHERE {span} AND originator_version = 1
"""

# A session's row is the facts of its last event: its counters and status
# right after it, its time and version. (A slim row leaves a live status empty.)
_WS_UPDATE = """
UPDATE chatledger_working_set SET
    message_count = e.message_count,
    pending_tokens = e.pending_tokens,
    turn_count = e.turn_count,
    commit_count = e.commit_count,
    archive_count = e.archive_count,
    last_commit_us = e.last_commit_us,
    status = {status},
    last_activity_us = e.timestamp_us,
    version = e.originator_version
FROM ({touched}) AS d JOIN {source} e ON e.id = d.last_id
WHERE chatledger_working_set.session_id = d.session_id
"""

# The sessions with an event in the span, and their last one there: by
# grouping the span, or -- when the span reaches the head of the log and the
# log holds few sessions compared with the span, as in a rebuild -- by looking
# up the last event of every session created by then (the creation index, then
# the newest entries of its stream: at the head, that is the first one read).
# A session's events follow its versions in positions too, so its last event
# in the span is the one with the highest position, whatever the log order.
# The lookup by session relies on positions being the log order: SQLite only.
_TOUCHED_BY_SPAN = """
SELECT originator_id AS session_id, MAX(id) AS last_id
FROM {source} WHERE {span}
GROUP BY originator_id
"""
_TOUCHED_BY_SESSION = """
SELECT session_id, last_id FROM (
    SELECT c.originator_id AS session_id, (
        SELECT e.id FROM {source} e
        WHERE e.originator_id = c.originator_id AND e.id <= :last
        ORDER BY e.originator_version DESC LIMIT 1
    ) AS last_id
    FROM {source} c WHERE c.originator_version = 1 AND c.id <= :last
) AS s WHERE last_id > :after
"""
_FEW_SESSIONS = """
SELECT COUNT(*) FROM (
    SELECT 1 FROM {source} WHERE originator_version = 1 AND id <= :last LIMIT :few
) AS s
"""
_SESSIONS_PER_SPAN = 8  # look sessions up one by one when there are fewer than span / 8


class WorkingSetModel(SqlReadModel):
    """One row per session: who started it, counters, last activity, live/evicted/closed."""

    name = "working_set"
    version = 2
    tables = (working_set_table,)

    def apply(self, connection: Connection, span: Span) -> None:
        source = span.source
        where = span.where()
        connection.execute(text(_WS_INSERT.format(source=source, span=where)), span.bounds)
        touched = _TOUCHED_BY_SPAN
        # A staging table holds only the span (no earlier creations); before the
        # head, a session's newest entries may lie far past the span's end.
        few = (span.last.position - span.after.position) // _SESSIONS_PER_SPAN
        if span.shared and span.at_head and few and not span.by_transaction:
            # (a follower's small batch: no count)
            count = connection.execute(
                text(_FEW_SESSIONS.format(source=source)),
                {"last": span.last.position, "few": few},
            ).scalar_one()
            if count < few:
                touched = _TOUCHED_BY_SESSION
        statement = _WS_UPDATE.format(
            source=source, touched=touched.format(source=source, span=where), status=status_sql("e")
        )
        connection.execute(text(statement), span.bounds)


# -------------------------------------------------------------------- usage
# Stored totals are merged with the span's, never overwritten. Overflow-safe:
# each event's tokens count at most MAX_TOKENS (the input limit; older rows may
# hold more), so a span's sums stay far inside 64 bits, and adding them to the
# stored totals saturates at MAX_INT instead of failing the whole batch.
# A slim row (an empty tenant; see chatledger.projections.facts) names its session's
# account and key in the session's first row: looked up once per session and tool
# whose rows in the span are all slim, through the stream index. (A staging table
# holds its rows filled in already.) "WHERE true": SQLite's upsert after a join.
_FIRST_ROW = """(SELECT f.{column} FROM {source} f
        WHERE f.originator_id = g.originator_id AND f.originator_version = 1)"""
_USAGE_UPSERT = """
INSERT INTO chatledger_usage (session_id, tool_name, account_id, session_key, call_count,
    success_count, fail_count, prompt_tokens, completion_tokens, total_tokens)
SELECT g.originator_id, g.tool_name,
    CASE WHEN g.tenant <> '' THEN g.tenant ELSE {first_tenant} END,
    CASE WHEN g.tenant <> '' THEN g.session_key ELSE {first_key} END,
    g.call_count, g.success_count, g.fail_count, g.prompt_tokens, g.completion_tokens,
    g.total_tokens
FROM (
    SELECT originator_id, tool_name, MAX(tenant) AS tenant, MAX(session_key) AS session_key,
        SUM(COALESCE(tool_calls, 1)) AS call_count,
        SUM(CASE WHEN tool_calls IS NOT NULL THEN tool_calls - tool_failures
            WHEN tool_status = 'success' THEN 1 ELSE 0 END) AS success_count,
        SUM(CASE WHEN tool_calls IS NOT NULL THEN tool_failures
            WHEN tool_status = 'success' THEN 0 ELSE 1 END) AS fail_count,
        SUM({least}(prompt_tokens, {tokens})) AS prompt_tokens,
        SUM({least}(completion_tokens, {tokens})) AS completion_tokens,
        SUM({least}(prompt_tokens, {tokens}) + {least}(completion_tokens, {tokens}))
            AS total_tokens
    FROM {source} WHERE {span} AND tool_name IS NOT NULL
    GROUP BY originator_id, tool_name
) AS g WHERE true
ON CONFLICT (session_id, tool_name) DO UPDATE SET
    call_count = {add_call_count},
    success_count = {add_success_count},
    fail_count = {add_fail_count},
    prompt_tokens = {add_prompt_tokens},
    completion_tokens = {add_completion_tokens},
    total_tokens = {add_total_tokens}
"""
_USAGE_TOTALS = (
    "call_count", "success_count", "fail_count", "prompt_tokens", "completion_tokens",
    "total_tokens",
)  # fmt: skip


def _saturating_add(column: str) -> str:
    stored, new = f"chatledger_usage.{column}", f"excluded.{column}"
    return f"CASE WHEN {stored} > {MAX_INT} - {new} THEN {MAX_INT} ELSE {stored} + {new} END"


class UsageModel(SqlReadModel):
    """Per session and tool: calls, successes, failures and tokens, merged into stored totals."""

    name = "usage"
    version = 2
    tables = (usage_table,)

    def apply(self, connection: Connection, span: Span) -> None:
        least = "LEAST" if connection.dialect.name == "postgresql" else "MIN"
        statement = _USAGE_UPSERT.format(
            first_tenant=_FIRST_ROW.format(column="tenant", source=span.source),
            first_key=_FIRST_ROW.format(column="session_key", source=span.source),
            source=span.source,
            span=span.where(),
            least=least,
            tokens=MAX_TOKENS,
            **{f"add_{c}": _saturating_add(c) for c in _USAGE_TOTALS},
        )
        connection.execute(text(statement), span.bounds)


# ---------------------------------------------------------- archive history
class ArchivesModel(SqlReadModel):
    """Every archive ever made, live or merged, with its merge lineage."""

    name = "archives"
    version = 3  # 3: no overview and abstract (read from the events)
    tables = (archives_table,)

    def apply(self, connection: Connection, span: Span) -> None:
        t = archives_table
        new: dict[tuple[UUID, str], dict[str, Any]] = {}
        merged: list[dict[str, Any]] = []
        retired: list[dict[str, Any]] = []
        for event in span.log.archive_events(span.after, span.last):
            sid = event.session_id
            for index, change in enumerate(archive_changes(event)):
                if isinstance(change, ArchivesRetired):
                    for (session, _), made in new.items():
                        if session == sid:
                            made["live"] = False
                    retired.append({"_sid": sid})
                    continue
                if isinstance(change, ArchivesMerged):
                    for archive_id in change.archive_ids:
                        row = new.get((sid, archive_id))
                        if row is not None:  # created in this span: not stored yet
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
                elif not message_ids and event.origin_id is not None:
                    # A fork copies a merged archive without its sources: take the
                    # covered ids from the origin's history (projected before the fork).
                    origin = self._sources(connection, event.origin_id, [a.archive_id], new)
                    message_ids = json.loads(origin.get(a.archive_id, (0, "[]"))[1])
                new[(sid, a.archive_id)] = {
                    "session_id": sid,
                    "archive_id": a.archive_id,
                    "account_id": event.tenant,
                    "session_key": event.key,
                    "message_ids": json.dumps(message_ids),
                    "tokens": a.tokens,
                    "created_at_us": a.created_at_us,
                    "position": change.position,
                    "version": change.version,
                    "ordinal": ordinal,
                    "merged_into": None,
                    "merged_from": json.dumps(list(change.merged_from))
                    if change.merged_from
                    else "[]",
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
        if retired:  # before the inserts: archives made after a deletion stay live
            statement = (
                update(t)
                .where(and_(t.c.session_id == bindparam("_sid"), t.c.live.is_(True)))
                .values(live=False)
            )
            connection.execute(statement, retired)
        if new:
            connection.execute(t.insert(), list(new.values()))

    def _sources(
        self,
        connection: Connection,
        sid: UUID,
        archive_ids: Sequence[str],
        new: dict[tuple[UUID, str], dict[str, Any]],
    ) -> dict[str, tuple[int, str]]:
        """Ordinal and message ids (JSON) of each source archive, stored or new in the span."""
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


READ_MODELS: tuple[type[SqlReadModel], ...] = (
    WorkingSetModel,
    ArchivesModel,
    UsageModel,
)
READ_MODEL_NAMES: tuple[str, ...] = tuple(m.name for m in READ_MODELS)


# ------------------------------------------------------------------ queries
WorkingSetOrder = str  # "last_activity" | "created" | "key" | "pending_tokens" (validated)


def query_working_set(
    connection: Connection,
    *,
    account_id: str | None,
    include_evicted: bool,
    order: WorkingSetOrder,
    limit: int,
    offset: int,
    status: str | None = None,
    search: str | None = None,
) -> list[dict[str, Any]]:
    """Working-set rows, newest activity (or creation) first; ``key`` orders by key,
    ``pending_tokens`` most pending first. ``status`` keeps one status (over
    ``include_evicted``); ``search`` keeps keys containing it (case-insensitive)."""
    t = working_set_table
    query = select(t)
    query = query.where(~t.c.session_key.startswith(SCOPE_PREFIX, autoescape=True))
    if account_id is not None:
        query = query.where(t.c.account_id == account_id)
    if status is not None:
        query = query.where(t.c.status == status)
    elif not include_evicted:
        query = query.where(t.c.status == LIVE)
    if search:
        query = query.where(t.c.session_key.icontains(search, autoescape=True))
    if order == "pending_tokens":
        query = query.order_by(
            t.c.pending_tokens.desc(), t.c.last_activity_us.desc(), t.c.account_id, t.c.session_key
        )
    elif order == "created":
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
    query = query.where(~t.c.session_key.startswith(SCOPE_PREFIX, autoescape=True))
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
