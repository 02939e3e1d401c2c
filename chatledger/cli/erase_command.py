"""``erase``: crypto-shred a session, every session of a user, or a whole account.

Erasure destroys data keys and cannot be undone, so the command does nothing
without ``--yes``. It prints what was erased (``--json``: the ``ErasureResult``);
what stays and how to prove it is in docs/erasure.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from chatledger.cli.common import Invocation, fail, shared_options

if TYPE_CHECKING:
    from chatledger.results import ErasureResult

group = typer.Typer()


@group.command()
@shared_options()
def erase(
    key: Annotated[
        str | None, typer.Argument(metavar="[KEY]", help="The session to erase.")
    ] = None,
    user_id: Annotated[
        str | None,
        typer.Option("--user-id", help="Erase every session this user started in the account."),
    ] = None,
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", help="Erase every session of this account (with --admin)."),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", help="Confirm: erasure destroys keys and cannot be undone.")
    ] = False,
    allow_unencrypted: Annotated[
        bool,
        typer.Option(
            "--allow-unencrypted",
            help="Erase even where content was stored unencrypted (it stays in the history).",
        ),
    ] = False,
    *,
    call: Invocation,
) -> None:
    """Erase content for good: destroy its data keys and record Erased.

    Name one session (KEY), a user (--user-id) or an account (--tenant, admins
    only). Event types, actors, times, counters and the hash chain stay, and
    verify still passes; the content reads as erased everywhere. Nothing
    happens without --yes. Content stored unencrypted cannot be erased: a
    session holding some is refused unless --allow-unencrypted.

    \b
    Examples:
      chatledger erase support-42 --account acme --yes
      chatledger erase --user-id alice --account acme --yes --json
      chatledger erase --tenant acme --admin --yes
    """
    named = [name for name, value in (("KEY", key), ("--user-id", user_id), ("--tenant", tenant))
             if value is not None]  # fmt: skip
    if len(named) != 1:
        fail("Name exactly one of KEY, --user-id or --tenant (see 'chatledger erase --help').")
    if not yes:
        fail(
            f"Erasing {named[0]} destroys its data keys and cannot be undone; pass --yes to "
            "confirm. Nothing was erased."
        )
    with call.ledger() as ledger:
        if key is not None:
            result = ledger.erase(call.principal, key, allow_unencrypted=allow_unencrypted)
        elif user_id is not None:
            result = ledger.erase_user(call.principal, user_id, allow_unencrypted=allow_unencrypted)
        else:
            assert tenant is not None
            result = ledger.erase_tenant(
                call.principal, tenant, allow_unencrypted=allow_unencrypted
            )
    call.show(result, _summary(result))


def _summary(result: ErasureResult) -> str:
    def many(count: int, noun: str) -> str:
        return f"{count} {noun}" if count == 1 else f"{count} {noun}s"

    lines = [
        f"Erased {many(len(result.erased), 'session')} of account {result.account_id!r}"
        + (f" (user {result.user_id!r})" if result.user_id is not None else "")
        + f": {many(len(result.key_ids), 'data key')} destroyed, "
        f"{many(result.snapshots_deleted, 'snapshot')} deleted."
    ]
    if result.erased:
        lines.append("  erased: " + ", ".join(result.erased))
    if result.already_erased:
        lines.append("  erased before (nothing recorded): " + ", ".join(result.already_erased))
    if not result.purged:
        lines.append(
            "  warning: the keys are destroyed, but the key store could not purge their old "
            "bytes from its storage yet (see the log); the next erasure tries again."
        )
    if result.unencrypted_events:
        lines.append(
            f"  warning: {many(result.unencrypted_events, 'event')} had content stored "
            "unencrypted (written before encryption, or with it off); it stays readable "
            "in the history (docs/erasure.md)."
        )
    return "\n".join(lines)
