"""The scripted demo behind ``chatledger demo``: one support conversation, told by the ledger.

``run_demo`` drives a ``SessionLedger`` it is given through the whole life of
a session (messages with tool-call usage, a commit, a commit whose summarizer
fails, more commits, an archive merge) and prints, with rich, what the ledger
recorded. Every claim it prints is read back from the ledger, not assumed.
Only the CLI imports this module; nothing here opens databases or deletes files.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from chatledger.domain.events import (
    ArchiveMerged,
    CommitFailed,
    Committed,
    Evicted,
    MessageAdded,
    Started,
)
from chatledger.domain.ports import Summarizer, Summary
from chatledger.domain.values import ArchiveSummary, Message, Principal
from chatledger.results import LedgerEvent, SessionView

if TYPE_CHECKING:
    from chatledger.ledger import SessionLedger

DEMO_KEY = "support-42"
DEMO_PRINCIPAL = Principal(
    account_id="acme", user_id="dana", agent_id="support-bot", trace_id="demo"
)

_LOOKUP = {
    "tool_name": "lookup_order",
    "status": "success",
    "prompt_tokens": 120,
    "completion_tokens": 30,
}
_REDIRECT = {
    "tool_name": "redirect_parcel",
    "status": "success",
    "prompt_tokens": 95,
    "completion_tokens": 22,
}

_OPENING: list[dict[str, Any]] = [
    {"role": "user", "content": "Hi, my order #1042 hasn't arrived yet. Can you check?"},
    {"role": "assistant", "content": "Of course. Let me look up order 1042."},
    {
        "role": "tool",
        "name": "lookup_order",
        "content": "Order 1042: shipped Monday with ParcelCo, tracking PC-88231, due Thursday.",
        "tool_call": _LOOKUP,
    },
    {
        "role": "assistant",
        "content": "It shipped Monday with ParcelCo (tracking PC-88231) and is due Thursday.",
    },
]
_FOLLOW_UP: list[dict[str, Any]] = [
    {"role": "user", "content": "Could it go to my office instead? I'm out Thursday."},
    {"role": "assistant", "content": "I can ask ParcelCo to redirect it. What's the address?"},
]
_DETAILS: list[dict[str, Any]] = [
    {"role": "user", "content": "12 Harbour Street, Leith, EH6 6LP."},
    {
        "role": "tool",
        "name": "redirect_parcel",
        "content": "Redirect accepted for PC-88231: 12 Harbour Street, Leith, EH6 6LP.",
        "tool_call": _REDIRECT,
    },
    {"role": "assistant", "content": "Done: ParcelCo will deliver to your office on Thursday."},
]
_CLOSING: list[dict[str, Any]] = [
    {"role": "user", "content": "Perfect, thanks!"},
    {"role": "assistant", "content": "You're welcome. Anything else about order 1042?"},
]


class _FailingOnce:
    """A summarizer whose next call fails, like a model timing out, then recovers."""

    def __init__(self, inner: Summarizer) -> None:
        self.inner = inner
        self.armed = True

    def summarize(self, messages: Sequence[Message]) -> Summary:
        self._fail_if_armed()
        return self.inner.summarize(messages)

    def merge(self, archives: Sequence[ArchiveSummary]) -> Summary:
        self._fail_if_armed()
        return self.inner.merge(archives)

    def _fail_if_armed(self) -> None:
        if self.armed:
            self.armed = False
            raise TimeoutError("summarizer timed out (simulated outage)")


@contextmanager
def _summarizer_outage(ledger: SessionLedger) -> Iterator[None]:
    original = ledger.summarizer
    ledger.summarizer = _FailingOnce(original)
    try:
        yield
    finally:
        ledger.summarizer = original


def run_demo(ledger: SessionLedger, console: Console, key: str = DEMO_KEY) -> None:
    """Play the scripted support session on ``ledger`` under ``key`` and print the ledger."""
    p = DEMO_PRINCIPAL

    def say(messages: list[dict[str, Any]]) -> None:
        for added, spec in zip(ledger.add_messages(p, key, messages), messages, strict=True):
            line = Text(f"  v{added.version:<3} {spec['role']:>9}: ", style="dim")
            console.print(line + Text(spec["content"]))

    def commit(label: str) -> None:
        result = ledger.commit(p, key)
        if result.archived:
            console.print(
                f"  [green]Committed[/] {len(result.message_ids)} messages "
                f"into archive {_short(result.archive_id)} ({label})"
            )
        else:
            console.print(f"  [red]{result.status}[/]: {result.reason} ({result.error})")

    console.rule(f"[bold]chatledger demo[/] — session {key!r} of account {p.account_id!r}")
    console.print("[bold]1. A customer asks about an order[/] (the tool call reports its usage)")
    say(_OPENING)
    commit("the opening exchange")

    console.print("\n[bold]2. A commit whose summarizer fails[/]")
    say(_FOLLOW_UP)
    before = ledger.session(p, key)
    with _summarizer_outage(ledger):
        failed = ledger.commit(p, key)
    after = ledger.session(p, key)
    last = ledger.history(p, key)[-1]
    console.print(f"  commit status: [red]{failed.status}[/] — {failed.error}")
    unchanged = [m.id for m in before.buffer] == [m.id for m in after.buffer] and (
        before.archives == after.archives
    )
    console.print(
        f"  buffer unchanged: [bold]{unchanged}[/] ({len(after.buffer)} live messages, "
        f"{after.pending_tokens} pending tokens, archives: {after.archive_count})"
    )
    console.print(f"  last event in the history: [bold]{last.type}[/] at version {last.version}")
    commit("retried once the summarizer was back")

    console.print("\n[bold]3. The conversation goes on[/]")
    say(_DETAILS)
    commit("the redirect")

    console.print("\n[bold]4. Merging old archives[/] (threshold=2)")
    merged = ledger.merge_archives(p, key, threshold=2)
    console.print(
        f"  [green]ArchiveMerged[/]: {len(merged.source_archive_ids)} archives -> "
        f"{_short(merged.archive_id)}"
        if merged.merged
        else f"  not merged: {merged.reason} {merged.error or ''}"
    )
    say(_CLOSING)

    console.print()
    view = ledger.session(p, key)
    console.print(_meta_table(view))
    console.print(_buffer_table(view))
    console.print(_archives_table(view))
    console.print(_history_table(ledger.history(p, key)))


def _short(identifier: str | None) -> str:
    return (identifier or "-")[:8]


def _meta_table(view: SessionView) -> Table:
    table = Table(title="Session", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    rows = {
        "key": view.key,
        "tenant": view.tenant,
        "session id": str(view.session_id),
        "version": str(view.version),
        "messages / commits": f"{view.message_count} / {view.commit_count}",
        "pending tokens": str(view.pending_tokens),
        "user turns (should_compress)": f"{view.turn_count} ({view.should_compress})",
    }
    for name, value in rows.items():
        table.add_row(name, Text(value))
    return table


def _buffer_table(view: SessionView) -> Table:
    table = Table(title="Live buffer")
    table.add_column("role")
    table.add_column("content")
    table.add_column("tokens", justify="right")
    for message in view.buffer:
        table.add_row(message.role, Text(message.content), str(message.tokens))
    return table


def _archives_table(view: SessionView) -> Table:
    table = Table(title="Live archives")
    table.add_column("archive", no_wrap=True)
    table.add_column("messages", justify="right")
    table.add_column("abstract")
    for archive in view.archives:
        table.add_row(
            _short(archive.archive_id), str(len(archive.message_ids)), Text(archive.abstract)
        )
    return table


def _history_table(events: Sequence[LedgerEvent]) -> Table:
    table = Table(title="Event history")
    table.add_column("v", justify="right")
    table.add_column("time", no_wrap=True)
    table.add_column("type", no_wrap=True)
    table.add_column("actor", no_wrap=True)
    table.add_column("summary")
    for item in events:
        actor = item.actor
        table.add_row(
            str(item.version),
            item.timestamp.strftime("%H:%M:%S.%f")[:-3],
            Text(item.type, style="red" if item.type == "CommitFailed" else ""),
            Text(f"{actor.user_id}/{actor.agent_id}"),
            Text(_describe(item)),
        )
    return table


def _describe(item: LedgerEvent) -> str:
    """One short line saying what an event did."""
    event = item.event
    if isinstance(event, Started):
        return f"started {event.key!r} for tenant {event.tenant!r}"
    if isinstance(event, MessageAdded):
        message = event.message
        tool = f" [{message.tool_call.tool_name}]" if message.tool_call else ""
        text = message.content if len(message.content) <= 32 else message.content[:31] + "…"
        return f"{message.role}{tool}: {text}"
    if isinstance(event, Committed):
        return f"archive {_short(event.archive.archive_id)} ← {len(event.message_ids)} messages"
    if isinstance(event, CommitFailed):
        return f"{event.error}; {event.message_count} messages stay live"
    if isinstance(event, ArchiveMerged):
        return (
            f"archive {_short(event.archive.archive_id)} ← {len(event.source_archive_ids)} archives"
        )
    if isinstance(event, Evicted):
        return f"left the working set ({event.reason})"
    return item.type
