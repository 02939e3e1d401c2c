"""Rich renderings of ledger results, shared by the CLI commands and the demo.

Every text that comes from the ledger goes into a ``Text`` (never markup), so a message
holding ``[bold]`` prints as written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from chatledger.projections.describe import describe_event
from chatledger.results import ContextView, LedgerEvent, SessionDiff, SessionView, VerifyReport

if TYPE_CHECKING:
    from chatledger.read_models import ToolUsage, WorkingSetEntry


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


def working_set_table(rows: Sequence[WorkingSetEntry]) -> Table:
    table = Table(title="Working set")
    for column in ("account", "key", "status", "messages", "pending", "commits", "last activity"):
        table.add_column(
            column, justify="right" if column in ("messages", "pending", "commits") else "left"
        )
    for row in rows:
        table.add_row(
            Text(row.account_id),
            Text(row.session_key),
            row.status,
            str(row.message_count),
            str(row.pending_tokens),
            str(row.commit_count),
            row.last_activity_at.isoformat(timespec="seconds"),
        )
    return table


def usage_table(rows: Sequence[ToolUsage]) -> Table:
    table = Table(title="Tool usage (tokens)")
    for column in ("account", "key", "tool"):
        table.add_column(column, no_wrap=True)
    for column in ("calls", "ok", "failed", "prompt", "compl.", "total"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            Text(row.account_id),
            Text(row.session_key),
            Text(row.tool_name),
            str(row.call_count),
            str(row.success_count),
            str(row.fail_count),
            str(row.prompt_tokens),
            str(row.completion_tokens),
            str(row.total_tokens),
        )
    return table
