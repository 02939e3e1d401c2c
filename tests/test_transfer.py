"""Import and export (chatledger/service/transfer.py): all or nothing, retried after kills,
missing data keys said out loud, and key material in no message.

An import is killed with SIGKILL (a real process: ``tests/import_worker.py``) at each
of its steps -- after the checks, after the first data key was taken over, with the
events inserted but not committed, after the commit -- and run again: it imports
(or, after the commit, the ledger holds the whole file). Every error, log line and
CLI message of a failing import is scanned for the file's key material, in every
encoding it could take.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from chatledger import ImportResult, InvalidInput, SessionLedger
from chatledger.cli import app
from chatledger.domain.ports import KeyRecord
from erasure_support import SECRET, fill
from support import ADMIN, ALICE, BOB, store_state

WORKER = Path(__file__).with_name("import_worker.py")
TIMEOUT = 60.0
runner = CliRunner()


@pytest.fixture
def exported(tmp_path: Path) -> list[str]:
    """An export of an encrypted ledger: three sessions of two accounts, each with its key
    (one erased: its key line has no material)."""
    source = SessionLedger(f"sqlite:///{tmp_path / 'source.db'}", encryption=True)
    try:
        fill(source, "s1")
        fill(source, "s2")
        fill(source, "gone")
        source.erase(ALICE, "gone")
        source.add_message(BOB, "b1", "user", f"Bob's {SECRET}", shared_state={"app:x": {"n": 1}})
        return list(source.export(ADMIN))
    finally:
        source.close()


def materials(lines: list[str]) -> list[bytes]:
    """The key material the export's key lines carry."""
    found = []
    for line in lines[1:]:
        key = json.loads(line).get("data_key")
        if key and key["material"]:
            found.append(base64.b64decode(key["material"]))
    return found


def spellings(material: bytes) -> list[str]:
    """``material`` as text could show it: hex (either case, PostgreSQL's bytea ``\\x``),
    base64 (standard, URL-safe, unpadded), Python's bytes repr, latin-1."""
    hexed = material.hex()
    return [
        hexed,
        hexed.upper(),
        base64.b64encode(material).decode().rstrip("="),
        base64.urlsafe_b64encode(material).decode().rstrip("="),
        repr(material)[2:-1],
        material.decode("latin-1"),
    ]


def assert_no_key_material(text: str, lines: list[str]) -> None:
    """No 8 consecutive characters of any spelling of any key of the file are in ``text``
    (a quarter of a key's hex, a third of its base64: no fragment a search could use)."""
    for material in materials(lines):
        for spelled in spellings(material):
            window = 8
            for start in range(len(spelled) - window + 1):
                fragment = spelled[start : start + window]
                assert fragment not in text, f"key material ({fragment!r}) in: {text[:200]}"


def test_the_key_scan_finds_key_material(exported: list[str]) -> None:
    """The scan itself: half a key, in any of its spellings, is found."""
    material = materials(exported)[0]
    for spelled in spellings(material):
        with pytest.raises(AssertionError, match="key material"):
            assert_no_key_material(f"error: {spelled[: len(spelled) // 2]} ...", exported)


# ---------------------------------------------------------------- kills
def _killed_at(step: str, url: str, file: Path) -> None:
    """Run the import worker until it reaches ``step``, then SIGKILL it."""
    process = subprocess.Popen(
        [sys.executable, str(WORKER), url, str(file), step],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == f"AT {step}", (line, process.stderr.read() if line == "" else "")
        os.kill(process.pid, signal.SIGKILL)
        assert process.wait(timeout=TIMEOUT) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=TIMEOUT)


@pytest.mark.parametrize("step", ["verified", "key", "events", "written"])
def test_an_import_killed_at_any_step_imports_when_retried(
    make_ledger: Callable[..., SessionLedger],
    database_url: str,
    exported: list[str],
    tmp_path: Path,
    step: str,
) -> None:
    """SIGKILL at each step of an import, then the same import again: it records every event
    (or, killed after its commit, the ledger holds them all already), the content reads, and
    the ledger exports the file it was given, byte for byte. No retry fails on the keys the
    killed run wrote."""
    file = tmp_path / "export.jsonl"
    file.write_text("\n".join(exported) + "\n", encoding="utf-8")
    make_ledger()  # the tables exist, as a first run would leave them
    _killed_at(step, database_url, file)
    ledger = make_ledger()
    if step == "written":
        with pytest.raises(InvalidInput, match="holds events"):
            ledger.import_(exported)
    else:
        assert ledger.core.store.event_recorder.max_notification_id() is None  # all or nothing
        result = ledger.import_(exported)
        assert (result.events, result.sessions) == (len(exported) - 1, 5)
    assert list(ledger.export(ADMIN)) == exported
    assert ledger.verify(ADMIN, deep=True).ok
    assert SECRET in ledger.session(ALICE, "s1").buffer[0].content


# ---------------------------------------------------------------- keys
def _first_key(lines: list[str]) -> tuple[KeyRecord, bytes]:
    """The first data key the export brings (with material): its record and material."""
    first = next(
        key
        for line in lines[1:]
        if (key := json.loads(line).get("data_key")) is not None and key["material"]
    )
    record = KeyRecord.model_validate({k: v for k, v in first.items() if k != "material"})
    return record, base64.b64decode(first["material"])


def test_a_retried_import_finds_the_keys_an_earlier_run_took_over(
    make_ledger: Callable[..., SessionLedger], exported: list[str]
) -> None:
    """Keys already in the key store exactly as the file has them are not written again; the
    import goes on (what a run killed after taking over keys leaves)."""
    ledger = make_ledger()
    record, material = _first_key(exported)
    ledger.core.store.keyring.store.restore(record, material)
    assert ledger.import_(exported).events == len(exported) - 1
    assert SECRET in ledger.session(ALICE, "s1").buffer[0].content


def _with_other_material(lines: list[str]) -> list[str]:
    """The export with its first key's material replaced by other bytes."""
    out = list(lines)
    for i, line in enumerate(out):
        record = json.loads(line)
        if "data_key" in record and record["data_key"]["material"]:
            record["data_key"]["material"] = base64.b64encode(bytes(range(32))).decode()
            out[i] = json.dumps(record)
            return out
    raise AssertionError("no key line")


def test_a_key_store_holding_another_key_of_that_id_is_refused_without_showing_either(
    make_ledger: Callable[..., SessionLedger],
    exported: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The target's key store holds a key of that id with other material (an import of a
    different file was killed): InvalidInput, nothing recorded, and neither key's material
    in the message or the log."""
    ledger = make_ledger()
    record, _ = _first_key(exported)
    ledger.core.store.keyring.store.restore(record, bytes(range(32)))
    state = store_state(ledger)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(InvalidInput, match="holds another key under that id") as raised:
        ledger.import_(exported)
    assert store_state(ledger) == state
    for text in (str(raised.value), caplog.text):
        assert_no_key_material(text, exported)
        assert_no_key_material(text, _with_other_material(exported))


def _hostile_key_files(lines: list[str]) -> Iterator[tuple[str, list[str]]]:
    """Files whose key lines are wrong in ways that reach the key checks or the database."""
    records = [json.loads(line) for line in lines]
    keyed = [i for i, r in enumerate(records) if "data_key" in r and r["data_key"]["material"]]

    def edited(index: int, **changes: Any) -> list[str]:
        copy = [dict(r) for r in records]
        copy[index] = {**copy[index], "data_key": {**copy[index]["data_key"], **changes}}
        return [json.dumps(r) for r in copy]

    first, second = keyed[0], keyed[1]
    other_session = records[second]["data_key"]["session_id"]
    yield "another session's key", edited(first, session_id=other_session)
    yield "another account's key", edited(first, tenant="initech")
    yield "a user key of nobody", edited(first, scope="user", session_id=None, user_id="eve")
    yield "a key id too long for the table", edited(first, key_id="k" * 100)
    yield "material of 16 bytes", edited(first, material=base64.b64encode(b"x" * 16).decode())
    yield "material and destroyed", edited(first, destroyed_at="2026-01-01T00:00:00Z")
    yield "a tenant with NUL", edited(first, tenant="ac\x00me")
    yield "created at no time", edited(first, created_at="yesterday")


def test_no_failing_import_shows_key_material(
    make_ledger: Callable[..., SessionLedger],
    exported: list[str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every import of a file with a wrong key line fails as InvalidInput naming the line,
    records nothing, and says nothing of any key's material -- in the exception, in the
    log (at DEBUG), or in the CLI's output and error stream."""
    ledger = make_ledger()
    state = store_state(ledger)
    caplog.set_level(logging.DEBUG)
    for name, lines in _hostile_key_files(exported):
        with pytest.raises(InvalidInput, match=r"Line \d+") as raised:
            ledger.import_(lines)
            pytest.fail(f"{name}: imported")
        assert store_state(ledger) == state, name
        assert_no_key_material(str(raised.value), exported)
        file = tmp_path / "hostile.jsonl"
        file.write_text("\n".join(lines) + "\n", encoding="utf-8")
        target = f"sqlite:///{tmp_path / 'cli.db'}"
        result = runner.invoke(app, ["import", str(file), "--url", target, "-vv"])
        assert result.exit_code == 2, (name, result.output)
        assert "Line " in result.output and "Traceback" not in result.output, name
        assert_no_key_material(result.output, exported)
    assert_no_key_material(caplog.text, exported)


# --------------------------------------------------------- missing keys
def _without_key_lines(lines: list[str]) -> list[str]:
    records = [json.loads(line) for line in lines]
    return [json.dumps({k: v for k, v in r.items() if k != "data_key"}) for r in records]


def test_an_export_without_its_key_lines_is_refused_naming_the_line(
    make_ledger: Callable[..., SessionLedger], exported: list[str]
) -> None:
    """Encrypted content whose data key neither the file nor the key store holds would read
    as erased: the import is InvalidInput naming the first such line, and records nothing."""
    ledger = make_ledger()
    state = store_state(ledger)
    stripped = _without_key_lines(exported)
    line = next(n for n, text in enumerate(stripped, 1) if '"sealed"' in text)
    with pytest.raises(InvalidInput, match=rf"Line {line} is sealed with data key .* does not"):
        ledger.import_(stripped)
    assert store_state(ledger) == state


def test_a_whole_export_counts_the_sessions_erased_at_the_source(
    make_ledger: Callable[..., SessionLedger], exported: list[str]
) -> None:
    """A session erased before the export (its key line without material) imports erased,
    and the result says so; nothing reads as unreadable."""
    whole = make_ledger().import_(exported)
    assert (whole.erased_sessions, whole.unreadable_sessions) == (1, 0)


def test_the_cli_says_when_content_reads_as_erased(exported: list[str], tmp_path: Path) -> None:
    """`chatledger import` refuses a file without key lines (exit 2, naming the option); with
    --allow-missing-keys it imports and says how many sessions read as erased."""
    file = tmp_path / "stripped.jsonl"
    file.write_text("\n".join(_without_key_lines(exported)) + "\n", encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'copy.db'}"
    refused = runner.invoke(app, ["import", str(file), "--url", url])
    assert refused.exit_code == 2 and "--allow-missing-keys" in refused.output
    done = runner.invoke(app, ["import", str(file), "--url", url, "--allow-missing-keys"])
    assert done.exit_code == 0, done.output
    assert "5 of them read as [erased]: the file lacks their data keys" in done.output
    as_json = runner.invoke(
        app, ["import", str(file), "--url", f"sqlite:///{tmp_path / 'j.db'}", "--json",
              "--allow-missing-keys"],
    )  # fmt: skip
    assert json.loads(as_json.stdout)["unreadable_sessions"] == 5
    whole = tmp_path / "whole.jsonl"
    whole.write_text("\n".join(exported) + "\n", encoding="utf-8")
    erased = runner.invoke(app, ["import", str(whole), "--url", f"sqlite:///{tmp_path / 'w.db'}"])
    assert "1 of them were erased before the export" in erased.output


def test_an_allowed_import_without_keys_reads_erased_and_verifies(
    database_url: str, exported: list[str], make_ledger: Callable[..., SessionLedger]
) -> None:
    """The sessions imported without their keys read as [erased] everywhere and verify."""
    ledger = make_ledger()
    result = ledger.import_(_without_key_lines(exported), allow_missing_keys=True)
    assert isinstance(result, ImportResult)
    assert (result.sessions, result.unreadable_sessions) == (5, 5)
    assert "[erased]" in ledger.session(ALICE, "s1").buffer[0].content
    assert SECRET not in json.dumps(list(ledger.export(ADMIN)))
    assert ledger.verify(ADMIN, deep=True).ok


def test_a_failing_key_store_write_shows_no_key_material(
    make_ledger: Callable[..., SessionLedger], caplog: pytest.LogCaptureFixture
) -> None:
    """A key the database refuses (here: a second key of one session) is StoreUnavailable
    naming the constraint -- not the statement's values, nor PostgreSQL's DETAIL, which
    showed half of the key's bytes -- in the message and in every exception it carries."""
    from datetime import UTC, datetime
    from uuid import uuid4

    from chatledger import StoreUnavailable
    from chatledger.domain.ports import KeyRecord

    keys = make_ledger().core.store.keyring.store
    material = bytes(range(100, 132))
    record = KeyRecord(
        key_id="kfirst", scope="session", tenant="acme", user_id="", session_id=uuid4(),
        created_at=datetime.now(UTC),
    )  # fmt: skip
    keys.restore(record, material)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(StoreUnavailable, match="chatledger_keys") as raised:
        keys.restore(record.model_copy(update={"key_id": "ksecond"}), material)
    key_line = {"data_key": {"material": base64.b64encode(material).decode()}}
    lines = ["{}", json.dumps(key_line)]
    chain: BaseException | None = raised.value
    while chain is not None:
        assert_no_key_material(str(chain), lines)
        chain = chain.__cause__ or chain.__context__
    assert_no_key_material(caplog.text, lines)


def test_the_cli_names_the_line_of_a_file_that_is_not_utf8(
    exported: list[str], tmp_path: Path
) -> None:
    """`chatledger import` of a file with a line that is not UTF-8: exit code 2 naming the
    line, no traceback, nothing imported."""
    file = tmp_path / "latin1.jsonl"
    file.write_bytes(("\n".join(exported[:3]) + "\n").encode() + b'{"x": "caf\xe9"}\n')
    url = f"sqlite:///{tmp_path / 'copy.db'}"
    result = runner.invoke(app, ["import", str(file), "--url", url])
    assert result.exit_code == 2 and "Line 4" in result.output, result.output
    assert "Traceback" not in result.output
    with SessionLedger(url) as copy:
        assert copy.core.store.event_recorder.max_notification_id() is None


# ------------------------------------------------------ the shape of a line
FIXTURES = Path(__file__).resolve().parent / "fixtures"
OLD_EXPORTS = [*sorted(FIXTURES.glob("*.export.jsonl")), FIXTURES / "v0_1_0.jsonl"]


@pytest.mark.parametrize("file", OLD_EXPORTS, ids=lambda p: p.name)
def test_every_old_export_file_imports_and_verifies_unchanged(
    make_ledger: Callable[..., SessionLedger], file: Path, tmp_path: Path
) -> None:
    """Files of formats 1 to 3 import as they are and verify deep; exported again (format 4)
    their stored rows are the file's, and that export imports to the same histories."""
    lines = file.read_text(encoding="utf-8").splitlines()
    ledger = make_ledger()
    result = ledger.import_(lines)
    assert result.events == len(lines) - 1 and result.unreadable_sessions == 0
    assert ledger.verify(ADMIN, deep=True).ok
    again = list(ledger.export(ADMIN))
    assert json.loads(again[0])["format_version"] == 4
    assert sorted(map(_stored_row, again[1:])) == sorted(map(_stored_row, lines[1:]))
    with SessionLedger(f"sqlite:///{tmp_path / 'copy.db'}") as copy:
        copy.import_(again)
        for line in again[1:]:
            record = json.loads(line)
            if record["version"] == 1 and not record["key"].startswith("~state:"):
                key, tenant = record["key"], record["tenant"]
                assert copy.history(ADMIN, key, account_id=tenant) == ledger.history(
                    ADMIN, key, account_id=tenant
                )


def _stored_row(line: str) -> tuple[Any, ...]:
    """What a line says of its stored row, in any format: the hashed values and the stored
    payload's bytes (a JSON object -- ``stored`` since format 4, ``event`` before --, text
    in ``state``, or base64 in ``state_base64``)."""
    r = json.loads(line)
    obj = r.get("stored", r.get("event") if "state" not in r else None)
    if obj is not None and "stored" not in r and "state_base64" in r:
        obj = None
    if obj is not None:
        payload = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    elif "state" in r:
        payload = r["state"].encode()
    else:
        payload = base64.b64decode(r["state_base64"])
    return (r["position"], r["session_id"], r["version"], r["topic"], r["timestamp_us"],
            payload, r["hash"])  # fmt: skip


def test_an_export_line_is_the_event_as_log_json_shows_it(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """One JSON shape for an event everywhere: each export line carries exactly the fields of
    the `log --json` line of its event, with the same values (the whole event, not the stored
    compact form), and adds what an import needs."""
    ledger = make_ledger()
    ledger.add_message(ALICE, "s1", "user", "Where is order 7?")
    ledger.add_items(ALICE, "s1", [{"type": "function_call", "name": "f", "arguments": "{}"}],
                     state={"step": 1})  # fmt: skip
    ledger.commit(ALICE, "s1")
    url = ledger.settings.url
    logged = runner.invoke(app, ["log", "s1", "--url", url, "--json", "--account", "acme"])
    assert logged.exit_code == 0, logged.output
    shown = [json.loads(line) for line in logged.stdout.splitlines()]
    lines = [json.loads(line) for line in list(ledger.export(ALICE, "s1"))[1:]]
    assert len(lines) == len(shown)
    for line, log_line in zip(lines, shown, strict=True):
        assert {k: line[k] for k in log_line} == log_line
        assert set(line) - set(log_line) <= {
            "position", "session_id", "tenant", "topic", "timestamp_us", "stored", "state",
            "state_base64", "hash", "data_key",
        }  # fmt: skip
    added = next(line for line in lines if line["type"] == "MessageAdded")
    assert added["event"]["message"]["content"] == "Where is order 7?"
    assert "a" not in added["event"] and added["stored"]["c"] == "Where is order 7?"


def test_an_encrypted_ledger_exports_its_events_in_the_same_shape_content_sealed(
    make_ledger: Callable[..., SessionLedger], tmp_path: Path
) -> None:
    """With encryption on, a line shows its event as it reads without keys (content erased);
    the content is only in the stored payload, sealed, beside its key -- and imported it
    reads again, `log --json` of the copy equal to the source's."""
    ledger = make_ledger(encryption=True)
    fill(ledger, "s1")
    lines = list(ledger.export(ALICE, "s1"))
    assert SECRET not in "\n".join(lines)
    first = json.loads(lines[2])
    assert first["type"] == "MessageAdded" and first["event"]["message"]["content"] == "[erased]"
    assert "sealed" in first["stored"] and "data_key" in first
    url = f"sqlite:///{tmp_path / 'copy.db'}"
    with SessionLedger(url) as copy:
        copy.import_(lines)
    source_log = runner.invoke(app, ["log", "s1", "--url", ledger.settings.url, "--json",
                                     "--account", "acme"])  # fmt: skip
    copy_log = runner.invoke(app, ["log", "s1", "--url", url, "--json", "--account", "acme"])
    assert SECRET in source_log.stdout and copy_log.stdout == source_log.stdout
