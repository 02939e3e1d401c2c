"""Tamper evidence: any change to stored rows is found by verify(); export/import round trip."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from chatledger import InvalidInput, SessionLedger
from chatledger.adapters.schema import events_table
from chatledger.domain.session import Session
from support import ADMIN, ALICE, BOB

# Every column but tx_id, the writing transaction: it is not evidence (neither
# hashed nor a fact), only when the row joined the log (see schema.LogCursor).
COLUMNS = [c.name for c in events_table.columns if c.name != "tx_id"]
NUMERIC = {c.name for c in events_table.columns if c.type.python_type is int}
CHAINED = COLUMNS[:7]  # what the hash covers
NAMING = ["event_type", "tenant", "session_key"]  # facts the default check compares too
REPLAYED = [c for c in COLUMNS[7:] if c not in NAMING]  # facts only a replay can check


def _populate(ledger: SessionLedger) -> None:
    for who, key in ((ALICE, "s1"), (ALICE, "s2"), (BOB, "s1")):
        for i in range(5):
            ledger.add_message(who, key, "user", f"Question {i} about Billing.")
            ledger.add_message(who, key, "assistant", f"Answer {i}.")
            if i % 2:
                ledger.commit(who, key)
        ledger.merge_archives(who, key, threshold=1)


def _rows(ledger: SessionLedger) -> list[dict[str, Any]]:
    engine = ledger.core.store.event_recorder.engine
    with engine.connect() as connection:
        return [
            dict(r._mapping)
            for r in connection.execute(
                text(f"SELECT {', '.join(COLUMNS)} FROM chatledger_events ORDER BY id")
            )
        ]


def _execute(ledger: SessionLedger, sql: str, **params: Any) -> None:
    with ledger.core.store.event_recorder.engine.begin() as connection:
        connection.execute(text(sql), params)


def _flip(value: Any, at: int) -> Any:
    """The value with one byte (or digit) changed."""
    if isinstance(value, bytes | memoryview):
        data = bytearray(bytes(value))
        data[at % len(data)] ^= 0x01
        return bytes(data)
    if isinstance(value, int):
        return value + 1_000_003
    if hasattr(value, "hex") and hasattr(value, "int"):  # a UUID (PostgreSQL)
        import uuid

        return uuid.UUID(int=value.int ^ 1)
    chars = list(str(value))
    if not chars:
        return "x"
    i = at % len(chars)
    chars[i] = "0" if chars[i] != "0" else "1"
    return "".join(chars)


def _mutate_column(ledger: SessionLedger, row: dict[str, Any], column: str, at: int) -> None:
    value = row[column]
    # An unset fact gets a value; anything else changes by one byte.
    value = (1 if column in NUMERIC else "x") if value is None else _flip(value, at)
    _execute(
        ledger,
        f"UPDATE chatledger_events SET {column} = :value WHERE id = :id",
        value=value,
        id=row["id"],
    )


@pytest.fixture
def populated(make_ledger: Callable[..., SessionLedger]) -> SessionLedger:
    ledger = make_ledger(snapshot_interval=4)
    _populate(ledger)
    assert ledger.verify(ADMIN).ok
    return ledger


def test_untouched_ledger_verifies_with_every_event_and_snapshot_checked(
    populated: SessionLedger,
) -> None:
    """A ledger nobody tampered with verifies ok, all events and snapshots checked."""
    for deep in (False, True):
        report = populated.verify(ADMIN, deep=deep)
        assert report.ok and report.issues == ()
        assert report.sessions_checked == 3
        assert report.events_checked == len(_rows(populated))
        assert report.snapshots_checked > 0


@pytest.mark.parametrize("column", CHAINED + NAMING)
def test_changing_one_byte_of_a_hashed_or_naming_column_is_detected(
    populated: SessionLedger, column: str
) -> None:
    """Flipping one byte of a hashed column, or of a fact naming the event and its session
    (event type, tenant, key), is reported by the default check and by the deep one."""
    row = _rows(populated)[7]
    _mutate_column(populated, row, column, at=3)
    for deep in (False, True):
        report = populated.verify(ADMIN, deep=deep)
        assert not report.ok and report.deep == deep
        if column in NAMING:  # the chain holds, the facts naming the event do not
            (issue,) = report.issues
            assert issue.reason == "stored facts differ from the event"
            assert column in issue.found


@pytest.mark.parametrize("column", REPLAYED)
def test_changing_a_fact_derived_by_replay_is_found_by_the_deep_check_only(
    populated: SessionLedger, column: str
) -> None:
    """Facts the events imply (actor, counters, tool, summary, key) are not hashed: a doctored
    one passes the default check (as docs/audit.md says) and verify(deep=True) reports it."""
    row = _rows(populated)[7]
    _mutate_column(populated, row, column, at=3)
    assert populated.verify(ADMIN).ok
    (issue,) = populated.verify(ADMIN, deep=True).issues
    assert issue.reason == "stored facts differ from the event"
    assert column in issue.found


def test_deleting_an_event_is_detected_at_its_version(populated: SessionLedger) -> None:
    """Deleting an event from the middle of a session reports the missing version."""
    row = next(r for r in _rows(populated) if r["originator_version"] == 4)
    _execute(populated, "DELETE FROM chatledger_events WHERE id = :id", id=row["id"])
    (issue,) = populated.verify(ADMIN).issues
    assert (issue.version, issue.reason) == (4, "missing event")


def test_reordering_two_events_is_detected(populated: SessionLedger) -> None:
    """Swapping the payloads of two events of one session is detected."""
    rows = [r for r in _rows(populated) if r["originator_version"] in (3, 5)][:2]
    a, b = rows
    assert a["originator_id"] == b["originator_id"]
    for mine, theirs in ((a, b), (b, a)):
        _execute(
            populated,
            "UPDATE chatledger_events SET state = :state, topic = :topic WHERE id = :id",
            state=theirs["state"],
            topic=theirs["topic"],
            id=mine["id"],
        )
    issue = populated.verify(ADMIN).issues[0]
    assert issue.version == 3 and issue.reason == "hash mismatch"


def test_forged_event_is_detected(populated: SessionLedger) -> None:
    """A forged event appended to a session without the chain's hash is detected."""
    last = max(
        (r for r in _rows(populated) if r["originator_id"] == _rows(populated)[0]["originator_id"]),
        key=lambda r: r["originator_version"],
    )
    forged = dict(last, id=10_000, originator_version=last["originator_version"] + 1)
    forged["state"] = bytes(last["state"]).replace(b"Answer", b"Forged")
    _execute(
        populated,
        f"INSERT INTO chatledger_events ({', '.join(COLUMNS)}) "
        f"VALUES ({', '.join(':' + c for c in COLUMNS)})",
        **forged,
    )
    assert [i.reason for i in populated.verify(ADMIN).issues] == ["hash mismatch"]


def test_keyed_chain_detects_a_forger_who_knows_the_scheme(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """With chain_key, a forged row hashed correctly but without the key is still detected."""
    from chatledger.adapters.chain import chain_hash

    ledger = make_ledger(chain_key="s3cret")
    ledger.add_message(ALICE, "s1", "user", "hello")
    row = _rows(ledger)[-1]
    previous = bytes(row["hash"])
    forged_state = bytes(row["state"]).replace(b"hello", b"hijacked")
    import uuid

    oid = row["originator_id"]
    oid = oid if isinstance(oid, uuid.UUID) else uuid.UUID(oid)
    digest = chain_hash(
        previous,
        position=row["id"] + 1,
        originator_id=oid,
        version=row["originator_version"] + 1,
        topic=row["topic"],
        timestamp_us=row["timestamp_us"],
        state=forged_state,
    )
    _execute(
        ledger,
        f"INSERT INTO chatledger_events ({', '.join(COLUMNS)}) "
        f"VALUES ({', '.join(':' + c for c in COLUMNS)})",
        **dict(
            row,
            id=row["id"] + 1,
            originator_version=row["originator_version"] + 1,
            state=forged_state,
            hash=digest,
        ),
    )
    assert not ledger.verify(ALICE).ok


@pytest.mark.parametrize("field", [b"message_count", b"archive_refs"])
def test_doctored_snapshot_is_detected(populated: SessionLedger, field: bytes) -> None:
    """A snapshot edited in the database (a counter, or where its archives are) no longer
    matches the replay and is reported."""
    oid, version, state = _newest_snapshot_row(populated)
    doctored = re.sub(
        b'"' + field + rb'":(\[\[)?(\d+)',
        lambda m: m[0][: -len(m[2])] + str(int(m[2]) - 1).encode(),
        state,
        count=1,
    )
    assert doctored != state
    _execute(
        populated,
        "UPDATE chatledger_snapshots SET state = :state "
        "WHERE originator_id = :oid AND originator_version = :version",
        state=doctored,
        oid=oid,
        version=version,
    )
    assert populated.verify(ADMIN).ok  # snapshots are not hashed: only a replay finds this
    issues = populated.verify(ADMIN, deep=True).issues
    assert [i.reason for i in issues] == ["snapshot differs from replayed events"]


def _buffered(ledger: SessionLedger, key: str, state: dict[str, Any] | None = None) -> None:
    """A session whose snapshot holds a live buffer (a commit, then more messages; tool
    calls, names, non-ASCII and escaped text among them)."""
    for batch in range(2):
        ledger.add_messages(ALICE, key, [
            {"role": "user" if n % 2 else "assistant", "content": f"m{batch}.{n} é \"q\"\n"}
            | ({"tool_call": {"tool_name": "search", "prompt_tokens": n}} if n % 3 == 0 else {})
            | ({"name": "helper"} if n == 4 else {})
            for n in range(6)
        ], state=state if batch else None)  # fmt: skip
        if not batch:
            ledger.commit(ALICE, key)


def _newest_snapshot_row(ledger: SessionLedger) -> tuple[Any, int, bytes]:
    """The session id, version and stored bytes of the newest stored snapshot."""
    with ledger.core.store.event_recorder.engine.connect() as connection:
        oid, version, state = connection.execute(
            text(
                "SELECT originator_id, originator_version, state FROM chatledger_snapshots "
                "ORDER BY originator_version DESC"
            )
        ).first()  # type: ignore[misc]
    return oid, version, bytes(state)


def _snapshot(ledger: SessionLedger) -> tuple[Any, int, dict[str, Any]]:
    """The session id, version and decoded JSON of the newest stored snapshot."""
    oid, version, state = _newest_snapshot_row(ledger)
    return oid, version, json.loads(state)


def _store_snapshot(ledger: SessionLedger, oid: Any, version: int, state: bytes) -> None:
    _execute(
        ledger,
        "UPDATE chatledger_snapshots SET state = :state "
        "WHERE originator_id = :oid AND originator_version = :version",
        state=state, oid=oid, version=version,
    )  # fmt: skip


@pytest.fixture
def buffered(make_ledger: Callable[..., SessionLedger]) -> SessionLedger:
    ledger = make_ledger(snapshot_interval=10)  # one snapshot: after the second batch
    _buffered(ledger, "b")
    assert len(_snapshot(ledger)[2]["state"]["buffer"]) == 6
    return ledger


def test_an_untouched_snapshot_is_told_without_building_the_replayed_buffer(
    buffered: SessionLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deep check tells a snapshot that holds the replayed state, live buffer and all,
    without writing a snapshot of the replayed session whole."""
    taken: list[Session] = []
    take = Session.Snapshot.take
    monkeypatch.setattr(
        Session.Snapshot, "take", classmethod(lambda _, s: taken.append(s) or take(s))
    )
    report = buffered.verify(ADMIN, deep=True)
    assert report.ok and report.snapshots_checked >= 1
    assert taken == []


BUFFERED_EDITS: dict[str, Callable[[Any], Any]] = {
    "id": lambda v: v + "x",
    "role": lambda v: "user" if v != "user" else "assistant",
    "content": lambda v: v + " ",
    "created_at": lambda v: v.replace("Z", "+01:00"),
    "name": lambda v: "someone" if v is None else None,
    "tool_call": lambda v: {"tool_name": "other"} if v is None else None,
}


@pytest.mark.parametrize("field", list(BUFFERED_EDITS))
@pytest.mark.parametrize("nth", [0, -1])
def test_a_snapshot_whose_buffered_message_differs_in_one_field_is_reported(
    buffered: SessionLedger, field: str, nth: int
) -> None:
    """One field of one message of a snapshot's live buffer, changed to another valid value:
    the deep check reports the snapshot."""
    oid, version, data = _snapshot(buffered)
    message = data["state"]["buffer"][nth]
    message[field] = BUFFERED_EDITS[field](message[field])
    _store_snapshot(
        buffered, oid, version,
        json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode(),
    )  # fmt: skip
    assert buffered.verify(ADMIN).ok  # snapshots are not hashed: only a replay finds this
    issues = buffered.verify(ADMIN, deep=True).issues
    assert [i.reason for i in issues] == ["snapshot differs from replayed events"]


def test_a_snapshot_written_otherwise_but_holding_the_replayed_state_verifies(
    buffered: SessionLedger,
) -> None:
    """The same snapshot in other bytes (spaces, escaped characters) holds the replayed
    state: the deep check decodes it and finds nothing wrong."""
    oid, version, data = _snapshot(buffered)
    _store_snapshot(buffered, oid, version, json.dumps(data, indent=1).encode())
    report = buffered.verify(ADMIN, deep=True)
    assert report.ok and report.snapshots_checked >= 1


def test_a_snapshot_of_a_state_holding_a_buffer_key_is_checked_whole(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """A session whose own state has an empty ``buffer`` key writes that key twice in its
    snapshot: the deep check still accepts the snapshot, and still reports it doctored."""
    ledger = make_ledger(snapshot_interval=10)
    _buffered(ledger, "k", state={"buffer": []})
    oid, version, data = _snapshot(ledger)
    assert data["state"]["state"] == {"buffer": []} and data["state"]["buffer"]
    assert ledger.verify(ADMIN, deep=True).ok
    data["state"]["buffer"][0]["content"] += " "
    _store_snapshot(ledger, oid, version, json.dumps(data, separators=(",", ":")).encode())
    issues = ledger.verify(ADMIN, deep=True).issues
    assert [i.reason for i in issues] == ["snapshot differs from replayed events"]


def test_members_verify_only_their_account(populated: SessionLedger) -> None:
    """verify() without a key covers the member's own sessions; admins see all."""
    assert populated.verify(ALICE).sessions_checked == 2
    assert populated.verify(BOB).sessions_checked == 1
    assert populated.verify(ALICE, "s1").sessions_checked == 1


MUTATION = st.one_of(
    st.tuples(st.just("flip"), st.sampled_from(COLUMNS), st.integers(0, 10_000)),
    st.tuples(st.just("delete"), st.just(""), st.integers(0, 10_000)),
    st.tuples(st.just("swap"), st.just(""), st.integers(0, 10_000)),
)


def test_no_random_mutation_goes_undetected(make_ledger: Callable[..., SessionLedger]) -> None:
    """Hypothesis: flipping a byte, deleting a non-final event or swapping payloads is found
    (by the deep check; by the default one too, but for facts only a replay derives)."""
    ledger = make_ledger(snapshot_interval=1000)

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(MUTATION)
    def run(mutation: tuple[str, str, int]) -> None:
        _execute(ledger, "DELETE FROM chatledger_events")
        ledger.core.sessions.clear()
        _populate(ledger)
        assert ledger.verify(ADMIN).ok
        rows = _rows(ledger)
        kind, column, at = mutation
        row = rows[at % len(rows)]
        same_session = [r for r in rows if r["originator_id"] == row["originator_id"]]
        if kind == "flip":
            _mutate_column(ledger, row, column, at)
        elif kind == "delete":
            row = same_session[at % (len(same_session) - 1)]  # never the newest (see audit.md)
            _execute(ledger, "DELETE FROM chatledger_events WHERE id = :id", id=row["id"])
        else:
            other = same_session[(same_session.index(row) + 1) % len(same_session)]
            for mine, theirs in ((row, other), (other, row)):
                _execute(
                    ledger,
                    "UPDATE chatledger_events SET state = :state WHERE id = :id",
                    state=theirs["state"],
                    id=mine["id"],
                )
        assert not ledger.verify(ADMIN, deep=True).ok
        if column not in REPLAYED:  # all but the facts derived by replay: the default check too
            assert not ledger.verify(ADMIN).ok

    run()


def test_export_import_round_trip_reproduces_every_view(
    populated: SessionLedger, make_ledger: Callable[..., SessionLedger], tmp_path: Any
) -> None:
    """An imported export gives equal sessions, histories, chains and stored facts."""
    lines = list(populated.export(ADMIN))
    target = SessionLedger(f"sqlite:///{tmp_path / 'imported.db'}")
    try:
        result = target.import_(lines)
        assert (result.sessions, result.events) == (3, len(_rows(populated)))
        assert target.verify(ADMIN).ok
        facts = [[r[c] for c in COLUMNS[7:]] for r in _rows(populated)]
        assert [[r[c] for c in COLUMNS[7:]] for r in _rows(target)] == facts
        for who, key in ((ALICE, "s1"), (ALICE, "s2"), (BOB, "s1")):
            assert target.session(who, key) == populated.session(who, key)
            assert target.history(who, key) == populated.history(who, key)
        assert list(target.export(ADMIN)) == lines
    finally:
        target.close()


def test_broken_export_file_imports_nothing(populated: SessionLedger, tmp_path: Any) -> None:
    """An export with one altered line is rejected with InvalidInput and nothing is recorded."""
    lines = list(populated.export(ADMIN))
    victim = next(i for i, line in enumerate(lines) if "Question 2" in line)
    lines[victim] = lines[victim].replace("Question 2", "Question 9")
    target = SessionLedger(f"sqlite:///{tmp_path / 'imported.db'}")
    try:
        with pytest.raises(InvalidInput, match="Broken hash chain"):
            target.import_(lines)
        assert target.core.store.recorder.max_notification_id() is None
        with pytest.raises(InvalidInput):
            target.import_(["not json"])
        with pytest.raises(InvalidInput):
            target.import_([])
    finally:
        target.close()


def _rechained(lines: list[str], change: Callable[[list[dict[str, Any]]], None]) -> list[str]:
    """The export after ``change`` edits its records, every hash recomputed to fit (no key)."""
    import json
    import uuid

    from chatledger.adapters.chain import GENESIS, chain_hash

    records = [json.loads(line) for line in lines[1:]]
    change(records)
    previous: dict[str, bytes] = {}
    for r in sorted(records, key=lambda r: (r["session_id"], r["version"])):
        digest = chain_hash(
            previous.get(r["session_id"], GENESIS),
            position=r["position"],
            originator_id=uuid.UUID(r["session_id"]),
            version=r["version"],
            topic=r["topic"],
            timestamp_us=r["timestamp_us"],
            state=_state_bytes(r),
        )
        r["hash"] = digest.hex()
        previous[r["session_id"]] = digest
    return [lines[0], *(json.dumps(r) for r in records)]


def _state_bytes(record: dict[str, Any]) -> bytes:
    """The stored payload an export record stands for (an ``event`` object or ``state`` text)."""
    import json

    if "stored" in record:
        return json.dumps(record["stored"], ensure_ascii=False, separators=(",", ":")).encode()
    return str(record["state"]).encode()


def _newest(records: list[dict[str, Any]]) -> dict[str, Any]:
    return max(records, key=lambda r: (r["session_id"], r["version"]))


def _rehashed_with_unreadable_payload(lines: list[str]) -> list[str]:
    """The export with one session's last event made undecodable, its chain hash made to fit."""
    import json

    def spoil(records: list[dict[str, Any]]) -> None:
        newest = _newest(records)
        newest.pop("stored", None)
        newest["state"] = json.dumps({"actor": {"account_id": "x"}, "nonsense": True})

    return _rechained(lines, spoil)


def test_an_export_whose_positions_contradict_its_versions_imports_nothing(
    populated: SessionLedger, tmp_path: Any
) -> None:
    """Positions must be >= 1 and follow each session's versions, even where the chain fits."""

    def swap_last_two(records: list[dict[str, Any]]) -> None:
        last = _newest(records)
        before = next(
            r
            for r in records
            if r["session_id"] == last["session_id"] and r["version"] == last["version"] - 1
        )
        before["position"], last["position"] = last["position"], before["position"]

    def start_at_zero(records: list[dict[str, Any]]) -> None:
        min(records, key=lambda r: r["position"])["position"] = 0

    lines = list(populated.export(ADMIN))
    target = SessionLedger(f"sqlite:///{tmp_path / 'imported.db'}")
    try:
        with pytest.raises(InvalidInput, match="before its predecessor"):
            target.import_(_rechained(lines, swap_last_two))
        with pytest.raises(InvalidInput, match="start at 1"):
            target.import_(_rechained(lines, start_at_zero))
        assert target.core.store.recorder.max_notification_id() is None
        assert target.import_(_rechained(lines, lambda records: None)).events == len(lines) - 1
    finally:
        target.close()


def test_an_export_whose_chain_holds_but_an_event_cannot_be_applied_imports_nothing(
    populated: SessionLedger, tmp_path: Any
) -> None:
    """A chain-consistent export with an event this version cannot apply is refused whole."""
    lines = _rehashed_with_unreadable_payload(list(populated.export(ADMIN)))
    target = SessionLedger(f"sqlite:///{tmp_path / 'imported.db'}")
    try:
        with pytest.raises(InvalidInput, match="cannot be replayed"):
            target.import_(lines)
        assert target.core.store.recorder.max_notification_id() is None
    finally:
        target.close()


def test_verify_reports_a_chain_consistent_event_it_cannot_apply(
    populated: SessionLedger,
) -> None:
    """A row rewritten with a fitting hash but an unusable payload is reported, not raised."""
    import json

    lines = _rehashed_with_unreadable_payload(list(populated.export(ADMIN)))
    forged = next(r for r in map(json.loads, lines[1:]) if "nonsense" in r.get("state", ""))
    _execute(
        populated,
        "UPDATE chatledger_events SET state = :state, hash = :hash WHERE id = :id",
        state=forged["state"].encode(),
        hash=bytes.fromhex(forged["hash"]),
        id=forged["position"],
    )
    assert populated.verify(ADMIN).ok  # the chain holds and the payload is not decoded
    (issue,) = populated.verify(ADMIN, deep=True).issues
    assert (issue.reason, issue.position) == ("event cannot be replayed", forged["position"])


def test_import_refuses_a_non_empty_ledger(populated: SessionLedger) -> None:
    """Importing into a ledger that already has events raises InvalidInput, nothing added."""
    lines = list(populated.export(ALICE))
    before = len(_rows(populated))
    with pytest.raises(InvalidInput, match="empty"):
        populated.import_(lines)
    assert len(_rows(populated)) == before


def test_member_export_holds_only_their_account(populated: SessionLedger) -> None:
    """A member's export contains only their tenant's sessions."""
    import json

    tenants = {json.loads(line)["tenant"] for line in list(populated.export(ALICE))[1:]}
    assert tenants == {"acme"}


def test_anchored_heads_catch_events_cut_off_the_end(populated: SessionLedger) -> None:
    """Deleting a session's newest events is invisible to the chain but caught by anchors."""
    anchors = populated.verify(ADMIN).heads
    assert len(anchors) == 3
    newest = max(_rows(populated), key=lambda r: r["id"])
    _execute(populated, "DELETE FROM chatledger_events WHERE id = :id", id=newest["id"])
    assert populated.verify(ADMIN).ok  # the truncated chain is still self-consistent
    report = populated.verify(ADMIN, anchors=anchors)
    assert [i.reason for i in report.issues] == ["anchored head missing"]


def test_import_reproduces_random_histories(
    make_ledger: Callable[..., SessionLedger], tmp_path: Any
) -> None:
    """Hypothesis: for random sessions, the imported copy shows the same views and histories."""
    import itertools

    ledger = make_ledger(snapshot_interval=3)
    counter = itertools.count()
    steps = st.lists(
        st.tuples(st.sampled_from(["add", "commit", "merge", "fork", "evict"]), st.integers(0, 3)),
        min_size=1,
        max_size=12,
    )

    @settings(
        max_examples=15,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(steps)
    def run(ops: list[tuple[str, int]]) -> None:
        _execute(ledger, "DELETE FROM chatledger_events")
        _execute(ledger, "DELETE FROM chatledger_snapshots")
        ledger.core.sessions.clear()
        keys = ["a"]
        ledger.add_message(ALICE, "a", "user", "start")
        for op, n in ops:
            key = keys[n % len(keys)]
            if op == "add":
                ledger.add_message(ALICE, key, "user", f"m{n}")
            elif op == "commit":
                ledger.commit(ALICE, key)
            elif op == "merge":
                ledger.merge_archives(ALICE, key, threshold=1)
            elif op == "fork":
                keys.append(f"f{len(keys)}")
                ledger.fork(ALICE, key, 1 + n % len(ledger.history(ALICE, key)), keys[-1])
            else:
                ledger.evict(ALICE, key, reason="idle", idle_seconds=float(n))
        copy = SessionLedger(f"sqlite:///{tmp_path / f'copy-{next(counter)}.db'}")
        try:
            copy.import_(ledger.export(ADMIN))
            assert copy.verify(ADMIN).ok
            for key in keys:
                assert copy.session(ALICE, key) == ledger.session(ALICE, key)
                assert copy.history(ALICE, key) == ledger.history(ALICE, key)
        finally:
            copy.close()
        seen.update(keys)

    seen: set[str] = set()
    run()
    assert len(seen) > 1  # forks happened: more than one session was compared
