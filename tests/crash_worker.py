"""A ledger writer meant to be killed: ``python tests/crash_worker.py URL KEY PREFIX SEED``.

Used by ``tests/test_faults.py``. It opens a ``SessionLedger`` on ``URL`` and,
until killed (or until ``--deadline`` seconds have passed), adds messages to
session ``KEY`` and commits them, printing one line per step and flushing at
once, so every line the parent reads is an acknowledgement:

- ``READY <version>``            the ledger opened (``0``: no session yet)
- ``ADD <id> ...``               ``add_messages`` returned for these ids
- ``TRY full|snap <id> ...``     a commit of exactly these ids is about to start
- ``COMMIT <archive> <id> ...``  that commit returned ``completed``
- ``SKIP <reason>`` / ``FAILED <error>``  it returned without archiving

Message ids are ``PREFIX-<n>-<i>``, so runs with distinct prefixes never clash.
With ``--gate`` it imports everything, then waits for one line on stdin before
opening the ledger (lets the parent start workers ahead of time).
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from chatledger import Principal, SessionLedger, UnknownSession

DEFAULT_PRINCIPAL = Principal(
    account_id="acme", user_id="alice", agent_id="support-bot", trace_id="t-1"
)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("key")
    parser.add_argument("prefix")
    parser.add_argument("seed", type=int)
    parser.add_argument("--principal", help="Principal as JSON (default: acme/alice)")
    parser.add_argument("--deadline", type=float, default=60.0, help="exit after this many s")
    parser.add_argument("--snapshot-interval", type=int, default=5)
    parser.add_argument("--gate", action="store_true", help="wait for a stdin line first")
    args = parser.parse_args(argv)

    principal = (
        Principal.model_validate_json(args.principal) if args.principal else DEFAULT_PRINCIPAL
    )
    rng = random.Random(args.seed)
    if args.gate and not sys.stdin.readline():
        return 0  # the parent went away before releasing us
    stop_at = time.monotonic() + args.deadline

    ledger = SessionLedger(args.url, snapshot_interval=args.snapshot_interval)
    try:
        try:
            version = ledger.session(principal, args.key).version
        except UnknownSession:
            version = 0
        say(f"READY {version}")
        n = 0
        live = version > 0
        while time.monotonic() < stop_at:
            roll = rng.random()
            if live and roll < 0.25:
                buffer = [m.id for m in ledger.session(principal, args.key).buffer]
                if roll < 0.12 or len(buffer) < 2:
                    chosen, kind = buffer, "full"
                else:
                    chosen, kind = rng.sample(buffer, rng.randint(1, len(buffer) - 1)), "snap"
                if not chosen:
                    continue
                say(f"TRY {kind} {' '.join(chosen)}")
                if kind == "full":
                    result = ledger.commit(principal, args.key)
                else:
                    result = ledger.commit_snapshot(principal, args.key, chosen)
                if result.status == "completed":
                    say(f"COMMIT {result.archive_id} {' '.join(result.message_ids)}")
                elif result.status == "skipped":
                    say(f"SKIP {result.reason}")
                else:
                    say(f"FAILED {(result.error or '').replace(chr(10), ' ')}")
                continue
            n += 1
            ids = [f"{args.prefix}-{n}-{i}" for i in range(rng.randint(1, 3))]
            specs = [
                {
                    "message_id": message_id,
                    "role": rng.choice(("user", "assistant")),
                    "content": f"Message {message_id} about Paris and Berlin. " * rng.randint(1, 4),
                }
                for message_id in ids
            ]
            ledger.add_messages(principal, args.key, specs)
            live = True
            say(f"ADD {' '.join(ids)}")
    finally:
        ledger.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
