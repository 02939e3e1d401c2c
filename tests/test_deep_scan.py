"""The shortcuts of ``verify``'s scan hold the row-by-row verdicts, for any stored values.

- A packed scan (``verify(deep=True)``) reads the nine usual facts as one column; what it
  gives back (``whole_facts``, ``fact_columns``) is what the columns hold -- or, for a
  value of a type the column cannot hold by rights (a blob, a fraction, text among the
  numbers), a value equal to no fact, so the deep check still reports that column.
- The naming check over a session's distinct (topic, facts) agrees with the row-by-row
  one, which still names the first row that differs.
- ``checked_messages`` parses each payload on its own: a payload that is JSON only
  together with its neighbour, or that gives a key twice with a wrong value first, is
  declined (the row-by-row decode then says what is wrong).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from uuid import uuid4

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_audit import _execute, _rows

from chatledger import SessionLedger
from chatledger.adapters.chain_scan import USUAL_FACTS, fact_columns, scan_rows, whole_facts
from chatledger.adapters.codec import checked_messages
from chatledger.domain.identity import message_ids_at
from chatledger.projections.facts import FACT_COLUMNS
from chatledger.service.integrity import first_misnamed, well_named
from support import ADMIN, ALICE

NUMBERS = {"tool_calls", "tool_failures"}  # of the usual facts: the others are text
STAMP = 1_700_000_000_000_000

odd_values = (
    st.none()
    | st.text(max_size=6)
    | st.integers(-(2**63), 2**63 - 1)
    | st.binary(max_size=4)
    | st.floats(allow_nan=False, allow_infinity=False)
)


def _scanned(ledger: SessionLedger, *, packed: bool) -> dict[int, tuple[Any, ...]]:
    """Each row's facts by position, as a packed or an unpacked scan gives them."""
    recorder = ledger.core.store.event_recorder
    scanned = scan_rows(recorder, facts=len(FACT_COLUMNS), packed=packed)
    return {row[0]: whole_facts(row) for batch in scanned for row in batch}


def _by_rights(column: str, value: Any) -> bool:
    """Whether a column may hold a value of this type (text, or a number or nothing)."""
    if column in NUMBERS:
        return value is None or type(value) is int
    return type(value) is str


_ledgers: dict[int, SessionLedger] = {}  # one per test run (make_ledger closes it)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(column=st.sampled_from(USUAL_FACTS), data=st.data(), usual=st.booleans())
def test_a_packed_scan_reads_back_every_fact(
    make_ledger: Callable[..., SessionLedger], column: str, data: st.DataObject, usual: bool
) -> None:
    """A usual fact set to any value reads back from a packed scan as the unpacked scan
    reads it, or (a type the column cannot hold by rights) as a value equal to no fact;
    a row with every usual fact usual reads back whole."""
    ledger = _ledgers.get(id(make_ledger))
    if ledger is None:
        ledger = _ledgers[id(make_ledger)] = make_ledger()
    ledger.add_messages(ALICE, "s", [{"role": "user", "content": "hi"}] * 2)
    if ledger.core.store.event_recorder.dialect == "sqlite":  # a column holds any type
        value: Any = data.draw(odd_values)
    elif column in NUMBERS:  # typed columns: a bigint or nothing
        value = data.draw(st.none() | st.integers(-(2**63), 2**63 - 1))
    else:  # text without NUL
        value = data.draw(st.text(st.characters(exclude_characters="\x00"), max_size=6))
    if usual:  # a usual value, of the right type: the NULL column's path
        value = None if column in NUMBERS else ""
    assume(column in NUMBERS or value is not None)  # the text columns are NOT NULL
    target = _rows(ledger)[-1]
    _execute(ledger, f"UPDATE chatledger_events SET {column} = :v WHERE id = :id", v=value,
             id=target["id"])  # fmt: skip
    packed, plain = _scanned(ledger, packed=True), _scanned(ledger, packed=False)
    assert packed.keys() == plain.keys()
    for position, facts in plain.items():
        got = packed[position]
        for name, want, found in zip(FACT_COLUMNS, facts, got, strict=True):
            if name in USUAL_FACTS and not _by_rights(name, want):
                assert isinstance(found, dict)  # equal to no fact
            else:
                assert (found, type(found)) == (want, type(want))


def test_a_blob_in_a_usual_fact_is_reported_by_the_deep_check(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """A usual fact edited into bytes (a type its column cannot hold by rights) is reported
    as that edited column, not passed over and not an error."""
    ledger = make_ledger()
    ledger.add_messages(ALICE, "s", [{"role": "user", "content": "hi"}] * 3)
    if ledger.core.store.event_recorder.dialect != "sqlite":
        return  # a typed column refuses bytes
    target = _rows(ledger)[-1]
    _execute(ledger, "UPDATE chatledger_events SET actor_user = :v WHERE id = :id",
             v=b"", id=target["id"])  # fmt: skip
    assert ledger.verify(ADMIN).ok
    (issue,) = ledger.verify(ADMIN, deep=True).issues
    assert issue.version == target["originator_version"]
    assert issue.found == "edited fact columns: actor_user"


usual_values = st.none() | st.just(json.dumps(["", "u", "", "member", "", "", "x", 1, None]))
other_values = st.tuples(*[st.integers(0, 3) | st.none() for _ in range(11)])


@given(st.lists(st.tuples(usual_values, other_values), max_size=6))
def test_fact_columns_are_the_whole_facts_of_each_row(
    packed: list[tuple[str | None, tuple[Any, ...]]],
) -> None:
    """fact_columns of packed rows, filled in column by column where every usual fact is
    usual, is whole_facts row by row; an unpacked row's facts are what follows its
    chained columns."""
    rows = [(*range(7), "E", "t", "k", usual, *other) for usual, other in packed]
    assert fact_columns(rows) == (
        list(zip(*map(whole_facts, rows), strict=True)) or [()] * len(FACT_COLUMNS)
    )
    whole = [(*range(7), *range(len(FACT_COLUMNS))) for _ in packed]
    assert [whole_facts(row) for row in whole] == [tuple(range(len(FACT_COLUMNS)))] * len(whole)
    for row in rows:
        facts = whole_facts(row)
        assert len(facts) == len(FACT_COLUMNS)
        usual = dict(zip(FACT_COLUMNS, facts, strict=True))
        expected = json.loads(row[10]) if row[10] else ["", "", "", "", "", "", "", None, None]
        assert [usual[c] for c in USUAL_FACTS] == expected


names = st.sampled_from(["", "MessageAdded", "Committed", "x"])
tenants = st.sampled_from(["", "acme", "other"])


@given(
    st.lists(
        st.tuples(st.sampled_from(["MessageAdded", "Committed", "m:Committed"]), names,
                  tenants, tenants),
        min_size=1, max_size=6,
    ),
    st.sampled_from(["Started", "m:Started"]),
)  # fmt: skip
def test_the_naming_check_over_distinct_facts_agrees_with_row_by_row(
    later: list[tuple[str, str, str, str]], first_topic: str
) -> None:
    """well_named says a session's rows are all well named exactly when the row-by-row
    check finds no row to report (the first whole, later ones whole or slim)."""
    sid = uuid4()
    first = (0, sid.hex, 1, first_topic, b"", 0, b"", "Started", "acme", "k")
    rows = [first] + [
        (n, sid.hex, n + 1, topic, b"", 0, b"", named, tenant, key)
        for n, (topic, named, tenant, key) in enumerate(later, start=1)
    ]
    assert well_named(rows, "acme", "k") == (first_misnamed(sid, rows, "acme", "k") is None)


def _payload(n: int, text: str = "hi") -> bytes:
    return json.dumps({"a": ["acme"], "i": f"m{n}", "r": "user", "c": text}).encode()


def test_a_run_is_parsed_payload_by_payload() -> None:
    """Two payloads that are one JSON array's elements only when joined -- each not JSON
    on its own -- are declined; so is a key given twice with a wrong value first; the
    same run of whole payloads is taken."""
    stamps = [STAMP, STAMP]
    placed = message_ids_at(uuid4(), [1, 2])
    assert checked_messages([_payload(1), _payload(2)], stamps, placed) is not None
    torn = [
        b'{"a":["acme"],"i":"m1","r":"user","c":"',
        b'x"},{"a":["acme"],"i":"m2","r":"user","c":"y"}',
    ]
    assert checked_messages(torn, stamps, placed) is None
    twice = b'{"a":["acme"],"i":"m1","r":"user","c":5,"c":"hi"}'
    assert checked_messages([twice, _payload(2)], stamps, placed) is None


def test_the_deep_check_without_sqlite_json_reads_every_fact_column(
    make_ledger: Callable[..., SessionLedger], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An SQLite built without JSON functions: the deep scan reads the plain columns, and an
    edited usual fact is still reported as that column."""
    from chatledger.adapters import chain_scan

    ledger = make_ledger()
    ledger.add_messages(ALICE, "s", [{"role": "user", "content": "hi"}] * 3)
    ledger.commit(ALICE, "s")
    if ledger.core.store.event_recorder.dialect != "sqlite":
        return  # PostgreSQL always has its JSON functions
    monkeypatch.setattr(chain_scan, "_has_json", lambda connection, dbapi: False)
    assert ledger.verify(ADMIN, deep=True).ok
    target = _rows(ledger)[2]
    _execute(ledger, "UPDATE chatledger_events SET actor_user = 'mallory' WHERE id = :id",
             id=target["id"])  # fmt: skip
    (issue,) = ledger.verify(ADMIN, deep=True).issues
    assert issue.found == "edited fact columns: actor_user"
