"""Stored form of events: exact pydantic round trips and class_version upcasting."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, ClassVar
from uuid import uuid4

from chatledger.adapters.mapper import JSONBytesTranscoder, PydanticMapper
from chatledger.domain.events import Committed, MessageAdded, Started
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.session import Session
from chatledger.domain.values import ArchiveSummary, ClientContext, Message, Principal, ToolCall

MAPPER = PydanticMapper(transcoder=JSONBytesTranscoder())
WHEN = datetime(2026, 3, 1, 9, 30, 15, 123456, tzinfo=UTC)
ACTOR = Principal(account_id="acme", user_id="u", agent_id="a", role="admin", trace_id="t")


def test_every_event_round_trips_exactly() -> None:
    """to_stored_event followed by to_domain_event gives an equal event of the same class."""
    sid = uuid4()
    message = Message(
        id="m1",
        role="tool",
        content="ünïcödé ✓",
        created_at=WHEN,
        name="lookup",
        tool_call=ToolCall(tool_name="lookup", status="error", prompt_tokens=5),
    )
    archive = ArchiveSummary(
        archive_id="a1",
        overview="o",
        abstract="a",
        message_ids=("m1",),
        tokens=3,
        created_at=WHEN,
        metadata={"k": [1, 2.5, None]},
    )
    events: list[SessionEvent] = [
        Started(
            originator_id=sid,
            originator_version=1,
            timestamp=WHEN,
            originator_topic="chatledger.domain.session:Session",
            actor=ACTOR,
            tenant="acme",
            key="k",
            context=ClientContext(cwd="/x", additional_directories=("/y",), meta={"n": {"d": 1}}),
        ),
        MessageAdded(
            originator_id=sid, originator_version=2, timestamp=WHEN, actor=ACTOR, message=message
        ),
        Committed(
            originator_id=sid, originator_version=3, timestamp=WHEN, actor=ACTOR, archive=archive
        ),
    ]
    for event in events:
        stored = MAPPER.to_stored_event(event)
        assert b"originator_id" not in stored.state  # kept in its own column
        back = MAPPER.to_domain_event(stored)
        assert type(back) is type(event)
        assert back == event


def test_snapshot_round_trips_to_an_equal_session() -> None:
    """A snapshot stored and read back rebuilds a session with identical state."""
    session = Session.start(tenant="acme", key="k", actor=ACTOR, timestamp=WHEN)
    session.add_message(
        Message(id="m", role="user", content="hi", created_at=WHEN), actor=ACTOR, timestamp=WHEN
    )
    snapshot = Session.Snapshot.take(session)
    rebuilt = MAPPER.to_domain_event(MAPPER.to_stored_event(snapshot)).mutate(None)
    assert rebuilt.to_state() == session.to_state()
    assert rebuilt.version == session.version


class NoteAdded(SessionEvent):
    """A test event at version 2 of its stored form (v1 had no ``priority``)."""

    class_version: ClassVar[int] = 2
    text: str
    priority: int

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["priority"] = 0

    def apply(self, aggregate: Any) -> None:
        return None


def test_older_records_are_upcast_on_read() -> None:
    """A record written at class_version 1 is read back through upcast_v1_v2."""
    event = NoteAdded(
        originator_id=uuid4(),
        originator_version=2,
        timestamp=WHEN,
        actor=ACTOR,
        text="x",
        priority=3,
    )
    stored = MAPPER.to_stored_event(event)
    assert json.loads(stored.state)["class_version"] == 2
    v1_state = json.loads(stored.state)
    del v1_state["class_version"], v1_state["priority"]
    old = type(stored)(
        originator_id=stored.originator_id,
        originator_version=stored.originator_version,
        topic=stored.topic,
        state=json.dumps(v1_state).encode(),
    )
    upcast = MAPPER.to_domain_event(old)
    assert upcast == event.model_copy(update={"priority": 0})
