"""A read-only web viewer of a ledger: sessions, timelines, time travel, diffs, integrity.

``chatledger serve`` runs it (``chatledger.web.serve``); ``create_app`` builds the
ASGI application for a ``SessionLedger`` and a principal fixed for its life, to
embed or test; ``ViewerServer`` serves one with uvicorn. Needs the ``web``
extra (``pip install 'chatledger[web]'``). A face of the package: it reads
through ``SessionLedger`` and ``ReadModels`` only, and nothing imports it but
the CLI. See docs/viewer.md.
"""

from chatledger.web.app import create_app
from chatledger.web.server import ViewerServer, check_binding, is_loopback, serve

__all__ = ["ViewerServer", "check_binding", "create_app", "is_loopback", "serve"]
