"""``python -m chatledger.projector``: keep the read models up to date in a process of its own.

Opens the ledger at ``--url`` (read models in the same database, or in
``--projections-url``), resets read models whose version changed, then
catches up once, or with ``--follow`` keeps following the log until SIGINT or
SIGTERM. Several projector processes may run at once: each batch commits
with a compare-and-set of the tracking position, so they never apply an
event twice. Output is one line per step, flushed at once (tests kill this
process at random points and read how far it got):

- ``READY <head>``           the ledger opened; ``<head>`` is the newest position
- ``BATCH <events>``         with ``--progress``: a batch committed (running total)
- ``DONE <events>``          caught up (without ``--follow``) or stopped
"""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType

from chatledger.errors import ChatLedgerError
from chatledger.ledger import SessionLedger
from chatledger.read_models import ReadModels


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Run the projector; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m chatledger.projector", description=__doc__)
    parser.add_argument("--url", required=True, help="SQLAlchemy URL of the ledger")
    parser.add_argument("--projections-url", help="keep the read models in this database")
    parser.add_argument("--follow", action="store_true", help="keep following the log")
    parser.add_argument("--rebuild", metavar="NAME", help="rebuild NAME (or 'all') first")
    parser.add_argument("--batch-size", type=int, default=500, help="events per transaction")
    parser.add_argument("--poll", type=float, default=None, help="longest idle back-off (s)")
    parser.add_argument("--progress", action="store_true", help="print a line per batch")
    args = parser.parse_args(argv)
    try:
        ledger = SessionLedger(args.url)
        try:
            models = ReadModels(
                ledger,
                url=args.projections_url,
                batch_size=args.batch_size,
                poll_interval=args.poll,
            )
            with models:
                _say(f"READY {models.head()}")
                progress = (lambda done, _head: _say(f"BATCH {done}")) if args.progress else None
                total = 0
                if args.rebuild:
                    name = None if args.rebuild == "all" else args.rebuild
                    total += models.rebuild(name, progress=progress)
                total += models.catch_up(progress=progress)
                if args.follow:

                    def stop(_signum: int, _frame: FrameType | None) -> None:
                        models._projector.stop()

                    signal.signal(signal.SIGTERM, stop)
                    signal.signal(signal.SIGINT, stop)
                    models.run()
                _say(f"DONE {total}")
        finally:
            ledger.close()
    except ChatLedgerError as error:
        sys.stderr.write(f"error: {error}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
