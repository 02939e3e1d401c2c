"""The scripted demo behind ``chatledger demo``: one support conversation, told by the ledger.

``run_demo`` drives a ``SessionLedger`` it is given through the whole life of
a session (messages with tool-call usage, a commit, a commit whose summarizer
fails, more commits, an archive merge) and prints, with rich, what the ledger
recorded. Every claim it prints is read back from the ledger, not assumed, and
everything it showed is returned as a ``DemoResult`` (``chatledger demo --json``).
Only the CLI imports this module; nothing here opens databases or deletes files.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from chatledger.domain.failures import UnknownSession
from chatledger.domain.ports import Summarizer, Summary
from chatledger.domain.values import ArchiveSummary, Message, Principal
from chatledger.render import (
    archives_table,
    buffer_table,
    context_table,
    diff_table,
    history_table,
    meta_table,
    short,
)

if TYPE_CHECKING:
    from chatledger.ledger import SessionLedger
    from chatledger.results import (
        CommitResult,
        ContextView,
        LedgerEvent,
        MergeResult,
        SessionDiff,
        SessionView,
        VerifyReport,
    )

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


@dataclass(frozen=True)
class DemoResult:
    """Everything the demo showed, read back from the ledger."""

    key: str
    fork_key: str
    failed_commit: CommitResult
    merge: MergeResult
    session: SessionView
    history: list[LedgerEvent]
    then: int  # the version just before the first commit
    context_then: ContextView
    diff: SessionDiff
    fork: SessionView
    verify: VerifyReport


def unused_key(ledger: SessionLedger, base: str, *, also: str = "") -> str:
    """``base``, or the first of ``base-2``, ``base-3``, ... that names no session yet
    (nor does the key plus ``also``, e.g. ``-retry``): a demo never touches existing data."""
    candidates = (base if n == 1 else f"{base}-{n}" for n in itertools.count(1))
    return next(
        key
        for key in candidates
        if not _exists(ledger, key) and not (also and _exists(ledger, key + also))
    )


def _exists(ledger: SessionLedger, key: str) -> bool:
    try:
        ledger.session(DEMO_PRINCIPAL, key)
    except UnknownSession:
        return False
    return True


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


def run_demo(ledger: SessionLedger, console: Console, key: str = DEMO_KEY) -> DemoResult:
    """Play the scripted support session on ``ledger`` under ``key`` and print the ledger.

    ``key`` may name an existing session of the demo's account: the story then goes on
    there (its claims are still read back, not assumed).
    """
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
                f"into archive {short(result.archive_id)} ({label})"
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
        f"{short(merged.archive_id)}"
        if merged.merged
        else f"  not merged: {merged.reason} {merged.error or ''}"
    )
    say(_CLOSING)

    console.print()
    view = ledger.session(p, key)
    console.print(meta_table(view))
    console.print(buffer_table(view))
    console.print(archives_table(view))
    history = ledger.history(p, key)
    console.print(history_table(history))
    then, context_then, change, fork_key, forked, report = _time_travel(
        ledger, console, key, history
    )
    return DemoResult(
        key=key,
        fork_key=fork_key,
        failed_commit=failed,
        merge=merged,
        session=view,
        history=history,
        then=then,
        context_then=context_then,
        diff=change,
        fork=forked,
        verify=report,
    )


def _time_travel(
    ledger: SessionLedger, console: Console, key: str, history: list[LedgerEvent]
) -> tuple[int, ContextView, SessionDiff, str, SessionView, VerifyReport]:
    """Look back: the prompt before the first commit, what changed since, a fork, verify."""
    p = DEMO_PRINCIPAL
    first_commit = next(e.version for e in history if e.type == "Committed")
    then = first_commit - 1
    console.rule("[bold]Time travel[/]")
    console.print(f"[bold]5. The prompt the agent had at version {then}[/] (before any commit)")
    context_then = ledger.context(p, key, 2_000, at_version=then)
    console.print(context_table(context_then))
    console.print(f"[bold]6. What changed from version {then} to now[/]")
    change = ledger.diff(p, key, then, history[-1].version)
    console.print(diff_table(change))
    fork_key = unused_key(ledger, f"{key}-retry")
    forked = ledger.fork(p, key, then, fork_key)
    console.print(
        f"[bold]7. Fork at version {then}[/] as {fork_key!r}: {len(forked.buffer)} live "
        f"messages carried over; the origin still has {len(history)} events"
    )
    report = ledger.verify(p)
    verdict = "[green]intact[/]" if report.ok else "[red]BROKEN[/]"
    console.print(
        f"[bold]8. verify[/]: hash chains {verdict} "
        f"({report.sessions_checked} sessions, {report.events_checked} events)"
    )
    return then, context_then, change, fork_key, forked, report
