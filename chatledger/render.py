"""Rich renderings of ledger results, shared by the CLI commands and the demo."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from chatledger.projections.describe import describe_event
from chatledger.results import ContextView, LedgerEvent, SessionDiff, SessionView, VerifyReport


def short(identifier: str | None) -> str:
    """The first eight characters of an id (enough to tell archives apart)."""
    return (identifier or "-")[:8]


def meta_table(view: SessionView) -> Table:
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


def buffer_table(view: SessionView) -> Table:
    table = Table(title="Live buffer")
    table.add_column("role")
    table.add_column("content")
    table.add_column("tokens", justify="right")
    for message in view.buffer:
        table.add_row(message.role, Text(message.content), str(message.tokens))
    return table


def archives_table(view: SessionView) -> Table:
    table = Table(title="Live archives")
    table.add_column("archive", no_wrap=True)
    table.add_column("messages", justify="right")
    table.add_column("abstract")
    for archive in view.archives:
        table.add_row(
            short(archive.archive_id), str(len(archive.message_ids)), Text(archive.abstract)
        )
    return table


def history_table(events: Sequence[LedgerEvent]) -> Table:
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
            Text(describe_event(item.event)),
        )
    return table


def context_table(view: ContextView) -> Table:
    table = Table(
        title=f"Prompt context of {view.key!r} at version {view.version} "
        f"({view.tokens}/{view.token_budget} tokens, {view.dropped_messages} dropped)"
    )
    table.add_column("part", no_wrap=True)
    table.add_column("content")
    if view.archive_id:
        table.add_row(f"archive {short(view.archive_id)}", Text(view.abstract))
        table.add_row("overview", Text(view.overview))
    for message in view.messages:
        table.add_row(message.role, Text(message.content))
    return table


def diff_table(change: SessionDiff) -> Table:
    table = Table(title=f"{change.key!r}: version {change.from_version} → {change.to_version}")
    table.add_column("what", style="bold", no_wrap=True)
    table.add_column("detail")
    for message in change.messages_added:
        table.add_row("+ message", Text(f"{message.role}: {message.content}"))
    for archive in change.commits:
        table.add_row(
            "committed",
            Text(f"archive {short(archive.archive_id)} ← {len(archive.message_ids)} messages"),
        )
    for merge in change.merges:
        sources = ", ".join(short(s) for s in merge.source_archive_ids)
        table.add_row("merged", Text(f"{sources} → {short(merge.archive.archive_id)}"))
    for failure in change.failed_commits:
        table.add_row("commit failed", Text(f"v{failure.version}: {failure.error}"))
    for name in ("message_count", "commit_count", "archive_count", "buffer_size", "pending_tokens"):
        before, after = getattr(change.before, name), getattr(change.after, name)
        table.add_row(name, f"{before} → {after}" if before != after else str(after))
    return table


def verify_table(report: VerifyReport) -> Table:
    status = "[green]all chains intact[/]" if report.ok else "[red]BROKEN[/]"
    table = Table(
        title=f"verify: {status} — {report.sessions_checked} sessions, "
        f"{report.events_checked} events, {report.snapshots_checked} snapshots"
    )
    table.add_column("session", no_wrap=True)
    table.add_column("version", justify="right")
    table.add_column("reason")
    table.add_column("expected / found")
    for issue in report.issues:
        who = f"{issue.tenant}/{issue.key}" if issue.key else str(issue.session_id)
        table.add_row(
            Text(who),
            str(issue.version),
            issue.reason,
            Text(f"{issue.expected[:16]} / {issue.found[:16]}"),
        )
    return table
