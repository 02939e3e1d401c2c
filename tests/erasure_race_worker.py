"""A writer racing an erasure: ``python tests/erasure_race_worker.py URL PREFIX``.

Used by ``tests/test_erasure_races.py``. It waits for one line on stdin, then
opens a ``SessionLedger`` with encryption on and ``key_scope="user"`` and, until
stdin closes or ``--deadline`` seconds pass, starts session ``PREFIX-<n>`` as
``acme/alice`` and writes two messages to it, printing one line per outcome and
flushing at once, so every line the parent reads is an acknowledgement:

- ``READY``                 the ledger opened
- ``ACK <key> <text>``      ``add_message`` returned for this text
- ``REFUSED <key> <error>`` it raised a ``chatledger.errors`` exception (nothing acknowledged)
"""

from __future__ import annotations

import argparse
import os
import selectors
import sys
import time

from chatledger import ChatLedgerError, Principal, SessionLedger

ALICE = Principal(account_id="acme", user_id="alice", agent_id="support-bot")


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("prefix")
    parser.add_argument("--deadline", type=float, default=60.0)
    parser.add_argument("--busy-timeout", type=float, default=2.0)
    args = parser.parse_args(argv)
    if not sys.stdin.readline():
        return 0
    watch = selectors.DefaultSelector()
    watch.register(sys.stdin, selectors.EVENT_READ)
    ledger = SessionLedger(
        args.url, encryption=True, key_scope="user", busy_timeout=args.busy_timeout
    )
    say("READY")
    stop_at = time.monotonic() + args.deadline
    n = 0
    try:
        while time.monotonic() < stop_at and not watch.select(timeout=0):
            n += 1
            key = f"{args.prefix}-{n}"
            for part in ("first", "second"):
                text = f"{key} {part} {os.getpid()}"
                try:
                    ledger.add_message(ALICE, key, "user", text)
                except ChatLedgerError as error:
                    say(f"REFUSED {key} {type(error).__name__}")
                    break
                say(f"ACK {key} {text}")
    finally:
        ledger.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
