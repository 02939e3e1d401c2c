"""Hostile but ordinary-looking input: nothing may brick a session, wedge read models or leak.

Each test reproduces one class of the hardening issue on SQLite and
PostgreSQL: the input is refused with a typed error and records nothing, or
(for what a summarizer returns) the commit fails cleanly as ``CommitFailed``;
afterwards the session still loads, verifies and exports.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from chatledger import (
    ArchiveSummary,
    ClientContext,
    ExtractiveSummarizer,
    InvalidInput,
    InvalidSettings,
    Message,
    ReadModels,
    SessionLedger,
    StoreUnavailable,
    Summary,
)
from chatledger.adapters.chain import GENESIS, chain_hash
from chatledger.adapters.sql_read_models import ArchivesModel
from chatledger.domain.quality import entity_retention_ratio, extract_entities
from support import ADMIN, ALICE, BOB, store_state


class ScriptedSummarizer:
    """Returns whatever summary it is told to (to rehearse a misbehaving summarizer)."""

    def __init__(self, **fields: Any) -> None:
        self.fields = fields
        self.inner = ExtractiveSummarizer()

    def summarize(self, messages: Sequence[Message]) -> Summary:
        base = self.inner.summarize(messages)
        return Summary.model_construct(**{**base.model_dump(), **self.fields})

    def merge(self, archives: Sequence[ArchiveSummary]) -> Summary:
        base = self.inner.merge(archives)
        return Summary.model_construct(**{**base.model_dump(), **self.fields})


# ------------------------------------------------ class 1: nothing undecodable
UNRECORDABLE_META: list[tuple[str, Any]] = [
    ("huge integer", {"n": 10**5000}),
    ("integer past 64 bits", {"n": 2**63}),
    ("negative past 64 bits", {"n": -(2**63) - 1}),
    ("infinity", {"x": float("inf")}),
    ("nan", {"x": float("nan")}),
    ("non-str key", {1: "x"}),
    ("set value", {"x": {1, 2}}),
    ("bytes value", {"x": b"raw"}),
    ("lone surrogate value", {"x": "a\udc80"}),
    ("lone surrogate key", {"k\ud800": 1}),
    ("too deep", {"x": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}),
    ("too big", {"x": "y" * 70_000}),
]


@pytest.mark.parametrize(
    ("label", "meta"), UNRECORDABLE_META, ids=[m[0] for m in UNRECORDABLE_META]
)
def test_a_context_meta_that_json_cannot_hold_is_refused(
    ledger: SessionLedger, label: str, meta: dict[Any, Any]
) -> None:
    """meta with values JSON or a 64-bit column cannot hold raises InvalidInput; nothing stored."""
    before = store_state(ledger)
    with pytest.raises(InvalidInput):
        ledger.add_message(
            ALICE, "s1", "user", "hi", context=ClientContext.model_construct(meta=meta)
        )
    assert store_state(ledger) == before


def test_a_context_within_the_limits_round_trips_exactly(ledger: SessionLedger) -> None:
    """The largest accepted integers, floats, unicode and nesting come back equal."""
    meta = {
        "big": 2**63 - 1,
        "small": -(2**63),
        "float": 1e308,
        "tiny": 5e-324,
        "text": "naïve ✓ 𝄞 \x00 nul is fine inside JSON",
        "nested": [{"a": [1, 2.5, None, True]}],
    }
    context = ClientContext(cwd="/srv/app", additional_directories=("/tmp",), meta=meta)
    ledger.add_message(ALICE, "s1", "user", "hi", context=context)
    ledger.core.sessions.clear()  # a cold load decodes what was stored
    assert ledger.session(ALICE, "s1").context == context
    assert ledger.verify(ALICE, "s1").ok


@pytest.mark.parametrize(
    ("label", "metadata"),
    [("huge integer", {"n": 10**5000}), ("infinity", {"x": float("inf")})],
)
def test_summarizer_metadata_that_cannot_be_stored_fails_the_commit(
    make_ledger: Callable[..., SessionLedger], label: str, metadata: dict[str, Any]
) -> None:
    """A summarizer returning unstorable metadata gives CommitFailed, and the session lives on."""
    ledger = make_ledger(summarizer=ScriptedSummarizer(metadata=metadata))
    ledger.add_message(ALICE, "s1", "user", "Ship it to Berlin.")
    result = ledger.commit(ALICE, "s1")
    assert (result.status, result.archived) == ("failed", False)
    assert "metadata" in (result.error or "")
    assert [e.type for e in ledger.history(ALICE, "s1")][-1] == "CommitFailed"
    ledger.core.sessions.clear()
    assert len(ledger.session(ALICE, "s1").buffer) == 1
    assert ledger.verify(ALICE).ok
    assert len(list(ledger.export(ALICE))) == 1 + 3


# -------------------------------------------- class 3: a linear summarizer
@pytest.mark.timeout(60)
@pytest.mark.parametrize("unit", ["a", "A", "a_", "a.", "a/", "a()", "`", "Ab_c.d/e()"])
def test_entity_extraction_is_linear_on_adversarial_text(unit: str) -> None:
    """A million characters built to make a backtracking regex explode are read in one pass."""
    text = (unit * (1_000_000 // len(unit) + 1))[:1_000_000]
    extract_entities(text)  # quadratic before: 20k letters took 16 s, 1M would take hours


def test_sentence_initial_words_are_not_entities() -> None:
    """'Use' starting a sentence is no entity; names and acronyms are, wherever they stand."""
    text = "Use PostgreSQL and AGFS for Project Falcon."
    assert extract_entities(text) == {"PostgreSQL", "AGFS", "Project", "Falcon"}
    assert entity_retention_ratio([text], "PostgreSQL, AGFS, Project Falcon") == 1.0
    assert "Kafka" in extract_entities("Ask Kafka. Kafka answers.")


def test_a_hanging_summarizer_fails_the_commit_at_the_timeout(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Past summarizer_timeout the commit records CommitFailed; close() does not wait for it."""
    release = threading.Event()

    class Hanging(ExtractiveSummarizer):
        def summarize(self, messages: Sequence[Message]) -> Summary:
            release.wait(30)
            return super().summarize(messages)

    ledger = make_ledger(summarizer=Hanging(), summarizer_timeout=0.3)
    try:
        ledger.add_message(ALICE, "s1", "user", "hello")
        result = ledger.commit(ALICE, "s1")
        assert result.status == "failed"
        assert "summarizer_timeout" in (result.error or "")
        assert ledger.history(ALICE, "s1")[-1].type == "CommitFailed"
        started = time.monotonic()
        ledger.close()
        assert time.monotonic() - started < 5
    finally:
        release.set()


# ----------------------------------------- class 7 and 9: numbers and text
@pytest.mark.parametrize("idle", [float("inf"), float("nan"), -1.0, 1e20, 10**30, True, "5"])
def test_evict_refuses_non_finite_or_absurd_idle_seconds(ledger: SessionLedger, idle: Any) -> None:
    """evict(idle_seconds=inf/nan/1e20/...) raises InvalidInput and records nothing."""
    ledger.add_message(ALICE, "s1", "user", "hi")
    before = store_state(ledger)
    with pytest.raises(InvalidInput, match="idle_seconds"):
        ledger.evict(ALICE, "s1", reason="idle", idle_seconds=idle)
    assert store_state(ledger) == before


@pytest.mark.parametrize(
    ("field", "value"),
    [("content", "a\udc80b"), ("name", "bot\ud800"), ("message_id", "m\udfff"), ("key", "k\ud800")],
)
def test_lone_surrogates_are_invalid_input(ledger: SessionLedger, field: str, value: str) -> None:
    """A lone surrogate anywhere in a message or key is InvalidInput, not a serialisation error."""
    ledger.add_message(ALICE, "s1", "user", "hi")
    before = store_state(ledger)
    arguments: dict[str, Any] = {"content": "x", "name": None, "message_id": None, "key": "s1"}
    arguments[field] = value
    key = arguments.pop("key")
    content = arguments.pop("content")
    with pytest.raises(InvalidInput):
        ledger.add_message(ALICE, key, "user", content, **arguments)
    assert store_state(ledger) == before


@pytest.mark.parametrize("tokens", [10**12 + 1, 2**63, 2**64, -1])
def test_tool_token_counts_are_bounded(ledger: SessionLedger, tokens: int) -> None:
    """Token counts past 10**12 (or negative) are refused, so usage totals cannot overflow."""
    before = store_state(ledger)
    with pytest.raises(InvalidInput):
        ledger.add_message(
            ALICE, "s1", "tool", "x", tool_call={"tool_name": "t", "prompt_tokens": tokens}
        )
    assert store_state(ledger) == before


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda lg: lg.session(ALICE, "s1", at_version=2**64), "at_version"),
        (lambda lg: lg.context(ALICE, "s1", 2**64), "token_budget"),
        (lambda lg: lg.history(ALICE, "s1", after_version=2**63), "after_version"),
        (lambda lg: lg.diff(ALICE, "s1", 1, 2**64), "to_version"),
        (lambda lg: lg.audit(ALICE, offset=2**64), "offset"),
        (lambda lg: lg.evict_idle(ALICE, float("inf")), "max_idle_seconds"),
        (lambda lg: lg.evict_idle(ALICE, float("nan")), "max_idle_seconds"),
        (lambda lg: lg.evict_idle(ALICE, 1e20), "max_idle_seconds"),
        (lambda lg: lg.wait_for_projections(2**64), "position"),
        (lambda lg: lg.wait_for_projections(1, timeout=float("inf")), "timeout"),
    ],
)
def test_out_of_range_numbers_are_invalid_input(
    ledger: SessionLedger, call: Callable[[SessionLedger], Any], pattern: str
) -> None:
    """Numbers past 64 bits or non-finite raise InvalidInput naming the argument."""
    ledger.add_message(ALICE, "s1", "user", "hi")
    before = store_state(ledger)
    with pytest.raises(InvalidInput, match=pattern):
        call(ledger)
    assert store_state(ledger) == before


@pytest.mark.parametrize(
    "options",
    [
        {"busy_timeout": float("inf")},
        {"busy_timeout": float("nan")},
        {"summarizer_timeout": float("inf")},
        {"projections_poll_interval": float("nan")},
        {"snapshot_interval": 2**64},
        {"max_content_chars": 10**12},
    ],
    ids=repr,
)
def test_non_finite_or_absurd_settings_are_invalid_settings(
    database_url: str, options: dict[str, Any]
) -> None:
    """Settings that are infinite, NaN or absurdly large raise InvalidSettings."""
    with pytest.raises(InvalidSettings):
        SessionLedger(database_url, **options)


# ------------------------------------------------------ class 8: sizes
@pytest.mark.parametrize(
    ("label", "call"),
    [
        ("name", lambda lg: lg.add_message(ALICE, "s1", "user", "x", name="n" * 257)),
        (
            "cwd",
            lambda lg: lg.add_message(ALICE, "s1", "user", "x", context=_context(cwd="/" * 5000)),
        ),
        (
            "directories",
            lambda lg: lg.add_message(
                ALICE, "s1", "user", "x", context=_context(additional_directories=("/",) * 65)
            ),
        ),
        (
            "directory",
            lambda lg: lg.add_message(
                ALICE, "s1", "user", "x", context=_context(additional_directories=("d" * 5000,))
            ),
        ),
        (
            "meta",
            lambda lg: lg.add_message(
                ALICE, "s1", "user", "x", context=_context(meta={"k": "v" * 70_000})
            ),
        ),
        ("content", lambda lg: lg.add_message(ALICE, "s1", "user", "x" * 1_000_001)),
    ],
)
def test_every_string_and_collection_has_a_limit(
    ledger: SessionLedger, label: str, call: Callable[[SessionLedger], Any]
) -> None:
    """Names, paths, directory lists, meta and content past their limits are refused."""
    before = store_state(ledger)
    with pytest.raises(InvalidInput):
        call(ledger)
    assert store_state(ledger) == before


def test_an_event_over_max_event_bytes_is_refused(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Whatever the fields, an event whose payload passes max_event_bytes is not recorded."""
    ledger = make_ledger(max_event_bytes=4096)
    ledger.add_message(ALICE, "s1", "user", "small")
    before = store_state(ledger)
    with pytest.raises(InvalidInput, match="max_event_bytes"):
        ledger.add_message(ALICE, "s1", "user", "é" * 3000)
    assert store_state(ledger) == before


def _context(**fields: Any) -> ClientContext:
    return ClientContext.model_construct(**{**ClientContext().model_dump(), **fields})


# ------------------------------------- class 2: no event stops the read models
def _raw(ledger: SessionLedger, sql: str, **values: Any) -> None:
    engine = create_engine(ledger.settings.url)
    try:
        with engine.begin() as connection:
            connection.execute(text(sql), values)
    finally:
        engine.dispose()


def test_usage_totals_saturate_instead_of_overflowing(ledger: SessionLedger) -> None:
    """Token counts near 2**63 in stored rows (an older version's) never overflow the totals."""
    first = ledger.add_message(
        ALICE, "s1", "tool", "x", tool_call={"tool_name": "t", "prompt_tokens": 1}
    )
    second = ledger.add_message(
        ALICE, "s1", "tool", "y", tool_call={"tool_name": "t", "prompt_tokens": 1}
    )
    for added in (first, second):
        _raw(
            ledger,
            "UPDATE chatledger_events SET prompt_tokens = :huge WHERE id = :id",
            huge=2**63 - 1,
            id=added.position,
        )
    with ReadModels(ledger) as models:
        models.catch_up()
        assert models.skipped() == []
        (usage,) = models.usage(ALICE)
        assert usage.call_count == 2
        assert usage.prompt_tokens == 2 * 10**12  # each row counts at most MAX_TOKENS


def test_one_event_no_model_can_take_is_skipped_and_the_log_goes_on(
    ledger: SessionLedger,
) -> None:
    """An undecodable archive event is skipped by that model only; later events still apply."""
    for i in range(5):
        ledger.add_message(ALICE, "s1", "user", f"m{i}")
    ledger.commit(ALICE, "s1")
    poison = ledger.history(ALICE, "s1")[-1]
    assert poison.type == "Committed"
    position = ledger.audit(ALICE, session="s1", types=["Committed"])[0].position
    _raw(
        ledger,
        "UPDATE chatledger_events SET state = :state WHERE id = :id",
        state=b'{"archive": "not an archive"}',
        id=position,
    )
    for i in range(20):
        ledger.add_message(BOB, f"b{i}", "user", "another tenant writes on")
    with ReadModels(ledger, batch_size=1000) as models:
        models.catch_up()
        (skipped,) = models.skipped()
        assert (skipped.model, skipped.position) == ("archives", position)
        assert "decode" in skipped.error
        head = models.head()
        assert models.positions() == dict.fromkeys(models.names, head)
        assert len(models.working_set(BOB)) == 20  # other tenants were never held up
        assert models.working_set(ALICE)[0].commit_count == 1  # the working set took it
        assert models.archives(ALICE, "s1") == []
        models.rebuild("archives")  # a rebuild tries the event again (and records it again)
        assert [s.position for s in models.skipped()] == [position]


# ------------------------------------------- class 5: snapshots are checked
def _snapshot_row(ledger: SessionLedger) -> dict[str, Any]:
    engine = create_engine(ledger.settings.url)
    try:
        with engine.connect() as connection:
            query = "SELECT * FROM chatledger_snapshots ORDER BY originator_version DESC"
            row = connection.execute(text(query)).mappings().first()
            assert row is not None
            return dict(row)
    finally:
        engine.dispose()


@pytest.fixture
def snapshotted(make_ledger: Callable[..., SessionLedger]) -> SessionLedger:
    """A ledger whose session s1 has snapshots (commits make them pay)."""
    ledger = make_ledger(snapshot_interval=4)
    for round_ in range(3):
        for i in range(3):
            ledger.add_message(ALICE, "s1", "user", f"Question {round_}.{i}.")
        ledger.commit(ALICE, "s1")
    assert store_state(ledger).snapshots >= 1
    return ledger


def test_a_snapshot_past_the_last_event_is_reported_and_never_used(
    snapshotted: SessionLedger, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot row beyond the head: verify reports it, loads replay, writes still work."""
    row = _snapshot_row(snapshotted)
    head = store_state(snapshotted).heads
    (last,) = head.values()
    _raw(
        snapshotted,
        "INSERT INTO chatledger_snapshots (originator_id, originator_version, topic, state, "
        "timestamp_us) VALUES (:originator_id, :version, :topic, :state, :timestamp_us)",
        **{**row, "version": last + 5},
    )
    report = snapshotted.verify(ALICE)
    assert [i.reason for i in report.issues] == ["snapshot past the last event"]
    snapshotted.core.sessions.clear()
    with caplog.at_level("WARNING", logger="chatledger.store"):
        assert snapshotted.session(ALICE, "s1").version == last
    assert "past its last event" in caplog.text
    added = snapshotted.add_message(ALICE, "s1", "user", "still writable")
    assert added.version == last + 1


def test_a_garbled_snapshot_is_reported_and_loading_falls_back_to_replay(
    snapshotted: SessionLedger, caplog: pytest.LogCaptureFixture
) -> None:
    """An undecodable snapshot: verify(deep=True) reports it (no crash); session() replays the
    events."""
    row = _snapshot_row(snapshotted)
    expected = snapshotted.session(ALICE, "s1")
    _raw(
        snapshotted,
        "UPDATE chatledger_snapshots SET state = :state WHERE originator_version = :version",
        state=b"{not json",
        version=row["originator_version"],
    )
    assert snapshotted.verify(ALICE).ok  # snapshots are decoded by the deep check only
    report = snapshotted.verify(ALICE, deep=True)
    assert [i.reason for i in report.issues] == ["snapshot cannot be decoded"]
    snapshotted.core.sessions.clear()
    with caplog.at_level("WARNING", logger="chatledger.store"):
        assert snapshotted.session(ALICE, "s1") == expected
    assert "cannot be decoded" in caplog.text


# ------------------------------------- class 6: import re-derives identities
def _export_records(ledger: SessionLedger) -> tuple[str, list[dict[str, Any]]]:
    lines = list(ledger.export(ADMIN))
    return lines[0], [json.loads(line) for line in lines[1:]]


@pytest.fixture
def target(other_database_url: str) -> Iterator[SessionLedger]:
    """An empty ledger in another database (of the other kind), to import into."""
    with SessionLedger(other_database_url) as ledger:
        yield ledger


def _rehash(header: str, records: list[dict[str, Any]]) -> list[str]:
    """The records with every hash recomputed to fit (possible without a chain_key)."""
    previous: dict[str, bytes] = {}
    for r in sorted(records, key=lambda r: (r["session_id"], r["version"])):
        state = json.dumps(r["stored"], ensure_ascii=False, separators=(",", ":")).encode()
        digest = chain_hash(
            previous.get(r["session_id"], GENESIS),
            position=r["position"],
            originator_id=uuid.UUID(r["session_id"]),
            version=r["version"],
            topic=r["topic"],
            timestamp_us=r["timestamp_us"],
            state=state,
        )
        r["hash"] = digest.hex()
        previous[r["session_id"]] = digest
    return [header, *(json.dumps(r) for r in records)]


def test_export_payloads_are_json_objects(make_ledger: Callable[..., SessionLedger]) -> None:
    """Export format 4 carries each stored payload as a JSON object that re-encodes to the
    stored bytes: a message's text itself without encryption (stored form 2), its
    ciphertext (``sealed``) with it."""
    text = 'naïve ✓ "quoted" \\ back\nslash'
    make_ledger().add_message(ALICE, "plain", "user", text)
    make_ledger(encryption=True).add_message(ALICE, "sealed", "user", text)
    header, records = _export_records(make_ledger())
    assert json.loads(header)["format_version"] == 4
    added = {r["key"]: r["stored"] for r in records if r["type"] == "MessageAdded"}
    assert added["plain"]["c"] == text
    assert "c" not in added["sealed"] and added["sealed"]["sealed"]["c"]
    assert all("state" not in r for r in records)


def test_import_refuses_a_session_whose_id_does_not_derive_from_tenant_and_key(
    ledger: SessionLedger, target: SessionLedger
) -> None:
    """A re-hashed export moving acme's session into globex's tenant is refused whole."""
    ledger.add_message(ALICE, "s1", "user", "mine")
    ledger.add_message(BOB, "b1", "user", "theirs")
    header, records = _export_records(ledger)
    started = next(r for r in records if r["tenant"] == "acme" and r["version"] == 1)
    started["stored"]["tenant"] = "globex"  # the same stream id, now claiming another tenant
    before = store_state(target)
    with pytest.raises(InvalidInput, match="tenant 'globex'"):
        target.import_(_rehash(header, records))
    assert store_state(target) == before


def test_import_refuses_a_fork_naming_another_tenants_origin(
    ledger: SessionLedger, target: SessionLedger
) -> None:
    """A fork whose origin id is not its origin key's session in the same tenant is refused."""
    ledger.add_message(ALICE, "s1", "user", "origin")
    ledger.fork(ALICE, "s1", 2, "copy")
    header, records = _export_records(ledger)
    forked = next(r for r in records if r["type"] == "Forked")
    forked["stored"]["origin_session_id"] = str(uuid.uuid5(uuid.NAMESPACE_DNS, "elsewhere"))
    with pytest.raises(InvalidInput, match="fork naming origin"):
        target.import_(_rehash(header, records))


def test_verify_reports_a_stored_identity_that_does_not_derive(ledger: SessionLedger) -> None:
    """A Started row rewritten (hash recomputed, no chain_key) to another tenant is reported."""
    ledger.add_message(ALICE, "s1", "user", "mine")
    header, records = _export_records(ledger)
    started = records[0]
    started["stored"]["tenant"] = "globex"
    for line in _rehash(header, records)[1:]:  # the whole session, so the chain holds
        forged = json.loads(line)
        _raw(
            ledger,
            "UPDATE chatledger_events SET state = :state, hash = :hash WHERE id = :id",
            state=json.dumps(forged["stored"], ensure_ascii=False, separators=(",", ":")).encode(),
            hash=bytes.fromhex(forged["hash"]),
            id=forged["position"],
        )
    (issue,) = ledger.verify(ADMIN).issues
    assert issue.reason == "identity does not derive"


def test_import_checks_an_empty_ledger_before_reading_and_reports_progress(
    ledger: SessionLedger, target: SessionLedger
) -> None:
    """A non-empty target refuses before reading a line; progress reports read/verify/write."""
    ledger.add_message(ALICE, "s1", "user", "hi")
    lines = list(ledger.export(ADMIN))

    def never_read() -> Iterator[str]:
        raise AssertionError("the file was read")
        yield ""

    with pytest.raises(InvalidInput, match="empty ledger"):
        ledger.import_(never_read())
    phases: list[tuple[str, int, int]] = []
    target.import_(lines, progress=lambda *step: phases.append(step))
    assert [p[0] for p in phases] == ["read", "verify", "write"]
    assert all(done == total == 2 for _, done, total in phases)


def _unreachable(dialect: str) -> Exception:
    """What the driver raises when the database cannot serve (not when the data is wrong)."""
    if dialect == "sqlite":
        busy = sqlite3.OperationalError("database is locked")
        busy.sqlite_errorcode = 5  # SQLITE_BUSY
        return DBAPIError("SELECT ...", {}, busy)
    import psycopg

    return DBAPIError("SELECT ...", {}, psycopg.errors.TooManyConnections("too many clients"))


def test_a_database_outage_while_applying_skips_nothing(
    ledger: SessionLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read model failing because the database cannot serve (busy, out of connections)
    stops the catch-up with StoreUnavailable and records no skip, even while a probe query
    still answers; once the database serves again every event applies."""
    ledger.add_message(ALICE, "s1", "user", "m0")
    ledger.commit(ALICE, "s1")
    dialect = ledger.settings.url.split(":")[0].split("+")[0]
    original = ArchivesModel.apply

    def outage(self: ArchivesModel, connection: Any, span: Any) -> None:
        raise _unreachable(dialect)

    with ReadModels(ledger) as models:
        monkeypatch.setattr(ArchivesModel, "apply", outage)
        with pytest.raises(StoreUnavailable):
            models.catch_up()
        assert models.skipped() == []
        monkeypatch.setattr(ArchivesModel, "apply", original)
        models.catch_up()
        assert models.skipped() == []
        assert [a.archive_id for a in models.archives(ALICE, "s1")] == [
            ledger.session(ALICE, "s1").archives[0].archive_id
        ]


def test_only_outages_count_as_environmental() -> None:
    """Busy, out of connections, unreachable: environmental; a value out of range or a
    constraint: not (those may be skipped as poison)."""
    import psycopg

    from chatledger.adapters.database import is_environmental

    busy = sqlite3.OperationalError("database is locked")
    busy.sqlite_errorcode = 5
    overflow = sqlite3.OperationalError("integer overflow")
    overflow.sqlite_errorcode = 1  # SQLITE_ERROR
    wrapped = StoreUnavailable("Could not apply")
    wrapped.__cause__ = DBAPIError("UPDATE ...", {}, psycopg.errors.AdminShutdown("shutdown"))
    assert is_environmental(DBAPIError("SELECT", {}, busy))
    assert is_environmental(wrapped)
    assert is_environmental(psycopg.OperationalError("connection failed"))
    assert not is_environmental(DBAPIError("SELECT", {}, overflow))
    assert not is_environmental(DBAPIError("UPDATE", {}, psycopg.errors.NumericValueOutOfRange()))
    assert not is_environmental(ValueError("bad"))
