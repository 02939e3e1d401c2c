"""Hypothesis fuzz of the public API: arbitrary text and numbers never break the ledger.

Random sequences of calls with arbitrary unicode (surrogates and control
characters included), integers (huge, negative) and floats (non-finite
included) as keys, contents, names, metadata, token counts, versions, limits
and durations. Every call either succeeds or raises a ``ChatLedgerError``;
after each example every recorded event of the touched sessions decodes and
verifies and the session exports and re-imports equal; at the end the whole
ledger verifies and the read models equal a rebuild.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatledger import (
    ChatLedgerError,
    ClientContext,
    Principal,
    ReadModels,
    SessionLedger,
)
from chatledger.adapters.sql_read_models import READ_MODEL_NAMES, dump_rows
from support import ADMIN, ALICE


def mostly(good: st.SearchStrategy[Any], wild: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Usually a usable value (so sessions grow and calls reach deep), sometimes a wild one."""
    return st.integers(0, 4).flatmap(lambda pick: wild if pick == 0 else good)


WILD_TEXT = st.text(max_size=40)  # lone surrogates and control characters included
WILD_INT = st.one_of(st.integers(), st.integers(-(2**70), 2**70), st.just(2**63), st.just(-1))
WILD_FLOAT = st.floats(allow_nan=True, allow_infinity=True)
WILD_NUMBER = st.one_of(WILD_INT, WILD_FLOAT)
KEYS = mostly(st.sampled_from(["k1", "k2", "k-3"]), st.text(max_size=12))
TEXT = mostly(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=40), WILD_TEXT)
SMALL = mostly(st.integers(1, 12), WILD_INT)
JSON_LEAF = st.one_of(st.none(), st.booleans(), WILD_INT, WILD_FLOAT, WILD_TEXT)
WILD_JSON = st.recursive(
    JSON_LEAF,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(WILD_TEXT, children, max_size=3)
    ),
    max_leaves=8,
)
TOOL_CALL = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "tool_name": mostly(st.just("search"), WILD_TEXT),
            "prompt_tokens": mostly(st.integers(0, 500), WILD_INT),
            "completion_tokens": mostly(st.integers(0, 500), WILD_INT),
        }
    ),
)
CALL = st.one_of(
    st.tuples(
        st.just("add"),
        KEYS,
        mostly(st.sampled_from(["user", "assistant", "tool", "system"]), st.just("robot")),
        TEXT,
        st.one_of(st.none(), TEXT),
        TOOL_CALL,
    ),
    st.tuples(st.just("start"), KEYS, TEXT, st.dictionaries(WILD_TEXT, WILD_JSON, max_size=3)),
    st.tuples(st.just("commit"), KEYS),
    st.tuples(st.just("snapshot"), KEYS, st.lists(st.integers(0, 5), min_size=1, max_size=3)),
    st.tuples(st.just("merge"), KEYS, SMALL),
    st.tuples(st.just("evict"), KEYS, st.one_of(st.none(), mostly(st.floats(0, 1e6), WILD_NUMBER))),
    st.tuples(st.just("context"), KEYS, mostly(st.integers(0, 10_000), WILD_NUMBER)),
    st.tuples(st.just("session"), KEYS, SMALL),
    st.tuples(st.just("history"), KEYS, SMALL, st.one_of(st.none(), SMALL)),
    st.tuples(st.just("diff"), KEYS, SMALL, SMALL),
    st.tuples(st.just("fork"), KEYS, SMALL, KEYS),
    st.tuples(st.just("audit"), SMALL, SMALL),
    st.tuples(st.just("working_set"), SMALL, SMALL),
    st.tuples(st.just("evict_idle"), mostly(st.floats(0, 1e6), WILD_NUMBER)),
    st.tuples(st.just("close"), KEYS),
)


def _call(ledger: SessionLedger, principal: Principal, call: tuple[Any, ...]) -> set[str]:
    """Make one call; returns the keys it may have written to."""
    name, *args = call
    if name == "add":
        key, role, content, message_name, tool_call = args
        ledger.add_message(principal, key, role, content, name=message_name, tool_call=tool_call)
        return {key}
    if name == "start":
        key, cwd, meta = args
        context = ClientContext.model_construct(cwd=cwd, additional_directories=(), meta=meta)
        ledger.get_or_create(principal, key, context=context)
        return {key}
    if name == "commit":
        ledger.commit(principal, args[0])
        return {args[0]}
    if name == "snapshot":
        key, picks = args
        live = [m.id for m in ledger.session(principal, key).buffer]
        if live:
            chosen = list(dict.fromkeys(live[i % len(live)] for i in picks))
            ledger.commit_snapshot(principal, key, chosen)
        return {key}
    if name == "merge":
        ledger.merge_archives(principal, args[0], threshold=args[1])
        return {args[0]}
    if name == "evict":
        ledger.evict(principal, args[0], idle_seconds=args[1])
        return {args[0]}
    if name == "context":
        ledger.context(principal, args[0], args[1])
    elif name == "session":
        ledger.session(principal, args[0], at_version=args[1])
    elif name == "history":
        ledger.history(principal, args[0], after_version=args[1], limit=args[2])
    elif name == "diff":
        ledger.diff(principal, args[0], args[1], args[2])
    elif name == "fork":
        ledger.fork(principal, args[0], args[1], args[2])
        return {args[2]}
    elif name == "audit":
        ledger.audit(principal, limit=args[0], offset=args[1])
    elif name == "working_set":
        ledger.working_set(principal, limit=args[0], offset=args[1])
    elif name == "evict_idle":
        ledger.evict_idle(principal, args[0])
        return {"*"}
    elif name == "close":
        ledger.close_session(principal, args[0])
        return {args[0]}
    return set()


def _check_session(ledger: SessionLedger, key: str) -> None:
    """Every event of the session decodes, its chain and facts verify, the view loads."""
    try:
        events = ledger.history(ALICE, key)
    except ChatLedgerError:  # never created, or not a valid key: nothing to check
        return
    assert events and events[0].type in ("Started", "Forked")
    report = ledger.verify(ALICE, key, deep=True)
    assert report.ok, report.issues
    view = ledger.session(ALICE, key)
    assert view.version == events[-1].version
    for value in view.context.meta.values():
        assert not (isinstance(value, float) and not math.isfinite(value))


def test_arbitrary_calls_raise_only_chatledger_errors_and_keep_the_ledger_sound(
    make_ledger: Callable[..., SessionLedger], tmp_path: Any
) -> None:
    """Wild arguments: a ChatLedgerError or success; afterwards everything decodes and verifies."""
    ledger = make_ledger(snapshot_interval=5, max_meta_bytes=512)
    touched: set[str] = set()

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(st.lists(CALL, min_size=1, max_size=12))
    def run(calls: list[tuple[Any, ...]]) -> None:
        written: set[str] = set()
        for call in calls:
            try:
                written |= _call(ledger, ALICE, call)
            except ChatLedgerError as error:
                assert str(error)
        touched.update(written)
        for key in written - {"*"}:
            _check_session(ledger, key)

    run()
    report = ledger.verify(ADMIN, deep=True)
    assert report.ok, report.issues
    lines = list(ledger.export(ADMIN))
    with SessionLedger(f"sqlite:///{tmp_path / 'copy.db'}") as copy:
        result = copy.import_(lines)
        assert result.events == report.events_checked
        assert list(copy.export(ADMIN)) == lines
    with ReadModels(ledger) as models:
        models.catch_up()
        assert models.skipped() == []
        with models.engine.connect() as connection:
            kept = {name: dump_rows(connection, name) for name in READ_MODEL_NAMES}
        models.rebuild()
        with models.engine.connect() as connection:
            rebuilt = {name: dump_rows(connection, name) for name in READ_MODEL_NAMES}
    assert kept == rebuilt


UNICODE = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=50)
"""Valid Unicode text (no lone surrogates), as JSON and the databases take it."""
ACCEPTED_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=20),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=8),
            children,
            max_size=4,
        ),
    ),
    max_leaves=12,
)


def test_any_accepted_context_reads_back_equal_and_round_trips_through_export(
    make_ledger: Callable[..., SessionLedger], tmp_path: Any
) -> None:
    """Any JSON within the limits is recorded, decodes equal, verifies and re-imports equal."""
    ledger = make_ledger()
    reader = make_ledger(cache_size=0)  # every read decodes what was stored
    counter = iter(range(10**9))

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(st.dictionaries(UNICODE.map(lambda k: k[:8]), ACCEPTED_JSON, max_size=4), UNICODE)
    def run(meta: dict[str, Any], content: str) -> None:
        try:
            context = ClientContext(meta=meta)
        except ValueError:
            return
        key = f"k{next(counter)}"
        ledger.add_message(ALICE, key, "user", content, context=context)
        view = reader.session(ALICE, key)
        assert view.context == context
        assert [m.content for m in view.buffer] == [content]
        assert ledger.verify(ALICE, key).ok

    run()
    lines = list(ledger.export(ADMIN))
    with SessionLedger(f"sqlite:///{tmp_path / 'copy.db'}") as copy:
        copy.import_(lines)
        assert list(copy.export(ADMIN)) == lines
        assert copy.verify(ADMIN).ok
