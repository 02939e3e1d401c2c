"""Adapters that let agent frameworks keep their sessions in a chatledger ledger.

``openai_agents`` (a ``Session`` of the OpenAI Agents SDK, extra
``chatledger[openai-agents]``) and ``adk`` (a ``BaseSessionService`` of
Google's Agent Development Kit, extra ``chatledger[adk]``). Each is a face:
it uses the public ``SessionLedger`` API only, imports its framework when it
is imported itself (never from here, never from ``import chatledger``), and
nothing of chatledger imports it.
"""
