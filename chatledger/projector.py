"""``python -m chatledger.projector``: keep the read models up to date in a process of its own.

The same command as ``chatledger project`` (``chatledger.cli.operations``), with
``--protocol`` on: one flushed line per step -- ``READY <head>``, ``BATCH <events>``
(with ``--progress``), ``DONE <events>`` -- and the CLI's exit codes.
"""

import sys

from chatledger.cli import projector_main as main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
