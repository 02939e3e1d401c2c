"""An erasure meant to be killed: ``python tests/erasure_kill_worker.py URL USER``.

Used by ``tests/test_erasure_races.py``. It opens a ``SessionLedger`` with
encryption on, prints ``READY``, waits for one line on stdin, then runs
``erase_user`` of ``USER`` in account ``acme`` and prints ``DONE`` -- unless it is
killed first, which is the point.
"""

from __future__ import annotations

import sys

from chatledger import Principal, SessionLedger

SERVICE = Principal(account_id="acme", agent_id="framework-adapter")


def main(argv: list[str]) -> int:
    url, user = argv
    ledger = SessionLedger(url, encryption=True, busy_timeout=1)
    print("READY", flush=True)
    if not sys.stdin.readline():
        return 0
    ledger.erase_user(SERVICE, user)
    print("DONE", flush=True)
    ledger.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
