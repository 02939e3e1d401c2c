"""What each page of the viewer shows, gathered through chatledger's public API.

One function per page takes the ledger, its read models and the principal
fixed when the server started, and returns a frozen dataclass the template
renders; nothing here knows HTTP. Every read names the account of the URL,
and the ledger's tenant rule refuses an account the principal may not read
(``AccessDenied``) or a key its account does not have (``UnknownSession``).

The timeline never loads a session's state: its header is the newest event's
stored facts, its window one page of ``history``/``timeline`` (newest first
by default), its charts a sample of evenly spaced versions. A page therefore
costs the same for a session of 100 events or of 100,000.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chatledger.domain.events import (
    ArchiveMerged,
    CommitFailed,
    Committed,
    Evicted,
    Forked,
    MessageAdded,
    Reactivated,
    Started,
)
from chatledger.domain.session import SessionStatus
from chatledger.domain.values import Message, Principal
from chatledger.errors import InvalidInput
from chatledger.ledger import SessionLedger
from chatledger.projections.describe import describe_event
from chatledger.read_models import (
    ReadModels,
    TimelineEntry,
    ToolUsage,
    WorkingSetEntry,
    WorkingSetOrder,
)
from chatledger.results import ContextView, LedgerEvent, SessionDiff, SessionView
from chatledger.web import charts as plots
from chatledger.web.verdicts import Verdict, VerdictCache, verify_session

SHOWN_MESSAGES = 200  # newest buffer / context messages shown on a version page
SHOWN_DIFF_MESSAGES = 500
SAMPLE_POINTS = 150
MAX_DIFF_SPAN = 20_000  # versions a diff page may decode
ORDERS: dict[str, WorkingSetOrder] = {
    "last_activity": "last_activity",
    "created": "created",
    "key": "key",
    "pending_tokens": "pending_tokens",
}
STATUSES: dict[str, SessionStatus | None] = {
    "live": "live",
    "evicted": "evicted",
    "closed": "closed",
    "erased": "erased",
    "all": None,
}


# ------------------------------------------------------------------ sessions list
@dataclass(frozen=True)
class SessionRow:
    entry: WorkingSetEntry
    verdict: Verdict | None


@dataclass(frozen=True)
class SessionsPage:
    rows: tuple[SessionRow, ...]
    order: str
    status: str
    search: str
    account: str | None  # the account filter (admins), None for all
    page: int
    has_next: bool
    page_size: int
    lag: int  # events recorded that the working set has not applied yet


def sessions_page(
    models: ReadModels,
    ledger: SessionLedger,
    principal: Principal,
    cache: VerdictCache,
    *,
    order: str,
    status: str,
    search: str,
    account: str | None,
    page: int,
    page_size: int,
    verify: bool,
) -> SessionsPage:
    if order not in ORDERS:
        raise InvalidInput(f"order must be one of {', '.join(ORDERS)}.")
    if status not in STATUSES:
        raise InvalidInput(f"status must be one of {', '.join(STATUSES)}.")
    if page < 1:
        raise InvalidInput("page must be 1 or more.")
    entries = models.working_set(
        principal,
        order=ORDERS[order],
        limit=page_size + 1,
        offset=(page - 1) * page_size,
        include_evicted=status == "all",
        status=STATUSES[status],
        search=search or None,
        account_id=account,
    )
    shown = entries[:page_size]
    if verify:
        for entry in shown:
            verify_session(ledger, principal, entry.account_id, entry.session_key, cache)
    lag = max(0, models.head() - min(models.positions().values(), default=0))
    return SessionsPage(
        rows=tuple(SessionRow(e, cache.get(e.account_id, e.session_key)) for e in shown),
        order=order,
        status=status,
        search=search,
        account=account,
        page=page,
        has_next=len(entries) > page_size,
        page_size=page_size,
        lag=lag,
    )


# ------------------------------------------------------------------ timeline
@dataclass(frozen=True)
class Link:
    """A session (and version) another one points to: a fork's origin."""

    account: str
    key: str
    version: int


@dataclass(frozen=True)
class EventRow:
    """One event as the timeline shows it."""

    facts: TimelineEntry
    description: str
    detail: str = ""  # the error of a failed commit, a merge's sources, an eviction's reason
    origin: Link | None = None  # a fork's origin

    @property
    def type(self) -> str:
        return self.facts.event_type

    @property
    def version(self) -> int:
        return self.facts.version

    @property
    def marked(self) -> bool:
        """Events other than messages, which a reader looks for."""
        return self.facts.event_type != "MessageAdded"


@dataclass(frozen=True)
class TimelinePage:
    account: str
    key: str
    head: TimelineEntry
    first: TimelineEntry
    rows: tuple[EventRow, ...]
    newest: bool  # the window ends at the head: live updates apply
    older: int | None  # before_version of the previous page
    newer: int | None  # after_version of the next page
    charts: tuple[plots.Chart, ...]
    strip: plots.Chart
    usage: tuple[ToolUsage, ...]
    verdict: Verdict | None
    page_size: int
    sampled: bool  # the charts show a sample of the versions


def event_rows(
    ledger: SessionLedger,
    principal: Principal,
    account: str,
    key: str,
    facts: Sequence[TimelineEntry],
) -> list[EventRow]:
    """Timeline rows: each event's stored facts with a description of its payload."""
    if not facts:
        return []
    events = ledger.history(
        principal,
        key,
        after_version=facts[0].version - 1,
        limit=facts[-1].version - facts[0].version + 1,
        account_id=account,
    )
    by_version = {e.version: e for e in events}
    return [_row(entry, by_version.get(entry.version), account) for entry in facts]


def _row(facts: TimelineEntry, item: LedgerEvent | None, account: str) -> EventRow:
    if item is None:  # the row's payload is gone (edited by hand): show the facts alone
        return EventRow(facts=facts, description=facts.summary)
    event = item.event
    detail = ""
    origin = None
    if isinstance(event, CommitFailed):
        detail = event.error
    elif isinstance(event, ArchiveMerged):
        detail = "sources: " + ", ".join(event.source_archive_ids)
    elif isinstance(event, Committed):
        detail = f"archive {event.archive.archive_id}: {event.archive.abstract}"
    elif isinstance(event, Forked):
        origin = Link(account=account, key=event.origin_key, version=event.origin_version)
    elif isinstance(event, Evicted):
        detail = f"reason: {event.reason}"
    elif isinstance(event, Reactivated):
        detail = f"was {event.previous_status}"
    elif isinstance(event, MessageAdded) and event.message.tool_call is not None:
        tool = event.message.tool_call
        detail = (
            f"tool {tool.tool_name} {tool.status}: {tool.prompt_tokens} prompt + "
            f"{tool.completion_tokens} completion tokens"
        )
    return EventRow(facts=facts, description=describe_event(event), detail=detail, origin=origin)


def timeline_page(
    models: ReadModels,
    ledger: SessionLedger,
    principal: Principal,
    cache: VerdictCache,
    account: str,
    key: str,
    *,
    before: int | None,
    after: int | None,
    around: int | None,
    page_size: int,
    version_url: str,
    around_url: str,
) -> TimelinePage:
    """``version_url``/``around_url`` are format strings with ``{v}`` for chart links."""
    head = models.timeline(principal, key, newest=True, limit=1, account_id=account)[-1]
    if around is not None:
        after = max(0, around - page_size // 2 - 1)
    if after is not None:
        window = models.timeline(
            principal, key, after_version=after, limit=page_size, account_id=account
        )
    else:
        window = models.timeline(
            principal, key, before_version=before, newest=True, limit=page_size, account_id=account
        )
    if not window:  # past either end: show the newest page
        window = models.timeline(principal, key, newest=True, limit=page_size, account_id=account)
    first = (
        window[0]
        if window[0].version == 1
        else models.timeline(principal, key, limit=1, account_id=account)[0]
    )
    rows = event_rows(ledger, principal, account, key, window)
    sample = models.timeline_sample(principal, key, points=SAMPLE_POINTS, account_id=account)
    usage = tuple(models.usage(principal, key, account_id=account))
    return TimelinePage(
        account=account,
        key=key,
        head=head,
        first=first,
        rows=tuple(rows),
        newest=window[-1].version == head.version,
        older=window[0].version if window[0].version > 1 else None,
        newer=window[-1].version if window[-1].version < head.version else None,
        charts=plots.session_charts(sample, usage, around_url),
        strip=window_strip(rows, version_url),
        usage=usage,
        verdict=cache.get(account, key),
        page_size=page_size,
        sampled=len(sample) < head.version,
    )


def window_strip(rows: Sequence[EventRow], version_url: str) -> plots.Chart:
    """The window's events on a time axis, coloured by type."""
    return plots.strip_chart(
        "Events on this page, by time",
        "One mark per event, coloured by its type; click one to travel to that version.",
        [
            (
                r.facts.timestamp.timestamp(),
                f"ev-{r.type}",
                version_url.format(v=r.version),
                f"v{r.version} {r.type} at {r.facts.timestamp:%H:%M:%S}",
            )
            for r in rows
        ],
    )


# ------------------------------------------------------------------ time travel
@dataclass(frozen=True)
class VersionPage:
    account: str
    key: str
    version: int
    head: int
    event: EventRow
    state: SessionView
    context: ContextView
    buffer: tuple[Message, ...]  # the newest SHOWN_MESSAGES of the buffer
    hidden_buffer: int
    context_messages: tuple[Message, ...]
    hidden_context: int
    budget: int
    started: Started | Forked | None
    erased: bool  # the session's content was erased (at any version)


def version_page(
    models: ReadModels,
    ledger: SessionLedger,
    principal: Principal,
    account: str,
    key: str,
    version: int,
    budget: int,
) -> VersionPage:
    head = models.timeline(principal, key, newest=True, limit=1, account_id=account)[-1]
    if version < 1 or version > head.version:
        raise InvalidInput(
            f"Session {key!r} has versions 1 to {head.version}; there is no version {version}."
        )
    facts = models.timeline(principal, key, after_version=version - 1, limit=1, account_id=account)
    (row,) = event_rows(ledger, principal, account, key, facts)
    state = ledger.session(principal, key, at_version=version, account_id=account)
    context = ledger.context(principal, key, budget, at_version=version, account_id=account)
    started = None
    if version == 1:
        first = ledger.history(principal, key, limit=1, account_id=account)[0].event
        started = first if isinstance(first, Started | Forked) else None
    return VersionPage(
        account=account,
        key=key,
        version=version,
        head=head.version,
        event=row,
        state=state,
        context=context,
        buffer=state.buffer[-SHOWN_MESSAGES:],
        hidden_buffer=max(0, len(state.buffer) - SHOWN_MESSAGES),
        context_messages=context.messages[-SHOWN_MESSAGES:],
        hidden_context=max(0, len(context.messages) - SHOWN_MESSAGES),
        budget=budget,
        started=started,
        erased=head.status == "erased",
    )


# ------------------------------------------------------------------ diff
@dataclass(frozen=True)
class DiffPage:
    account: str
    key: str
    diff: SessionDiff
    messages: tuple[Message, ...]
    hidden_messages: int
    type_counts: tuple[tuple[str, int], ...]


def diff_page(
    ledger: SessionLedger,
    principal: Principal,
    account: str,
    key: str,
    from_version: int,
    to_version: int,
) -> DiffPage:
    if from_version > to_version:
        from_version, to_version = to_version, from_version
    if to_version - from_version > MAX_DIFF_SPAN:
        raise InvalidInput(
            f"Versions {from_version} and {to_version} are more than {MAX_DIFF_SPAN:,} apart; "
            "a diff shows every message between them. Pick two versions closer together."
        )
    change = ledger.diff(principal, key, from_version, to_version, account_id=account)
    counts: dict[str, int] = {}
    for name in change.event_types:
        counts[name] = counts.get(name, 0) + 1
    return DiffPage(
        account=account,
        key=key,
        diff=change,
        messages=change.messages_added[:SHOWN_DIFF_MESSAGES],
        hidden_messages=max(0, len(change.messages_added) - SHOWN_DIFF_MESSAGES),
        type_counts=tuple(sorted(counts.items())),
    )
