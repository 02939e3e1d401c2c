"""Stored facts: what the read models need of an event, kept next to it in the store.

Every event row of the store also holds a ``StoredFacts`` record: the
session's tenant and key, the event type, the actor, the session's counters
and status right after the event (messages, pending tokens, user turns,
commits, live archives, last commit time), the tool call it reports, and a
one-line human summary. They are written in the same statement as the event,
so they can never disagree with it or lag behind it; read models are then
kept set-wise in SQL (the working set copies a session's last facts, usage
sums tool calls) instead of decoding every payload. They are derived from the
event and the session state it leads to, so ``verify`` recomputes them while
it replays each session. Rows of the compact stored form (format 2) leave the
summary empty: it is derived from the event when read (``summarize``), which
saves some fifty bytes a message.

Slim rows. A session's first row holds every fact; the rows after it, as
written since slim rows exist, leave empty what that first row or the row's
own topic already says (``slim_facts``): the tenant and key (always the first
row's), the event type when the topic is its short name (format 2) -- except
for the events that carry archives, which a partial index finds by type --,
the five actor columns when the actor is the one who started the session (an
empty ``actor_account``, which a real actor never has, says so), and the
status when it is ``live``. Some seventy bytes a message. Rows written
before, with every column filled, stay as they are and read the same: readers
fill a slim row in from its session's first row
(``chatledger.adapters.fact_reads``), and ``edited_facts`` accepts either
form. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from itertools import accumulate, repeat
from operator import eq, is_
from typing import NamedTuple

from chatledger.domain.events import (
    EVENT_TYPES,
    ArchiveMerged,
    Closed,
    CommitFailed,
    Committed,
    CompactionCleared,
    CompactionPrepared,
    Deleted,
    Erased,
    Evicted,
    ExtractionAdvanced,
    Forked,
    ItemsRemoved,
    MessageAdded,
    Reactivated,
    Restarted,
    Started,
    StateChanged,
    TailReplaced,
    TaskStateChanged,
    UsageImported,
)
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.session import LIVE, SessionCounters
from chatledger.domain.timestamps import to_micros
from chatledger.domain.values import Principal, ToolCall, printable
from chatledger.projections.archive_events import ARCHIVE_EVENT_TYPES

_SUMMARY_ERROR_CHARS = 80
EVENT_NAMES: frozenset[str] = frozenset(cls.__name__ for cls in EVENT_TYPES)


class StoredFacts(NamedTuple):
    """The facts columns of one stored event (same names as the columns)."""

    event_type: str
    tenant: str
    session_key: str
    actor_account: str
    actor_user: str
    actor_agent: str
    actor_role: str
    trace_id: str
    # The session right after the event:
    message_count: int
    pending_tokens: int
    turn_count: int
    commit_count: int
    archive_count: int  # live archives
    last_commit_us: int | None
    status: str  # live, evicted or closed
    # The tool call a message reports:
    tool_name: str | None
    tool_status: str | None
    prompt_tokens: int
    completion_tokens: int
    summary: str  # "" in rows of format 2: summarize(event) gives it
    idempotency_key: str | None  # the caller's key of the write this event starts
    # Usage imported from an earlier system (UsageImported): calls and failures it counts;
    # None for a tool call reported by a message (one call, its status says which).
    tool_calls: int | None
    tool_failures: int | None


FACT_COLUMNS: tuple[str, ...] = StoredFacts._fields
# A StoredFacts of a tuple as it stands: tuple.__new__ itself (C), not _make's Python.
_make = partial(tuple.__new__, StoredFacts)
_NAMED_BY_TYPE = frozenset(ARCHIVE_EVENT_TYPES)  # keep their event type (a partial index)
_SAME_ACTOR = ("", "", "", "", "")  # the five actor columns of a slim row: the starter's


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def stored_facts(
    event: SessionEvent,
    tenant: str,
    key: str,
    after: SessionCounters,
    *,
    summary: bool = False,
    first: Principal | None = None,
) -> StoredFacts:
    """The facts of ``event``, of the session ``(tenant, key)``, which left it at ``after``;
    ``summary`` for a row of format 1, which stores the summary too. With ``first``, the
    actor who started the session, a row after the first is slim (see the module doc)."""
    a = event.actor
    last_commit = after.last_commit_at
    last_us = None if last_commit is None else to_micros(last_commit)
    if first is None or event.originator_version == 1:
        head: tuple[object, ...] = (
            type(event).__name__, tenant, key, *_actor_fields(a), after.message_count,
            after.pending_tokens, after.turn_count, after.commit_count, after.archive_count,
            last_us, after.status,
        )  # fmt: skip
    else:  # slim
        name = type(event).__name__
        named = name if summary or name in _NAMED_BY_TYPE else ""
        status = after.status
        # (Principal is a frozen model of five strings: its __dict__ is those fields.)
        same = a is first or a.__dict__ == first.__dict__
        head = (
            named, "", "", *(_SAME_ACTOR if same else _actor_fields(a)), after.message_count,
            after.pending_tokens, after.turn_count, after.commit_count, after.archive_count,
            last_us, "" if status == LIVE else status,
        )  # fmt: skip
    write_key = event.idempotency_key
    line = summarize(event) if summary else ""
    # _make: a tuple of the fields as it stands (the generated __new__ binds 23 arguments).
    if isinstance(event, UsageImported):
        return _make((
            *head, event.tool_name, "imported", event.prompt_tokens, event.completion_tokens,
            line, write_key, event.call_count, event.fail_count,
        ))  # fmt: skip
    tool = event.message.tool_call if isinstance(event, MessageAdded) else None
    if tool is None:
        return _make((*head, None, None, 0, 0, line, write_key, None, None))
    return _make((
        *head, tool.tool_name, tool.status, tool.prompt_tokens, tool.completion_tokens,
        line, write_key, None, None,
    ))  # fmt: skip


def slim_facts(facts: StoredFacts, version: int, first: Principal, *, compact: bool) -> StoredFacts:
    """The slim form of a row's full ``facts`` (what ``stored_facts`` with ``first`` gives):
    the row is at ``version`` of a session started by ``first``; ``compact`` if its topic
    is the event type's short name (format 2)."""
    if version == 1:
        return facts
    named = facts.event_type
    if compact and named not in _NAMED_BY_TYPE:
        named = ""
    actor = facts[3:8]
    if actor == _actor_fields(first):
        actor = _SAME_ACTOR
    status = "" if facts.status == LIVE else facts.status
    return _make((named, "", "", *actor, *facts[8:14], status, *facts[15:]))


def edited_facts(
    stored: Sequence[object], full: StoredFacts, version: int, first: Principal, *, compact: bool
) -> list[str] | None:
    """None if a row's ``stored`` facts are ``full`` in one of the forms a row may hold
    them -- whole (every row written before slim rows, and every first row) or slim --
    else the columns that differ from the form it holds (an empty list if none held)."""
    found = tuple(stored)
    if found == full:
        return None
    slim = slim_facts(full, version, first, compact=compact)
    if found == slim:
        return None
    # The form the row is in: a slim one has no tenant.
    wanted = slim if version != 1 and found[1:2] == ("",) else full
    return [
        name for name, want, got in zip(FACT_COLUMNS, wanted, found, strict=False) if want != got
    ]


_NO_TOOL = (None, None, 0, 0)


def message_run_facts(
    roles: Sequence[str],
    tool_calls: Sequence[ToolCall | None],
    actors: Sequence[Principal],
    keys: Sequence[str | None],
    tokens: Sequence[int],
    tenant: str,
    key: str,
    before: SessionCounters,
    after: SessionCounters,
    first: Principal,
    *,
    slim: bool,
) -> list[tuple[object, ...]]:
    """The stored facts of a run of format-2 ``MessageAdded`` rows after a session's first,
    as columns (one tuple per fact column, one value per row): the roles and tool calls
    of the events' messages, their actors, idempotency keys and message tokens, of the
    session ``(tenant, key)`` at
    ``before`` the run and ``after`` it, started by ``first``; ``slim`` for the slim form.
    Row by row, what ``stored_facts`` gives (``slim_facts`` of it with ``slim``): the
    deep check compares a run's stored columns with these at once."""
    count = len(roles)
    if not count:
        return [()] * len(FACT_COLUMNS)

    def repeated(value: object) -> tuple[object, ...]:
        return (value,) * count

    status = after.status
    starter = _actor_fields(first) if slim else None
    only = actors[0]
    if all(map(is_, actors, repeat(only, count))):  # one actor (the usual run): repeated
        fields = _actor_fields(only)
        actor_columns = [*map(repeated, _SAME_ACTOR if fields == starter else fields)]
    else:
        distinct = dict(zip(map(id, actors), actors, strict=True))  # a run has few actors
        actor_of = {i: _actor_fields(a) for i, a in distinct.items()}
        actor_of = {i: _SAME_ACTOR if f == starter else f for i, f in actor_of.items()}
        actor_columns = list(zip(*map(actor_of.__getitem__, map(id, actors)), strict=True))
    if slim:
        head = [repeated(""), repeated(""), repeated("")]
        status_column = repeated("" if status == LIVE else status)
    else:
        head = [repeated("MessageAdded"), repeated(tenant), repeated(key)]
        status_column = repeated(status)
    last_commit = after.last_commit_at
    if tool_calls.count(None) == count:
        tools: list[tuple[object, ...]] = [repeated(None), repeated(None), repeated(0), repeated(0)]
    else:
        tools = list(zip(*(
            _NO_TOOL if t is None
            else (t.tool_name, t.status, t.prompt_tokens, t.completion_tokens)
            for t in tool_calls
        ), strict=True))  # fmt: skip
    return [
        *head,
        *actor_columns,
        tuple(range(before.message_count + 1, before.message_count + count + 1)),
        tuple(accumulate(tokens, initial=before.pending_tokens))[1:],
        tuple(accumulate(map(eq, roles, repeat("user", count)), initial=before.turn_count))[1:],
        repeated(after.commit_count),
        repeated(after.archive_count),
        repeated(None if last_commit is None else to_micros(last_commit)),
        status_column,
        *tools,
        repeated(""),  # format 2 stores no summary
        tuple(keys),
        repeated(None),
        repeated(None),
    ]


def _actor_fields(a: Principal) -> tuple[str, str, str, str, str]:
    return (a.account_id, a.user_id, a.agent_id, a.role, a.trace_id)


def summarize(event: SessionEvent) -> str:
    """A short, human line saying what ``event`` did (no message content: it may be private).

    Control characters (from an error text, say) become spaces: the line is
    kept in a text column, and PostgreSQL refuses NUL there.
    """
    text = _summary(event)
    # isprintable() is False for every control character (and for a few more): a
    # quick pass for the usual line, the replacing one only where it may change it.
    return text if text.isprintable() else printable(text)


def _summary(event: SessionEvent) -> str:
    if isinstance(event, MessageAdded):
        m = event.message
        text = f"{m.role} message {m.id} ({_count(m.tokens, 'token')})"
        tool = m.tool_call
        if tool is not None:
            used = tool.prompt_tokens + tool.completion_tokens
            text += f"; tool {tool.tool_name} {tool.status}, {_count(used, 'token')}"
        return text
    if isinstance(event, Committed):
        count = _count(len(event.archive.message_ids), "message")
        return f"committed {count} into archive {event.archive.archive_id}"
    if isinstance(event, ArchiveMerged):
        sources = event.source_archive_ids
        return f"merged {len(sources)} archives into {event.archive.archive_id}"
    if isinstance(event, Started):
        return f"started session {event.key!r} in account {event.tenant!r}"
    if isinstance(event, Forked):
        return f"forked from {event.origin_key!r} at version {event.origin_version}"
    if isinstance(event, CommitFailed):
        error = event.error.strip()
        if len(error) > _SUMMARY_ERROR_CHARS:
            error = error[: _SUMMARY_ERROR_CHARS - 1] + "…"
        return f"commit of {_count(event.message_count, 'message')} failed: {error}"
    if isinstance(event, Evicted):
        idle = "" if event.idle_seconds is None else f", idle {event.idle_seconds:.0f}s"
        return f"evicted ({event.reason}{idle})"
    if isinstance(event, Closed):
        return "closed by the client"
    if isinstance(event, Reactivated):
        return f"reactivated by a new message (was {event.previous_status})"
    if isinstance(event, Deleted):
        return "deleted (the key starts afresh)"
    if isinstance(event, UsageImported):
        used = event.prompt_tokens + event.completion_tokens
        return (
            f"imported usage of tool {event.tool_name}: {_count(event.call_count, 'call')}, "
            f"{_count(used, 'token')}"
        )
    if isinstance(event, TaskStateChanged):
        return "working state changed"
    if isinstance(event, ExtractionAdvanced):
        return f"extraction read {_count(event.watermark, 'item')}"
    if isinstance(event, CompactionPrepared):
        return f"compaction prepared ({_count(event.message_count, 'item')})"
    if isinstance(event, CompactionCleared):
        return f"compaction token {event.reason}"
    if isinstance(event, Restarted):
        return "started afresh after a deletion"
    if isinstance(event, Erased):
        return f"content erased ({event.scope}; {_count(len(event.key_ids), 'key')} destroyed)"
    if isinstance(event, ItemsRemoved):
        verb = {"remove": "removed", "pop": "popped", "clear": "cleared"}[event.reason]
        return f"{verb} {_count(len(event.message_ids), 'item')} from the buffer"
    if isinstance(event, TailReplaced):
        return (
            f"replaced the last {_count(len(event.removed_ids), 'item')} with "
            f"{_count(len(event.messages), 'item')}"
        )
    if isinstance(event, StateChanged):
        keys = ", ".join(sorted([*event.changes, *event.removed])[:5])
        return f"state changed ({_count(len(event.changes) + len(event.removed), 'key')}: {keys})"
    return type(event).__name__
