"""``CommitRunner``: the commit protocol, archive merges and commit tasks.

A commit (see docs/concepts.md) takes the buffer snapshot -- the exact
messages to archive -- under the session's lock, summarises them outside the
aggregate (in a thread of its own, at most ``summarizer_timeout`` seconds),
stores the archive body if an archive store is configured, and records one
``Committed`` covering exactly those messages. If a step fails it records a
``CommitFailed`` (best effort) and changes nothing else: the buffer is a
projection of the events, so there is nothing to roll back. A merge is the
same shape with one ``ArchiveMerged``. Commits started with ``wait=False`` run
on a small thread pool; their outcome is a ``CommitTask``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any
from uuid import UUID

from chatledger.adapters.recorders import KeyedRow
from chatledger.domain.access import Target
from chatledger.domain.events import Committed, new_id
from chatledger.domain.failures import ConcurrencyConflict, InvalidInput, StoreUnavailable
from chatledger.domain.limits import Limits, check_summary, error_text
from chatledger.domain.ports import ArchiveBody, ArchiveStore, Summarizer, Summary
from chatledger.domain.quality import entity_retention_ratio, information_retention_ratio
from chatledger.domain.session import Session
from chatledger.domain.values import ArchiveSummary, Message, Principal, estimate_tokens
from chatledger.results import CommitResult, CommitTask, MergeResult
from chatledger.service import merges, retries
from chatledger.service.sessions import AlreadyRecorded, SessionStore, check_expected
from chatledger.service.working import derived_objective

logger = logging.getLogger("chatledger.commits")
BodySealer = Callable[[Session], Callable[[ArchiveBody], ArchiveBody] | None]
"""Given the session (under its lock), what encrypts its archive bodies (None: nothing)."""
KEPT_TASKS = 10_000
"""Finished ``wait=False`` commits remembered for ``task()`` (oldest forgotten first)."""


@dataclass(frozen=True)
class CommitPolicy:
    """The settings a commit runs by."""

    limits: Limits
    entity_retention: bool
    require_archive_store: bool
    summarizer_timeout: float
    commit_workers: int
    merge_threshold: int
    merge_max_count: int
    derive_objective: bool = False


_MAX_TURNS = 8
"""How often a commit starts over after other writers committed its messages first."""


class _Superseded(ConcurrencyConflict):
    """Another writer committed some of a commit's messages before it was recorded."""


@dataclass(frozen=True)
class _Asked:
    """What a commit call asks for, as a retry with its key must ask it again."""

    message_ids: list[str] | None  # None: the whole buffer
    kept: bool
    archive_id: str | None


@dataclass(frozen=True)
class _Pending:
    """What phase 1 of a commit captured: the exact messages to archive."""

    target: Target
    messages: list[Message]
    attempt_id: str
    idempotency_key: str | None
    task_id: str
    archive_id: str | None = None  # the caller's, or a fresh one
    kept: bool = False  # a snapshot archive: the messages stay live
    seal: Callable[[ArchiveBody], ArchiveBody] | None = None  # encrypts the archive body
    asked: _Asked = _Asked(None, False, None)


class CommitRunner:
    """Runs commits and merges of one ledger; knows which sessions have one in flight."""

    def __init__(
        self,
        sessions: SessionStore,
        summarizer: Summarizer,
        archive_store: ArchiveStore | None,
        policy: CommitPolicy,
        now: Callable[[], datetime],
        body_sealer: BodySealer | None = None,
    ) -> None:
        self.sessions = sessions
        self.body_sealer = body_sealer
        self.summarizer = summarizer
        self.archive_store = archive_store
        self.policy = policy
        self.now = now
        self._inflight: set[UUID] = set()
        self._guard = threading.Lock()
        self._tasks: dict[str, CommitTask] = {}
        self._finished: deque[str] = deque()
        self._executor: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------- commits
    def commit(
        self,
        principal: Principal,
        target: Target,
        message_ids: list[str] | None,
        *,
        wait: bool,
        idempotency_key: str | None,
        expected_version: int | None = None,
        archive_id: str | None = None,
        kept: bool = False,
    ) -> CommitResult:
        """Archive the whole buffer (``message_ids=None``) or exactly those messages (kept in
        the buffer with ``kept``, under ``archive_id`` if given). Every commit gets a task
        record (``task()``), whether the caller waits for it or not."""
        sid = target.session_id
        asked = _Asked(message_ids, kept, archive_id)
        if idempotency_key is not None:  # recorded already: never summarise again
            with self.sessions.lock(sid):
                rows = self.sessions.recorded_write(sid, idempotency_key)
            if rows:
                return self._commit_recorded(rows, asked)
        task_id = new_id()
        taken = self._take(target, asked, idempotency_key, task_id, expected_version)
        if isinstance(taken, CommitResult):
            return taken
        self._tasks[task_id] = CommitTask(task_id=task_id, key=target.key, status="processing")
        if wait:
            return self._run_task(task_id, principal, taken)
        try:
            self._executor_for_commits().submit(self._run_task, task_id, principal, taken)
        except RuntimeError as error:  # the executor is shut down
            with self._guard:
                self._inflight.discard(sid)
            del self._tasks[task_id]
            raise StoreUnavailable("This ledger is closing; commit not started.") from error
        return CommitResult(status="processing", task_id=task_id)

    def _take(
        self,
        target: Target,
        asked: _Asked,
        idempotency_key: str | None,
        task_id: str,
        expected_version: int | None = None,
        *,
        again: bool = False,
    ) -> _Pending | CommitResult:
        """Phase 1 under the session's lock: the exact messages to archive (the session now
        marked in flight), or why there is nothing to commit. ``again``: this commit already
        holds the in-flight mark, and its messages were committed by another writer."""
        sid = target.session_id
        with self.sessions.lock(sid):
            session = self.sessions.require(target)
            session.require_writable()
            if expected_version is not None:
                check_expected(session, expected_version)
            if asked.message_ids is not None:
                missing = session.missing_ids(asked.message_ids)
                if missing and again:
                    return CommitResult(
                        status="skipped", archived=False, reason="already_committed"
                    )
                if missing:
                    raise InvalidInput(
                        f"Messages {sorted(missing)} are not in the live buffer of "
                        f"{target.key!r}; pass ids of uncommitted messages. Nothing was recorded."
                    )
            with self._guard:
                if sid in self._inflight and not again:
                    return CommitResult(
                        status="skipped", archived=False, reason="commit_in_progress"
                    )
                if not session.buffer:
                    return CommitResult(status="skipped", archived=False, reason="empty_buffer")
                self._inflight.add(sid)
            chosen = set(asked.message_ids) if asked.message_ids is not None else None
            messages = [m for m in session.buffer.values() if chosen is None or m.id in chosen]
            sealer = self.body_sealer
            seal = None if sealer is None or self.archive_store is None else sealer(session)
        return _Pending(
            target, messages, new_id(), idempotency_key, task_id, asked.archive_id, asked.kept,
            seal, asked,
        )  # fmt: skip

    def in_flight(self, sid: UUID) -> bool:
        """Whether a commit of that session is running in this ledger."""
        with self._guard:
            return sid in self._inflight

    def task(self, task_id: str) -> CommitTask | None:
        """A commit started with ``wait=False``; ``None`` for an unknown id."""
        return self._tasks.get(task_id)

    def close(self) -> None:
        """Let running commits finish (each waits at most for its summarizer's timeout)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    def _executor_for_commits(self) -> ThreadPoolExecutor:
        with self._guard:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self.policy.commit_workers, thread_name_prefix="chatledger-commit"
                )
            return self._executor

    def _run_task(self, task_id: str, principal: Principal, pending: _Pending) -> CommitResult:
        result = self._finish(principal, pending).model_copy(update={"task_id": task_id})
        status = "completed" if result.status == "completed" else "failed"
        with self._guard:
            self._tasks[task_id] = CommitTask(
                task_id=task_id, key=pending.target.key, status=status, result=result
            )
            self._finished.append(task_id)
            if len(self._finished) > KEPT_TASKS:
                self._tasks.pop(self._finished.popleft(), None)
        return result

    def _finish(self, principal: Principal, pending: _Pending) -> CommitResult:
        try:
            turns = 0
            while True:
                try:
                    archive = self._summarise(pending)
                    self._record(principal, pending, archive)
                    break
                except _Superseded:
                    # Another writer (another process) committed some of these messages
                    # meanwhile: not a failure of this commit. Take its turn after that
                    # one, from phase 1 with the buffer as it is now (never recording a
                    # summary of a set other than the one summarised).
                    turns += 1
                    if turns >= _MAX_TURNS:
                        raise
                    again = self._take(
                        pending.target, pending.asked, pending.idempotency_key,
                        pending.task_id, again=True,
                    )  # fmt: skip
                    if isinstance(again, CommitResult):
                        return again
                    pending = again
        except AlreadyRecorded as done:  # a racing retry with the same key landed first
            return self._commit_recorded(done.rows, pending.asked)
        except Exception as error:
            text = error_text(error)
            logger.warning("commit of session %r failed: %s", pending.target.key, text)
            self._record_failure(principal, pending, text)
            return CommitResult(
                status="failed",
                archived=False,
                reason="commit_failed",
                error=text,
                message_ids=tuple(m.id for m in pending.messages),
            )
        finally:
            with self._guard:
                self._inflight.discard(pending.target.session_id)
        logger.info(
            "committed %d messages of session %r into archive %s",
            len(archive.message_ids), pending.target.key, archive.archive_id,
        )  # fmt: skip
        return CommitResult(
            status="completed",
            archived=True,
            archive_id=archive.archive_id,
            message_ids=archive.message_ids,
        )

    def _summarise(self, pending: _Pending) -> ArchiveSummary:
        summary = check_summary(
            self._summarizer_call(self.summarizer.summarize, tuple(pending.messages)),
            self.policy.limits,
            source="The summarizer",
        )
        metadata = dict(summary.metadata)
        metadata["source_tokens"] = sum(m.tokens for m in pending.messages)
        if self.policy.entity_retention:
            sources = [m.content for m in pending.messages]
            metadata["entity_retention_ratio"] = entity_retention_ratio(sources, summary.overview)
            metadata["information_retention_ratio"] = information_retention_ratio(
                sources, summary.overview
            )
        archive = ArchiveSummary(
            archive_id=pending.archive_id or new_id(),
            overview=summary.overview,
            abstract=summary.abstract,
            message_ids=tuple(m.id for m in pending.messages),
            tokens=estimate_tokens(summary.overview + summary.abstract),
            created_at=self.now(),
            metadata=metadata,
        )
        if self.archive_store is not None:
            target = pending.target
            body = ArchiveBody(
                archive_id=archive.archive_id,
                session_id=target.session_id.hex,
                tenant=target.tenant,
                key=target.key,
                messages=tuple(pending.messages),
                overview=archive.overview,
                abstract=archive.abstract,
            )
            self.archive_store.put(body if pending.seal is None else pending.seal(body))
        elif self.policy.require_archive_store:
            raise StoreUnavailable("archive store unavailable")
        return archive

    def _record(self, principal: Principal, pending: _Pending, archive: ArchiveSummary) -> None:
        now = self.now()

        def apply(session: Session) -> None:
            # Re-applied after a version conflict: the covered set never changes;
            # if another writer already archived some of it, this commit must fail.
            if session.missing_ids(archive.message_ids):
                raise _Superseded(
                    "Some of these messages were committed by another writer meanwhile."
                )
            session.commit(archive, actor=principal, timestamp=now, kept=pending.kept)
            if self.policy.derive_objective and not session.task.objective:
                objective = derived_objective(pending.messages)
                if objective:
                    task = session.task.model_copy(update={"objective": objective})
                    session.set_task(task, actor=principal, timestamp=now)

        self.sessions.write(
            pending.target.session_id, apply, idempotency_key=pending.idempotency_key
        )

    def _record_failure(self, principal: Principal, pending: _Pending, text: str) -> None:
        def apply(session: Session) -> None:
            session.record_commit_failure(
                attempt_id=pending.attempt_id,
                error=text,
                message_count=len(pending.messages),
                actor=principal,
                timestamp=self.now(),
            )

        # Best effort: the audit note of a failure may be lost (e.g. the store is
        # down), but the failure itself is reported to the caller either way.
        with contextlib.suppress(Exception):
            self.sessions.write(pending.target.session_id, apply)

    def _commit_recorded(self, rows: list[KeyedRow], asked: _Asked) -> CommitResult:
        """What a keyed commit returned the first time, from its recorded ``Committed`` (if
        the retry asks for that commit: the same messages named, kept or not, archive id)."""

        def same(event: object) -> bool:
            return (
                isinstance(event, Committed)
                and event.kept == asked.kept
                and (asked.archive_id is None or event.archive.archive_id == asked.archive_id)
                and (
                    asked.message_ids is None
                    or set(event.archive.message_ids) == set(asked.message_ids)
                )
            )

        event = retries.first_event(self.sessions, rows, same)
        archive_id = event.archive.archive_id
        with self._guard:  # the first call's own result, with its task id, if still known
            for task in self._tasks.values():
                if task.result is not None and task.result.archive_id == archive_id:
                    return task.result
        return CommitResult(
            status="completed",
            archived=True,
            archive_id=archive_id,
            message_ids=event.archive.message_ids,
        )

    # -------------------------------------------------------------- merges
    def merge(
        self,
        principal: Principal,
        target: Target,
        *,
        threshold: int | None,
        max_count: int | None,
        idempotency_key: str | None,
        expected_version: int | None = None,
    ) -> MergeResult:
        """Merge the oldest live archives into one when there are more than ``threshold``
        (``service.merges``; the policy's threshold and count unless given)."""
        policy = self.policy
        return merges.merge(
            self.sessions, partial(self._summarizer_call, self.summarizer.merge),
            policy.limits, self.now, principal, target,
            threshold=policy.merge_threshold if threshold is None else threshold,
            max_count=policy.merge_max_count if max_count is None else max_count,
            idempotency_key=idempotency_key, expected_version=expected_version,
        )  # fmt: skip

    # ---------------------------------------------------------- summarizer
    def _summarizer_call(self, method: Callable[[Any], Summary], argument: Any) -> Summary:
        """``method(argument)`` in a thread of its own, waited for at most
        ``summarizer_timeout`` seconds: a summarizer that hangs fails the commit
        instead of hanging it (and ``close()``) forever. Python cannot stop a
        thread, so a hung call is abandoned (a daemon thread), not killed."""
        outcome: list[tuple[bool, Any]] = []

        def run() -> None:
            try:
                outcome.append((True, method(argument)))
            except BaseException as error:
                outcome.append((False, error))

        worker = threading.Thread(target=run, name="chatledger-summarizer", daemon=True)
        worker.start()
        worker.join(self.policy.summarizer_timeout)
        if not outcome:
            raise TimeoutError(
                f"The summarizer did not answer within {self.policy.summarizer_timeout:g}s "
                "(setting summarizer_timeout)."
            )
        ok, value = outcome[0]
        if not ok:
            raise value
        result: Summary = value
        return result
