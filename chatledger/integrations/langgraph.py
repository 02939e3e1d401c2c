"""``LedgerSaver``: a LangGraph ``BaseCheckpointSaver`` kept in a chatledger ledger.

A LangGraph thread is one ledger session of the principal's tenant, keyed by
the thread id. Every ``put`` is one item of the session's buffer (one
``MessageAdded``), every ``put_writes`` another: ``{"type": "message", "role":
"assistant", "content": <a line saying what it holds>, "langgraph": {...}}``.
The ``langgraph`` part keeps what the protocol needs, serialised by the
saver's ``serde`` (base64 of its bytes): for a checkpoint its namespace, id,
parent id, the checkpoint without its values, its metadata and the values of
the channels in ``new_versions`` (blobs, keyed by channel and version, as
LangGraph's own savers keep them); for writes the checkpoint they belong to,
the task, its path and each write with its index. Reads fold the live
buffer into an index (each item parsed once and remembered by its message
id), so ``get_tuple`` and ``list`` see every writer's checkpoints in the
ledger's order; a channel value is found on the checkpoint's own chain of
parents first, so two writers forking one thread never read each other's
values even if they chose the same channel versions.

Deleting: ``delete_thread`` records ``Deleted`` (on a ledger with encryption
it erases the session: its content is gone for good, the thread id then
takes no more writes). ``prune`` and ``delete_for_runs`` take checkpoints and
their writes out of the buffer in one event that keeps them in the ledger's
history: the items after the first one dropped are replaced by those that
stay, each kept checkpoint rewritten to hold every value it reads (so none
depends on a dropped one). ``copy_thread`` is a ``fork`` of the source at its
newest version. Everything stays time-travelable (``session(...,
at_version=)``), verifiable and visible in the viewer.

Requires ``pip install 'chatledger[langgraph]'``.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import json
import random
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from chatledger import (
    AsyncSessionLedger,
    ConcurrencyConflict,
    InvalidInput,
    Message,
    Principal,
    SessionErased,
    SessionLedger,
    UnknownSession,
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

_ATTEMPTS = 5  # a prune or delete_for_runs re-read after this many lost races gives up
_PAGE = 1000
_PARSED_CACHE = 200_000  # items remembered parsed, across threads (oldest forgotten first)
_TEXT_CHARS = 500  # how much of one channel value an item's text shows
Typed = tuple[str, bytes]


@dataclass(frozen=True, slots=True)
class _Checkpoint:
    ns: str
    id: str
    parent: str | None
    checkpoint: Typed
    metadata: Typed
    run_id: str | None
    blobs: dict[tuple[str, str], Typed]  # (channel, str(version)) -> value


@dataclass(frozen=True, slots=True)
class _Writes:
    ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    writes: tuple[tuple[int, str, Typed], ...]  # (index, channel, value)


@dataclass
class _Thread:
    """A thread's live buffer, folded: what ``get_tuple`` and ``list`` read."""

    version: int
    messages: list[Message]
    # ns -> checkpoint id -> (position in the buffer, the checkpoint)
    checkpoints: dict[str, dict[str, tuple[int, _Checkpoint]]] = field(default_factory=dict)
    # (ns, checkpoint id) -> (task id, index) -> (task id, channel, value, task path)
    writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, str, Typed, str]]] = field(
        default_factory=dict
    )
    # (ns, channel, version) -> [(position, checkpoint id)] of the checkpoints that hold it
    blobs: dict[tuple[str, str, str], list[tuple[int, str]]] = field(default_factory=dict)


class _ParsedItems:
    """Items parsed once, by message id (ids are unique in a session; a fork copies them
    with their content, so a hit is the same item); bounded, oldest forgotten first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: OrderedDict[tuple[str, str], _Checkpoint | _Writes | None] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: str, message: Message) -> _Checkpoint | _Writes | None:
        ident = (key, message.id)
        with self.lock:
            if ident in self.entries:
                return self.entries[ident]
        parsed = _parse(message.as_item())
        with self.lock:
            self.entries[ident] = parsed
            while len(self.entries) > self.size:
                self.entries.popitem(last=False)
        return parsed


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
        if isinstance(ledger_or_url, str):
            self.ledger, self._owned = SessionLedger(ledger_or_url), True
        elif isinstance(ledger_or_url, AsyncSessionLedger):
            self.ledger, self._owned = ledger_or_url.ledger, False
        elif isinstance(ledger_or_url, SessionLedger):
            self.ledger, self._owned = ledger_or_url, False
        else:
            raise InvalidInput(
                "ledger_or_url must be a SessionLedger, an AsyncSessionLedger or a database URL."
            )
        if not isinstance(principal, Principal):
            raise InvalidInput("principal must be a chatledger Principal.")
        self.principal = principal
        self.account_id = account_id
        self._parsed = _ParsedItems(_PARSED_CACHE)

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
        thread_ids = [_thread(config)] if config else self._thread_ids()
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
        blobs = {
            channel: [str(version), *_encoded(self._dump(values[channel]))]
            if channel in values
            else [str(version), "empty", ""]
            for channel, version in new_versions.items()
        }
        run_id = full_metadata.get("run_id")
        item = {
            "type": "message",
            "role": "assistant",
            "content": _checkpoint_text(checkpoint["id"], ns, full_metadata, values, new_versions),
            "langgraph": {
                "kind": "checkpoint",
                "ns": ns,
                "id": checkpoint["id"],
                "parent": get_checkpoint_id(config),
                "checkpoint": _encoded(self._dump(bare)),
                "metadata": _encoded(self._dump(full_metadata)),
                "run_id": run_id if isinstance(run_id, str) else None,
                "blobs": blobs,
            },
        }
        self._append(thread_id, [item])
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
        stored = [
            [WRITES_IDX_MAP.get(channel, index), channel, *_encoded(self._dump(value))]
            for index, (channel, value) in enumerate(writes)
        ]
        if not stored:
            return
        item = {
            "type": "message",
            "role": "assistant",
            "content": _writes_text(task_id, writes),
            "langgraph": {
                "kind": "writes",
                "ns": ns,
                "checkpoint_id": checkpoint_id,
                "task_id": task_id,
                "task_path": task_path,
                "writes": stored,
            },
        }
        self._append(thread_id, [item])

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's session (erase it, on a ledger with encryption)."""
        key = _key(thread_id)
        try:
            if self.ledger.settings.encryption:
                self.ledger.erase(self.principal, key, account_id=self.account_id)
            else:
                self.ledger.delete_session(self.principal, key, account_id=self.account_id)
        except (UnknownSession, SessionErased):
            pass

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Take every checkpoint a run of ``run_ids`` made (metadata ``run_id``), and its
        writes, out of every thread (they stay in the ledger's history)."""
        runs = set(run_ids)
        if not runs:
            return
        for thread_id in self._thread_ids():
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

    # --------------------------------------------------------------- lifetime
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

    def _read(self, thread_id: str) -> _Thread | None:
        """The thread's live buffer, folded (None if it has no live session)."""
        key = _key(thread_id)
        try:
            view = self.ledger.session(self.principal, key, account_id=self.account_id)
        except (UnknownSession, SessionErased):
            return None
        if view.status in ("deleted", "erased"):
            return None
        thread = _Thread(version=view.version, messages=list(view.buffer))
        for position, message in enumerate(thread.messages):
            parsed = self._parsed.get(key, message)
            if isinstance(parsed, _Checkpoint):
                thread.checkpoints.setdefault(parsed.ns, {})[parsed.id] = (position, parsed)
                for channel, version in parsed.blobs:
                    thread.blobs.setdefault((parsed.ns, channel, version), []).append(
                        (position, parsed.id)
                    )
            elif isinstance(parsed, _Writes):
                stored = thread.writes.setdefault((parsed.ns, parsed.checkpoint_id), {})
                for index, channel, value in parsed.writes:
                    slot = (parsed.task_id, index)
                    if index >= 0 and slot in stored:
                        continue  # a write is recorded once; a retry keeps the first
                    stored[slot] = (parsed.task_id, channel, value, parsed.task_path)
        return thread

    def _values(self, thread: _Thread, entry: _Checkpoint) -> dict[str, Typed]:
        """The stored value of each channel ``entry`` reads, found on its own chain of
        parents first (then the newest holder recorded before it)."""
        checkpoint = self.serde.loads_typed(entry.checkpoint)
        versions: Mapping[str, Any] = checkpoint.get("channel_versions", {})
        found: dict[str, Typed] = {}
        chain: dict[str, int] | None = None
        here = thread.checkpoints[entry.ns][entry.id][0]
        for channel, version in versions.items():
            holders = thread.blobs.get((entry.ns, channel, str(version)), [])
            if not holders:
                continue
            if len(holders) == 1:
                holder = holders[0][1]
            else:
                chain = chain if chain is not None else self._chain(thread, entry)
                on_chain = [h for h in holders if h[1] in chain]
                earlier = [h for h in holders if h[0] <= here]
                holder = (
                    min(on_chain, key=lambda h: chain[h[1]])[1]
                    if on_chain
                    else max(earlier or holders)[1]
                )
            value = thread.checkpoints[entry.ns][holder][1].blobs[(channel, str(version))]
            if value[0] != "empty":
                found[channel] = value
        return found

    @staticmethod
    def _chain(thread: _Thread, entry: _Checkpoint) -> dict[str, int]:
        """Checkpoint id -> distance, for ``entry`` and its recorded ancestors."""
        chain: dict[str, int] = {}
        current: _Checkpoint | None = entry
        checkpoints = thread.checkpoints[entry.ns]
        while current is not None and current.id not in chain:
            chain[current.id] = len(chain)
            parent = checkpoints.get(current.parent) if current.parent else None
            current = parent[1] if parent else None
        return chain

    def _tuple(self, thread_id: str, thread: _Thread, entry: _Checkpoint) -> CheckpointTuple:
        checkpoint = self.serde.loads_typed(entry.checkpoint)
        checkpoint["channel_values"] = {
            channel: self.serde.loads_typed(value)
            for channel, value in self._values(thread, entry).items()
        }
        stored = thread.writes.get((entry.ns, entry.id), {})
        ordered = sorted(stored.items(), key=lambda kv: writes_sort_key(kv[1][3], *kv[0]))
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": entry.ns,
                    "checkpoint_id": entry.id,
                }
            },
            checkpoint=checkpoint,
            metadata=self.serde.loads_typed(entry.metadata),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": entry.ns,
                        "checkpoint_id": entry.parent,
                    }
                }
                if entry.parent
                else None
            ),
            pending_writes=[
                (task, channel, self.serde.loads_typed(value))
                for _, (task, channel, value, _path) in ordered
            ],
        )

    def _drop(self, thread_id: str, dropped: Any) -> None:
        """Take the checkpoints ``dropped(checkpoint, newest id per namespace)`` picks, and
        their writes, out of the buffer in one event at the version read (re-read if
        another writer came first)."""
        key = _key(thread_id)
        for _ in range(_ATTEMPTS):
            thread = self._read(thread_id)
            if thread is None:
                return
            latest = {ns: max(found) for ns, found in thread.checkpoints.items() if found}
            gone = {
                (c.ns, c.id)
                for found in thread.checkpoints.values()
                for _, c in found.values()
                if dropped(c, latest)
            }
            if not gone:
                return
            stale: list[Message] = []
            kept: list[dict[str, Any]] = []
            for message in thread.messages:
                parsed = self._parsed.get(key, message)
                is_gone = (isinstance(parsed, _Checkpoint) and (parsed.ns, parsed.id) in gone) or (
                    isinstance(parsed, _Writes) and (parsed.ns, parsed.checkpoint_id) in gone
                )
                if not stale and not is_gone:
                    continue  # before the first dropped item: untouched
                stale.append(message)
                if not is_gone:
                    kept.append(
                        self._whole(thread, parsed, message)
                        if isinstance(parsed, _Checkpoint)
                        else message.as_item()
                    )
            try:
                if kept:
                    self.ledger.replace_tail(
                        self.principal, key, [m.id for m in stale], kept,
                        expected_version=thread.version, account_id=self.account_id,
                    )  # fmt: skip
                else:
                    self.ledger.remove_items(
                        self.principal, key, [m.id for m in stale],
                        expected_version=thread.version, account_id=self.account_id,
                    )  # fmt: skip
                return
            except ConcurrencyConflict:
                continue
        raise ConcurrencyConflict(
            f"LangGraph thread {thread_id!r}: pruning lost {_ATTEMPTS} races with other "
            "writers in a row; nothing was recorded. Retry when the thread is quieter."
        )

    def _whole(self, thread: _Thread, entry: _Checkpoint, message: Message) -> dict[str, Any]:
        """The item of ``entry`` holding every value it reads (none left in other items)."""
        checkpoint = self.serde.loads_typed(entry.checkpoint)
        values = self._values(thread, entry)
        item = message.as_item()
        stored = dict(item["langgraph"])
        stored["blobs"] = {
            channel: [str(version), *_encoded(values[channel])]
            for channel, version in checkpoint.get("channel_versions", {}).items()
            if channel in values
        }
        return {**item, "langgraph": stored}

    def _thread_ids(self) -> builtins.list[str]:
        """Every session key of the tenant (the read models caught up first)."""
        models = self.ledger.read_models
        models.catch_up()
        keys: builtins.list[str] = []
        offset = 0
        while True:
            rows = models.working_set(
                self.principal, account_id=self.account_id, include_evicted=True,
                limit=_PAGE, offset=offset,
            )  # fmt: skip
            keys += [r.session_key for r in rows]
            if len(rows) < _PAGE:
                return keys
            offset += _PAGE


# --------------------------------------------------------------------- the item form
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


def _encoded(typed: Typed) -> list[str]:
    kind, data = typed
    return [kind, base64.b64encode(data).decode("ascii")]


def _decoded(kind: Any, data: Any) -> Typed:
    return str(kind), base64.b64decode(str(data)) if data else b""


def _parse(item: Mapping[str, Any]) -> _Checkpoint | _Writes | None:
    """The checkpoint or writes an item holds (None for any other item, e.g. an erased one)."""
    stored = item.get("langgraph")
    if not isinstance(stored, Mapping):
        return None
    try:
        if stored.get("kind") == "checkpoint":
            return _Checkpoint(
                ns=str(stored["ns"]),
                id=str(stored["id"]),
                parent=stored.get("parent") or None,
                checkpoint=_decoded(*stored["checkpoint"]),
                metadata=_decoded(*stored["metadata"]),
                run_id=stored.get("run_id"),
                blobs={
                    (channel, str(version)): _decoded(kind, data)
                    for channel, (version, kind, data) in stored["blobs"].items()
                },
            )
        if stored.get("kind") == "writes":
            return _Writes(
                ns=str(stored["ns"]),
                checkpoint_id=str(stored["checkpoint_id"]),
                task_id=str(stored["task_id"]),
                task_path=str(stored.get("task_path", "")),
                writes=tuple(
                    (int(index), str(channel), _decoded(kind, data))
                    for index, channel, kind, data in stored["writes"]
                ),
            )
    except (KeyError, TypeError, ValueError):
        return None
    return None


def _checkpoint_text(
    checkpoint_id: str,
    ns: str,
    metadata: Mapping[str, Any],
    values: Mapping[str, Any],
    new_versions: ChannelVersions,
) -> str:
    where = f" in {ns}" if ns else ""
    head = (
        f"checkpoint {checkpoint_id}{where} "
        f"({metadata.get('source', '?')}, step {metadata.get('step', '?')})"
    )
    lines = [
        f"{channel}: {_value_text(values[channel])}"
        for channel in new_versions
        if channel in values
    ]
    return "\n".join([head, *lines])


def _writes_text(task_id: str, writes: Sequence[tuple[str, Any]]) -> str:
    lines = [f"{channel}: {_value_text(value)}" for channel, value in writes]
    return "\n".join([f"writes of task {task_id}", *lines])


def _value_text(value: Any) -> str:
    """A short human reading of a channel value: text as it is, a message as ``type:
    content``, a list by its last entry, anything else as JSON."""
    if isinstance(value, str):
        text = value
    elif isinstance(getattr(value, "content", None), str):
        text = f"{getattr(value, 'type', type(value).__name__)}: {value.content}"
    elif isinstance(value, list | tuple) and value:
        text = f"[{len(value)}] {_value_text(value[-1])}"
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=repr)
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= _TEXT_CHARS else text[: _TEXT_CHARS - 1] + "…"
