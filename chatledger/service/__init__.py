"""The internal core shared by every face of chatledger (not a public API).

``bootstrap.build`` makes a ``core.Core``: the event store, the session store
(``sessions``: locks, cache, loads, atomic writes), the commit runner
(``commits``). Around them, one module per job, each taking the collaborators
it uses as parameters: ``messages`` (building checked input), ``writes``
(recording messages and lifecycle events), ``views`` (results from a loaded
session), ``timetravel`` (diff, fork), ``integrity`` (verify), ``transfer``
(export, import), ``queries`` (the read side), ``eviction`` (idle eviction),
``binding`` (one signature, several faces). Nothing here imports a face
(``chatledger.ledger``, ``read_models``, ``async_ledger``, ``registry``, the CLI
or the viewer); the faces call into here, one call per public method.
"""
