"""``python -m chatledger.cli``: the ``chatledger`` command without its console script."""

import sys

from chatledger.cli import main

sys.exit(main())
