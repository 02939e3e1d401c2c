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
from rich.text import Text

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
    console.print(history_table(ledger.history(p, key)))
    _time_travel(ledger, console, key)


def _time_travel(ledger: SessionLedger, console: Console, key: str) -> None:
    """Look back: the prompt before the first commit, what changed since, a fork, verify."""
    p = DEMO_PRINCIPAL
    history = ledger.history(p, key)
    first_commit = next(e.version for e in history if e.type == "Committed")
    then = first_commit - 1
    console.rule("[bold]Time travel[/]")
    console.print(f"[bold]5. The prompt the agent had at version {then}[/] (before any commit)")
    console.print(context_table(ledger.context(p, key, 2_000, at_version=then)))
    console.print(f"[bold]6. What changed from version {then} to now[/]")
    console.print(diff_table(ledger.diff(p, key, then, history[-1].version)))
    fork_key = f"{key}-retry"
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
    console.print(
        "\nTry it yourself: [cyan]chatledger log "
        f"{key} --account {p.account_id}[/], [cyan]chatledger show {key} --at-version {then} "
        f"--account {p.account_id}[/], [cyan]chatledger verify --account {p.account_id}[/]"
    )
