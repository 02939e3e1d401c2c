"""Run agent frameworks' own test suites against chatledger's shipped classes, unedited.

``python3 dev.py framework-suites`` installs what it needs into
``.venv-frameworks`` and runs this file (or run it with a Python that has
``chatledger[openai-agents,ag2]`` and the suites' test dependencies). For
each suite it runs the framework's test files as they are, once on the
framework's own store (the baseline) and once per database on chatledger's
class -- a pytest plugin beside this file substitutes it for the store the
tests construct -- and prints, per file, the tests and how many passed on
each, and every test that fails on chatledger with the reason.

Suites:

* ``agents-sdk``: the OpenAI Agents SDK's session, compaction and encrypted
  session tests (its source distribution of the pinned version, downloaded
  from the package index; its ``tests/`` are not copied into this
  repository), ``SQLiteSession`` -> ``ChatLedgerSession``
  (``agents_sdk_plugin.py``).
* ``ag2``: AG2's ACP session tests (``test/acp/test_agent_sessions.py``),
  ``MemoryStorage`` -> ``LedgerStorage`` (``ag2_plugin.py``). AG2's source
  distribution ships no tests, so they come from a checkout of the release
  tag named by ``--ag2-source`` (or ``CHATLEDGER_AG2_SOURCE``); without one the
  suite is reported as not run (and fails the job under ``--require-all``).

A failure is expected only for the tests listed in a suite's ``INTERNALS``:
they open the framework store's private connections, locks or raw tables, or
rely on the framework special-casing its own store class, so no third-party
store could pass them. Any other test that passes on the baseline and fails
on chatledger is a gap: the job then exits 1. ``--postgres URL`` adds a run
on PostgreSQL (every store of a test process in that one database, each an
account of its own).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SDK_VERSION = "0.24.0"
AG2_VERSION = "1.2.1"

AGENTS_SDK_FILES = (
    "tests/memory/test_session.py",
    "tests/memory/test_session_limit.py",
    "tests/memory/test_compaction_suffix.py",
    "tests/memory/test_compaction_model_visibility.py",
    "tests/memory/test_openai_responses_compaction_session.py",
    "tests/extensions/memory/test_encrypt_session.py",
)

_CONNECTIONS = "reads SQLiteSession's private per-thread connection registry"
_RAW_TABLE = "writes or alters SQLiteSession's raw agent_messages/agent_sessions tables"
_HOOKS = "patches SQLiteSession's private write helpers (_insert_items, locks, connections)"
_SDK_SPECIAL_CASE = (
    "EncryptedSession authenticates pops inside the transaction only for the SDK's own "
    "SQLiteSession class (its docstring: other stores keep the plain pop)"
)
AGENTS_SDK_INTERNALS: dict[str, str] = {
    # tests/memory/test_session.py
    "test_sqlite_session_close_closes_worker_thread_connections": _CONNECTIONS,
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": _CONNECTIONS,
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation": _CONNECTIONS,
    "test_sqlite_session_keeps_connections_of_live_worker_threads": _CONNECTIONS,
    "test_sqlite_session_closed_rejects_empty_add_items": (
        "SQLiteSession.close() lifecycle (not part of the Session protocol)"
    ),
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": _RAW_TABLE + " (corrupt JSON rows)",
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": (
        _RAW_TABLE + " (corrupt JSON rows)"
    ),
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": _RAW_TABLE,
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": _RAW_TABLE,
    "test_sqlite_session_file_lock_is_shared_across_instances": (
        "reads SQLiteSession's private process-wide file lock"
    ),
    "test_sqlite_session_failed_add_items_releases_write_lock": _RAW_TABLE + " (drops a table)",
    "test_sqlite_session_failed_clear_session_rolls_back": _RAW_TABLE + " (drops a table)",
    "test_sqlite_session_failed_pop_item_releases_write_lock": _RAW_TABLE + " (drops a table)",
    "test_sqlite_session_rollback_failure_evicts_connection": _CONNECTIONS,
    "test_sqlite_session_close_retries_quarantined_connection": _CONNECTIONS,
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": _CONNECTIONS,
    # tests/memory/test_compaction_suffix.py
    "test_suffix_transaction_rolls_back_failed_insert": _RAW_TABLE + " (an SQL trigger)",
    "test_cancelled_suffix_transaction_settles_before_newer_append": _HOOKS,
    "test_failed_encrypted_suffix_transaction_preserves_original_tokens": (
        _RAW_TABLE + " (an SQL trigger)"
    ),
    # tests/memory/test_openai_responses_compaction_session.py
    "test_settled_pop_failure_invalidates_response_chain": _CONNECTIONS,
    "test_settled_clear_failure_invalidates_response_chain": _CONNECTIONS,
    # tests/extensions/memory/test_encrypt_session.py
    "test_encrypted_pop_wrong_key_preserves_recoverable_history": _SDK_SPECIAL_CASE,
    "test_encrypted_pop_rechecks_authentication_after_expired_tail": _SDK_SPECIAL_CASE,
    "test_encrypted_pop_authentication_is_atomic_with_concurrent_mutations": (
        _SDK_SPECIAL_CASE + "; also reads the raw table"
    ),
    "test_encrypted_pop_wrong_key_preserves_row_identity": _SDK_SPECIAL_CASE,
    "test_encrypted_pop_cancellation_waits_for_authentication_rollback": _SDK_SPECIAL_CASE,
}


@dataclass(frozen=True)
class Suite:
    """One framework's test files and how chatledger's class is put in for its store."""

    name: str
    files: tuple[str, ...]
    plugin: str  # module beside this file, loaded with -p
    store_env: str  # "chatledger" there selects chatledger; anything else is the baseline
    url_env: str  # a server URL there puts every store in that database
    baseline: str  # the framework's own store, as the table names it
    internals: dict[str, str]  # test name -> why no third-party store can pass it
    source: Callable[[argparse.Namespace], Path | None]  # the tree the files are in
    extra_args: tuple[str, ...] = field(default=())


def fetch_sdk_tests(args: argparse.Namespace) -> Path:
    """The unpacked source distribution of openai-agents (downloaded once into the cache)."""
    cache: Path = args.cache
    root = cache / f"openai_agents-{SDK_VERSION}"
    if (root / "tests").is_dir():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", "openai-agents",
         "--no-deps", f"openai-agents=={SDK_VERSION}", "-d", str(cache)],
        check=True,
    )  # fmt: skip
    archive = next(cache.glob(f"openai_agents-{SDK_VERSION}.tar.gz"))
    with tarfile.open(archive) as sdist:
        sdist.extractall(cache, filter="data")
    return root


def ag2_checkout(args: argparse.Namespace) -> Path | None:
    """A checkout of AG2 at its release tag (the package index has no tests of AG2)."""
    source = args.ag2_source or os.environ.get("CHATLEDGER_AG2_SOURCE")
    if not source:
        return None
    root = Path(source).expanduser().resolve()
    return root if (root / AG2_FILES[0]).is_file() else None


AG2_FILES = ("test/acp/test_agent_sessions.py",)
# Every test of AG2's session store passes on LedgerStorage: none reads MemoryStorage's
# private dict.
AG2_INTERNALS: dict[str, str] = {}

SUITES = {
    "agents-sdk": Suite(
        name="agents-sdk", files=AGENTS_SDK_FILES, plugin="agents_sdk_plugin",
        store_env="CHATLEDGER_AGENTS_SDK_STORE", url_env="CHATLEDGER_AGENTS_SDK_URL",
        baseline="SQLiteSession", internals=AGENTS_SDK_INTERNALS, source=fetch_sdk_tests,
    ),
    "ag2": Suite(
        name="ag2", files=AG2_FILES, plugin="ag2_plugin",
        store_env="CHATLEDGER_AG2_STORE", url_env="CHATLEDGER_AG2_URL",
        baseline="MemoryStorage", internals=AG2_INTERNALS, source=ag2_checkout,
        # AG2's own pytest settings (its pyproject) ask for a marker expression and a
        # timeout plugin: run from the checkout root with pytest-timeout installed.
    ),
}  # fmt: skip


def run_pytest(suite: Suite, tree: Path, runs: dict[str, tuple[str, str, Path]]) -> None:
    """The suite's test files on each store of ``runs`` (label -> (store, server URL, JUnit
    XML report)), all at once: each run is a process of its own, on a database of its own."""
    started = time.perf_counter()
    procs = {}
    for label, (store, url, report) in runs.items():
        env = dict(os.environ)
        env[suite.store_env] = store
        env.pop(suite.url_env, None)
        if url:
            env[suite.url_env] = url
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
        command = [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", suite.plugin,
            "--tb=line", f"--junitxml={report}", "-o", "junit_family=xunit1",
            *suite.extra_args, *suite.files,
        ]  # fmt: skip
        print(f"+ ({suite.name}: {label}) pytest {' '.join(suite.files)}", flush=True)
        procs[label] = subprocess.Popen(
            command, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    for label, proc in procs.items():
        out, err = proc.communicate()
        out += err if proc.returncode not in (0, 1) else ""
        tail = out.strip().splitlines()[-1:] or ["(no output)"]
        print(f"  {label}: {tail[0]} ({time.perf_counter() - started:.0f} s)", flush=True)
        if proc.returncode not in (0, 1):
            sys.exit(f"pytest could not run {suite.name}'s tests ({label}):\n{out[-3000:]}")


def outcomes(report: Path) -> dict[str, dict[str, str]]:
    """file -> test id -> passed | failed | skipped, from a JUnit XML report."""
    found: dict[str, dict[str, str]] = defaultdict(dict)
    for case in ElementTree.parse(report).iter("testcase"):
        file = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
        name = f"{case.get('classname', '').rpartition('.')[2]}::{case.get('name')}"
        if case.find("skipped") is not None:
            state = "skipped"
        elif case.find("failure") is not None or case.find("error") is not None:
            state = "failed"
        else:
            state = "passed"
        found[file][name] = state
    return found


def base_name(test_id: str) -> str:
    """``Class::test_x[param]`` -> ``test_x``."""
    return test_id.rpartition("::")[2].partition("[")[0]


def compare(
    suite: Suite, baseline: dict[str, dict[str, str]], runs: dict[str, dict[str, dict[str, str]]]
) -> list[str]:
    """The table of one suite; the tests that pass on the baseline but fail on chatledger
    without a listed reason."""
    gaps: list[str] = []
    labels = list(runs)
    print(
        f"\n{'file':58} {'tests':>6} {suite.baseline:>14} " + " ".join(f"{lb:>20}" for lb in labels)
    )
    for file in suite.files:
        short = file.split("/", 1)[1]
        base_cases = next((v for k, v in baseline.items() if k.endswith(short)), {})
        mine = {
            lb: next((v for k, v in run.items() if k.endswith(short)), {})
            for lb, run in runs.items()
        }
        counts = " ".join(
            f"{sum(v == 'passed' for v in cases.values()):>20}" for cases in mine.values()
        )
        passed = sum(v == "passed" for v in base_cases.values())
        print(f"{file:58} {len(base_cases):>6} {passed:>14} {counts}")
        for label, cases in mine.items():
            for test, state in sorted(cases.items()):
                if state != "failed":
                    continue
                reason = suite.internals.get(base_name(test))
                if base_cases.get(test) == "passed" and reason is None:
                    gaps.append(f"{file}::{test} ({label})")
                print(f"    fails on {label}: {test} -- {reason or 'NOT EXPLAINED: a gap'}")
            missing = [t for t, v in base_cases.items() if v == "passed" and t not in cases]
            gaps += [f"{file}::{t} ({label}: not run)" for t in missing]
    return gaps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--suite", choices=[*SUITES, "all"], default="all")
    parser.add_argument(
        "--postgres",
        default=os.environ.get("CHATLEDGER_TEST_POSTGRES_URL", ""),
        help="also run on this PostgreSQL URL (default: CHATLEDGER_TEST_POSTGRES_URL)",
    )
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "agents-sdk")
    parser.add_argument("--ag2-source", help="a checkout of AG2 at its release tag")
    parser.add_argument(
        "--skip-baseline", action="store_true",
        help="do not run the frameworks' own stores (every test must pass on chatledger "
        "but the listed ones)",
    )  # fmt: skip
    parser.add_argument(
        "--require-all", action="store_true", help="fail when a suite's tests cannot be found"
    )
    args = parser.parse_args()
    gaps: list[str] = []
    unavailable: list[str] = []
    for suite in SUITES.values() if args.suite == "all" else [SUITES[args.suite]]:
        tree = suite.source(args)
        if tree is None:
            unavailable.append(suite.name)
            print(
                f"\n{suite.name}: NOT RUN -- its tests are not on the package index; pass "
                f"--{suite.name}-source (a checkout of the release tag).",
                flush=True,
            )
            continue
        with tempfile.TemporaryDirectory() as scratch:
            stores = {"chatledger (SQLite)": ("chatledger", "")}
            if not args.skip_baseline:
                stores = {"baseline": ("baseline", ""), **stores}
            if args.postgres:
                stores["chatledger (PostgreSQL)"] = ("chatledger", args.postgres)
            reports = {label: Path(scratch) / f"{n}.xml" for n, label in enumerate(stores)}
            run_pytest(suite, tree, {k: (*v, reports[k]) for k, v in stores.items()})
            found = {label: outcomes(report) for label, report in reports.items()}
        # Without a baseline run, every test is taken to pass on the framework's own store
        # (true of the pinned versions: dev.py framework-suites shows it).
        baseline = found.pop("baseline", None) or {
            file: {t: "skipped" if v == "skipped" else "passed" for t, v in cases.items()}
            for file, cases in found["chatledger (SQLite)"].items()
        }
        gaps += compare(suite, baseline, found)
    if gaps:
        print(f"\n{len(gaps)} test(s) pass on the framework's own store but fail on chatledger:")
        print("\n".join(f"  {gap}" for gap in gaps))
        return 1
    if unavailable and args.require_all:
        print(f"\nNot run: {', '.join(unavailable)}.")
        return 1
    print("\nEvery test that passes on the framework's own store passes on chatledger, except")
    print("the listed tests of that store's internals.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
