"""``LedgerSaver``: a LangGraph ``BaseCheckpointSaver`` kept in a chatledger ledger.

A LangGraph thread is one ledger session of the principal's tenant, keyed by
the thread id. Every ``put`` is one item of the session's buffer (one
``MessageAdded``), every ``put_writes`` another; ``langgraph_threads`` holds
that item form (what the saver's ``serde`` made of the checkpoint, its
metadata and the values written, keyed by channel and version, as LangGraph's
own savers keep them) and the index reads fold the buffer into -- extended
by the events recorded since it was last read, so every writer's
checkpoints are seen in the ledger's order. A channel value is found on the
checkpoint's own chain of parents first: two writers forking one thread never
read each other's values, even at the same channel versions.

``delete_thread`` records ``Deleted`` (on a ledger with encryption it erases
the session: the content is gone for good, the thread id then takes no more
writes). ``prune`` and ``delete_for_runs`` take checkpoints and their writes
out of the buffer in one event that keeps them in the ledger's history, each
kept checkpoint rewritten to hold every value it reads. ``copy_thread`` is a
``fork`` of the source at its newest version. Everything stays
time-travelable, verifiable and visible in the viewer.

Requires ``pip install 'chatledger[langgraph]'``.
"""

from __future__ import annotations

import asyncio
import builtins
import random
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, cast

from chatledger import (
    AsyncSessionLedger,
    ConcurrencyConflict,
    InvalidInput,
    MessageAdded,
    Principal,
    SessionErased,
    SessionLedger,
    UnknownSession,
)
from chatledger.integrations.framework_sessions import drop_session, open_ledger, session_keys
from chatledger.integrations.langgraph_threads import (
    ParsedItems,
    StoredCheckpoint,
    StoredWrites,
    ThreadIndex,
    ThreadIndexes,
    Typed,
    checkpoint_item,
    checkpoint_text,
    writes_item,
    writes_text,
)

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as missing:  # pragma: no cover - exercised only without LangGraph
    raise ImportError(
        "chatledger.integrations.langgraph needs langgraph-checkpoint: "
        "pip install 'chatledger[langgraph]'"
    ) from missing

__all__ = ["LedgerSaver"]

EMPTY: Typed = ("empty", b"")  # a channel in new_versions with no value: it was cleared
_ATTEMPTS = 5  # a prune or delete_for_runs re-read after this many lost races gives up
_PARSED_CACHE = 200_000  # items remembered parsed, across threads (oldest forgotten first)
_THREADS_CACHE = 256  # threads whose index is remembered (the least recently read forgotten)


class LedgerSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints in a chatledger ledger (see the module docstring).

    ``ledger_or_url`` is a ``SessionLedger``, an ``AsyncSessionLedger`` or a
    database URL (the saver then opens the ledger and ``close()`` closes it);
    every call acts as ``principal``, in its account (or ``account_id``, for an
    admin). ``serde`` is LangGraph's serializer for checkpoints, metadata and
    values (its default: ``JsonPlusSerializer``).
    """

    def __init__(
        self,
        ledger_or_url: SessionLedger | AsyncSessionLedger | str,
        *,
        principal: Principal,
        account_id: str | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.ledger, self._owned = open_ledger(ledger_or_url, principal)
        self.principal = principal
        self.account_id = account_id
        self._parsed = ParsedItems(_PARSED_CACHE)
        self._threads = ThreadIndexes(_THREADS_CACHE)

    # ------------------------------------------------------------------ reads
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``, or the newest of its
        namespace), with its values, metadata, parent and pending writes."""
        thread_id, ns = _thread(config), _namespace(config)
        thread = self._read(thread_id)
        if thread is None:
            return None
        found = thread.checkpoints.get(ns, {})
        checkpoint_id = get_checkpoint_id(config) or (max(found) if found else None)
        if checkpoint_id is None or checkpoint_id not in found:
            return None
        return self._tuple(thread_id, thread, found[checkpoint_id][1])

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first per namespace: of ``config``'s thread (and namespace and
        checkpoint id, if it names them) or of every thread, whose metadata has ``filter``'s
        values, older than ``before``'s checkpoint, at most ``limit`` of them."""
        thread_ids = (
            [_thread(config)]
            if config
            else session_keys(self.ledger, self.principal, self.account_id)
        )
        configurable = config.get("configurable", {}) if config else {}
        wanted_ns = configurable.get("checkpoint_ns")
        wanted_id = configurable.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        remaining = limit
        for thread_id in thread_ids:
            thread = self._read(thread_id)
            if thread is None:
                continue
            for ns, checkpoints in thread.checkpoints.items():
                if wanted_ns is not None and ns != wanted_ns:
                    continue
                for checkpoint_id in sorted(checkpoints, reverse=True):
                    if wanted_id and checkpoint_id != wanted_id:
                        continue
                    if before_id and checkpoint_id >= before_id:
                        continue
                    entry = checkpoints[checkpoint_id][1]
                    if filter:
                        metadata = self.serde.loads_typed(entry.metadata)
                        if not all(metadata.get(k) == v for k, v in filter.items()):
                            continue
                    if remaining is not None:
                        if remaining <= 0:
                            return
                        remaining -= 1
                    yield self._tuple(thread_id, thread, entry)

    # ----------------------------------------------------------------- writes
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Record the checkpoint (the values of the channels in ``new_versions``) as a child of
        ``config``'s checkpoint; returns the config that names it."""
        thread_id, ns = _thread(config), _namespace(config)
        bare: dict[str, Any] = dict(checkpoint)
        values = cast(dict[str, Any], bare.pop("channel_values", None) or {})
        full_metadata = get_checkpoint_metadata(config, metadata)
        run_id = full_metadata.get("run_id")
        entry = StoredCheckpoint(
            ns=ns, id=checkpoint["id"], parent=get_checkpoint_id(config),
            checkpoint=self._dump(bare), metadata=self._dump(full_metadata),
            run_id=run_id if isinstance(run_id, str) else None, blobs={},
        )  # fmt: skip
        blobs = {
            channel: (str(version), self._dump(values[channel]) if channel in values else EMPTY)
            for channel, version in new_versions.items()
        }
        written = {channel: values[channel] for channel in new_versions if channel in values}
        text = checkpoint_text(entry, full_metadata, written)
        self._append(thread_id, [checkpoint_item(entry, text, blobs)])
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Record a task's writes against ``config``'s checkpoint (a write already recorded
        for the same task and index is kept; special channels take the newest)."""
        thread_id, ns = _thread(config), _namespace(config)
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id is None:
            raise InvalidInput("put_writes needs a config naming a checkpoint_id.")
        entry = StoredWrites(
            ns=ns, checkpoint_id=checkpoint_id, task_id=task_id, task_path=task_path,
            writes=tuple(
                (WRITES_IDX_MAP.get(channel, index), channel, self._dump(value))
                for index, (channel, value) in enumerate(writes)
            ),
        )  # fmt: skip
        if entry.writes:
            self._append(thread_id, [writes_item(entry, writes_text(task_id, writes))])

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's session (erase it, on a ledger with encryption)."""
        drop_session(self.ledger, self.principal, _key(thread_id), self.account_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Take every checkpoint a run of ``run_ids`` made (metadata ``run_id``), and its
        writes, out of every thread (they stay in the ledger's history)."""
        runs = set(run_ids)
        if not runs:
            return
        for thread_id in session_keys(self.ledger, self.principal, self.account_id):
            self._drop(thread_id, lambda c, _latest: c.run_id in runs)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Fork the source thread, at its newest version, as the target thread."""
        source = _key(source_thread_id)
        try:
            view = self.ledger.session(self.principal, source, account_id=self.account_id)
        except (UnknownSession, SessionErased):
            return
        self.ledger.fork(
            self.principal, source, view.version, _key(target_thread_id),
            account_id=self.account_id,
        )  # fmt: skip

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep only each namespace's newest checkpoint (with its writes);
        ``delete``: take every checkpoint out. Pruned items stay in the ledger's history."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInput(
                f"Unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'."
            )
        for thread_id in thread_ids:
            if strategy == "delete":
                self._drop(thread_id, lambda _c, _latest: True)
            else:
                self._drop(thread_id, lambda c, latest: c.id != latest[c.ns])

    def get_next_version(self, current: str | None, channel: None) -> str:
        """A version greater than ``current``: a zero-padded counter and a random fraction
        (two writers forking one thread rarely pick the same one)."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".", 1)[0])
        return f"{number + 1:032}.{random.random():016}"

    # ------------------------------------------------------------------ async
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for checkpoint in found:
            yield checkpoint

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    def close(self) -> None:
        """Close the ledger if this saver opened it (from a URL)."""
        if self._owned:
            self.ledger.close()

    def __enter__(self) -> LedgerSaver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---------------------------------------------------------------- helpers
    def _dump(self, value: Any) -> Typed:
        return self.serde.dumps_typed(value)

    def _append(self, thread_id: str, items: builtins.list[dict[str, Any]]) -> None:
        self.ledger.add_items(self.principal, _key(thread_id), items, account_id=self.account_id)

    def _read(self, thread_id: str) -> ThreadIndex | None:
        """The thread's live buffer, folded (None if it has no live session): the index
        read before, extended by the items added since; folded afresh when anything else
        happened since (a removal, a deletion, another writer's prune)."""
        key = _key(thread_id)
        known = self._threads.get(key)
        if known is not None:
            try:  # from the newest event known on (a read of nothing new costs more)
                since = self.ledger.history(
                    self.principal, key, after_version=known.version - 1,
                    account_id=self.account_id,
                )[1:]  # fmt: skip
            except (UnknownSession, SessionErased):
                since = None
            if since == []:
                return known
            if since and all(isinstance(e.event, MessageAdded) for e in since):
                added = [e.event.message for e in since]  # type: ignore[attr-defined]
                found = known.extended(since[-1].version, added, lambda m: self._parsed.get(key, m))
                return self._threads.put(key, found)
        try:
            view = self.ledger.session(self.principal, key, account_id=self.account_id)
        except (UnknownSession, SessionErased):
            self._threads.forget(key)
            return None
        if view.status in ("deleted", "erased"):
            self._threads.forget(key)
            return None
        found = ThreadIndex.fold(view.version, view.buffer, lambda m: self._parsed.get(key, m))
        return self._threads.put(key, found)

    def _tuple(
        self, thread_id: str, thread: ThreadIndex, entry: StoredCheckpoint
    ) -> CheckpointTuple:
        checkpoint = self.serde.loads_typed(entry.checkpoint)
        checkpoint["channel_values"] = {
            channel: self.serde.loads_typed(value)
            for channel, value in thread.values(
                entry, checkpoint.get("channel_versions", {})
            ).items()
        }
        place = {"thread_id": thread_id, "checkpoint_ns": entry.ns}
        return CheckpointTuple(
            config={"configurable": {**place, "checkpoint_id": entry.id}},
            checkpoint=checkpoint,
            metadata=self.serde.loads_typed(entry.metadata),
            parent_config=(
                {"configurable": {**place, "checkpoint_id": entry.parent}} if entry.parent else None
            ),
            pending_writes=[
                (task, channel, self.serde.loads_typed(value))
                for task, channel, value in thread.pending(entry, writes_sort_key)
            ],
        )

    def _drop(
        self, thread_id: str, dropped: Callable[[StoredCheckpoint, dict[str, str]], bool]
    ) -> None:
        """Take the checkpoints ``dropped(checkpoint, newest id per namespace)`` picks, and
        their writes, out of the buffer in one event at the version read (re-read if
        another writer came first)."""
        key = _key(thread_id)
        for _ in range(_ATTEMPTS):
            thread = self._read(thread_id)
            if thread is None:
                return
            stale, kept = thread.without(dropped, self._versions)
            if not stale:
                return
            write = self.ledger.replace_tail if kept else self.ledger.remove_items
            extra = (kept,) if kept else ()
            try:
                write(
                    self.principal, key, stale, *extra,
                    expected_version=thread.version, account_id=self.account_id,
                )  # fmt: skip
                return
            except ConcurrencyConflict:
                continue
        raise ConcurrencyConflict(
            f"LangGraph thread {thread_id!r}: pruning lost {_ATTEMPTS} races with other "
            "writers in a row; nothing was recorded. Retry when the thread is quieter."
        )

    def _versions(self, entry: StoredCheckpoint) -> Mapping[str, Any]:
        versions: Mapping[str, Any] = self.serde.loads_typed(entry.checkpoint).get(
            "channel_versions", {}
        )
        return versions


# ------------------------------------------------------------------------ configs
def _key(thread_id: Any) -> str:
    if not isinstance(thread_id, str) or not thread_id:
        raise InvalidInput("A LangGraph thread_id must be a non-empty str.")
    return thread_id


def _thread(config: RunnableConfig) -> str:
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    if not isinstance(configurable, Mapping) or "thread_id" not in configurable:
        raise InvalidInput('The config must hold {"configurable": {"thread_id": ...}}.')
    return _key(configurable["thread_id"])


def _namespace(config: RunnableConfig) -> str:
    ns = config["configurable"].get("checkpoint_ns", "") or ""
    if not isinstance(ns, str):
        raise InvalidInput("checkpoint_ns must be a str.")
    return ns
