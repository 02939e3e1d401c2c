"""The stored form of LangGraph checkpoints and writes, and a thread folded from it.

``LedgerSaver`` (``langgraph.py``) keeps each ``put`` and each ``put_writes``
as one ledger item (see its module docstring); this module holds that item
form -- building it, parsing it back (``parse_item``), a bounded memory of
items already parsed (``ParsedItems``) -- and ``ThreadIndex``, a thread's live
buffer folded into what ``get_tuple`` and ``list`` read: checkpoints by
namespace and id, writes by checkpoint, and which checkpoints hold each
channel value. Values stay serialised (``serde``'s ``(type, bytes)``): this
module never loads one, so it needs no serializer and no LangGraph import.
"""

from __future__ import annotations

import base64
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chatledger import Message

TEXT_CHARS = 500  # how much of one channel value an item's text shows
Typed = tuple[str, bytes]
"""A value as LangGraph's serializer gives it (``dumps_typed``): its type and its bytes."""


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    """A ``put``: the checkpoint without its values, its metadata, and the values of the
    channels it wrote (``(channel, version) -> value``)."""

    ns: str
    id: str
    parent: str | None
    checkpoint: Typed
    metadata: Typed
    run_id: str | None
    blobs: dict[tuple[str, str], Typed]


@dataclass(frozen=True, slots=True)
class StoredWrites:
    """A ``put_writes``: one task's writes (index, channel, value) to one checkpoint."""

    ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    writes: tuple[tuple[int, str, Typed], ...]


Stored = StoredCheckpoint | StoredWrites | None


@dataclass
class ThreadIndex:
    """A thread's live buffer, folded (``fold``)."""

    version: int
    messages: list[Message]
    parsed: list[Stored] = field(default_factory=list)  # what each message holds
    # ns -> checkpoint id -> (position in the buffer, the checkpoint)
    checkpoints: dict[str, dict[str, tuple[int, StoredCheckpoint]]] = field(default_factory=dict)
    # (ns, checkpoint id) -> (task id, index) -> (task id, channel, value, task path)
    writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, str, Typed, str]]] = field(
        default_factory=dict
    )
    # (ns, channel, version) -> [(position, checkpoint id)] of the checkpoints holding it
    holders: dict[tuple[str, str, str], list[tuple[int, str]]] = field(default_factory=dict)

    @classmethod
    def fold(
        cls, version: int, messages: Iterable[Message], parse: Callable[[Message], Stored]
    ) -> ThreadIndex:
        """The index of a buffer; a write recorded twice (same task and index) keeps the
        first, except the special channels (negative indexes), which keep the newest."""
        return cls(version=0, messages=[]).extended(version, messages, parse)

    def extended(
        self, version: int, messages: Iterable[Message], parse: Callable[[Message], Stored]
    ) -> ThreadIndex:
        """A new index: this one with ``messages`` appended (this one is left as it is, so
        a reader holding it is not disturbed)."""
        added = list(messages)
        thread = ThreadIndex(
            version=version,
            messages=[*self.messages, *added],
            parsed=[*self.parsed, *(parse(m) for m in added)],
            checkpoints=dict(self.checkpoints),
            writes=dict(self.writes),
            holders=dict(self.holders),
        )
        copied: set[object] = set()  # the inner dicts and lists already copied

        def own(table: dict[Any, Any], key: Any, empty: Any) -> Any:
            if (id(table), key) not in copied:
                copied.add((id(table), key))
                table[key] = type(empty)(table.get(key, empty))
            return table[key]

        for position in range(len(self.messages), len(thread.messages)):
            parsed = thread.parsed[position]
            if isinstance(parsed, StoredCheckpoint):
                own(thread.checkpoints, parsed.ns, {})[parsed.id] = (position, parsed)
                for channel, value_version in parsed.blobs:
                    key = (parsed.ns, channel, value_version)
                    own(thread.holders, key, []).append((position, parsed.id))
            elif isinstance(parsed, StoredWrites):
                stored = own(thread.writes, (parsed.ns, parsed.checkpoint_id), {})
                for index, channel, value in parsed.writes:
                    slot = (parsed.task_id, index)
                    if index < 0 or slot not in stored:
                        stored[slot] = (parsed.task_id, channel, value, parsed.task_path)
        return thread

    def values(self, entry: StoredCheckpoint, versions: Mapping[str, Any]) -> dict[str, Typed]:
        """The stored value of each channel at ``versions`` (the checkpoint's
        ``channel_versions``): from its own chain of parents first, else from the newest
        holder recorded before it. Two forks that chose the same version each read theirs."""
        found: dict[str, Typed] = {}
        chain: dict[str, int] | None = None
        here = self.checkpoints[entry.ns][entry.id][0]
        for channel, version in versions.items():
            holders = self.holders.get((entry.ns, channel, str(version)), [])
            if not holders:
                continue
            if len(holders) == 1:
                holder = holders[0][1]
            else:
                chain = chain if chain is not None else self.chain(entry)
                on_chain = [h for h in holders if h[1] in chain]
                if on_chain:
                    holder = min(on_chain, key=lambda h: chain[h[1]])[1]
                else:
                    holder = max([h for h in holders if h[0] <= here] or holders)[1]
            value = self.checkpoints[entry.ns][holder][1].blobs[(channel, str(version))]
            if value[0] != "empty":
                found[channel] = value
        return found

    def chain(self, entry: StoredCheckpoint) -> dict[str, int]:
        """Checkpoint id -> distance, for ``entry`` and its recorded ancestors."""
        chain: dict[str, int] = {}
        current: StoredCheckpoint | None = entry
        checkpoints = self.checkpoints[entry.ns]
        while current is not None and current.id not in chain:
            chain[current.id] = len(chain)
            parent = checkpoints.get(current.parent) if current.parent else None
            current = parent[1] if parent else None
        return chain

    def pending(
        self, entry: StoredCheckpoint, sort_key: Callable[[str, str, int], Any]
    ) -> list[tuple[str, str, Typed]]:
        """The checkpoint's writes as (task id, channel, value), in ``sort_key`` order
        (LangGraph's ``writes_sort_key(task_path, task_id, index)``)."""
        stored = self.writes.get((entry.ns, entry.id), {})
        ordered = sorted(stored.items(), key=lambda kv: sort_key(kv[1][3], *kv[0]))
        return [(task, channel, value) for _, (task, channel, value, _path) in ordered]

    def without(
        self,
        dropped: Callable[[StoredCheckpoint, dict[str, str]], bool],
        versions_of: Callable[[StoredCheckpoint], Mapping[str, Any]],
    ) -> tuple[list[str], list[dict[str, Any]]]:
        """The buffer without the checkpoints ``dropped(checkpoint, newest id per namespace)``
        picks and their writes, as a tail replacement: (the ids from the first dropped item
        on, the items that stay among them). Each staying checkpoint is rewritten to hold
        every value it reads (``versions_of``: its ``channel_versions``), so that none
        depends on a dropped one. ``([], [])`` if nothing is dropped."""
        latest = {ns: max(found) for ns, found in self.checkpoints.items() if found}
        gone = {
            (c.ns, c.id)
            for found in self.checkpoints.values()
            for _, c in found.values()
            if dropped(c, latest)
        }
        stale: list[str] = []
        kept: list[dict[str, Any]] = []
        for message, parsed in zip(self.messages, self.parsed, strict=True):
            if isinstance(parsed, StoredCheckpoint):
                is_gone = (parsed.ns, parsed.id) in gone
            else:
                is_gone = (
                    isinstance(parsed, StoredWrites) and (parsed.ns, parsed.checkpoint_id) in gone
                )
            if not is_gone and not stale:
                continue  # before the first dropped item: untouched
            stale.append(message.id)
            if is_gone:
                continue
            if isinstance(parsed, StoredCheckpoint):
                versions = versions_of(parsed)
                values = self.values(parsed, versions)
                blobs = {ch: (str(versions[ch]), value) for ch, value in values.items()}
                kept.append(
                    checkpoint_item(parsed, str(message.as_item().get("content", "")), blobs)
                )
            else:
                kept.append(message.as_item())
        return stale, kept


class ThreadIndexes:
    """The index last read of each thread, by session key; bounded (least recently used
    forgotten first), safe to share between threads (an index is never changed once
    stored: a newer one replaces it)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.indexes: OrderedDict[str, ThreadIndex] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: str) -> ThreadIndex | None:
        with self.lock:
            found = self.indexes.get(key)
            if found is not None:
                self.indexes.move_to_end(key)
            return found

    def put(self, key: str, index: ThreadIndex) -> ThreadIndex:
        with self.lock:
            known = self.indexes.get(key)
            if known is None or known.version <= index.version:
                self.indexes[key] = index
                self.indexes.move_to_end(key)
            while len(self.indexes) > self.size:
                self.indexes.popitem(last=False)
        return index

    def forget(self, key: str) -> None:
        with self.lock:
            self.indexes.pop(key, None)


class ParsedItems:
    """Items parsed once, by (session key, message id): ids are unique in a session and a
    fork copies them with their content, so a hit is the same item. Bounded, the oldest
    forgotten first; safe to share between threads."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: OrderedDict[tuple[str, str], Stored] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: str, message: Message) -> Stored:
        ident = (key, message.id)
        with self.lock:
            if ident in self.entries:
                return self.entries[ident]
        parsed = parse_item(message.as_item())
        with self.lock:
            self.entries[ident] = parsed
            while len(self.entries) > self.size:
                self.entries.popitem(last=False)
        return parsed


# ------------------------------------------------------------------- the item form
def checkpoint_item(
    entry: StoredCheckpoint, text: str, blobs: Mapping[str, tuple[str, Typed]]
) -> dict[str, Any]:
    """The ledger item of a ``put`` (``blobs``: channel -> (version, value)); its text is
    what token estimates, summaries and the viewer read."""
    return {
        "type": "message",
        "role": "assistant",
        "content": text,
        "langgraph": {
            "kind": "checkpoint",
            "ns": entry.ns,
            "id": entry.id,
            "parent": entry.parent,
            "checkpoint": encoded(entry.checkpoint),
            "metadata": encoded(entry.metadata),
            "run_id": entry.run_id,
            "blobs": {ch: [str(v), *encoded(value)] for ch, (v, value) in blobs.items()},
        },
    }


def writes_item(entry: StoredWrites, text: str) -> dict[str, Any]:
    """The ledger item of a ``put_writes``."""
    return {
        "type": "message",
        "role": "assistant",
        "content": text,
        "langgraph": {
            "kind": "writes",
            "ns": entry.ns,
            "checkpoint_id": entry.checkpoint_id,
            "task_id": entry.task_id,
            "task_path": entry.task_path,
            "writes": [[i, channel, *encoded(value)] for i, channel, value in entry.writes],
        },
    }


def encoded(typed: Typed) -> list[str]:
    kind, data = typed
    return [kind, base64.b64encode(data).decode("ascii")]


def decoded(kind: Any, data: Any) -> Typed:
    return str(kind), base64.b64decode(str(data)) if data else b""


def parse_item(item: Mapping[str, Any]) -> Stored:
    """The checkpoint or writes an item holds (None for any other item, e.g. an erased one)."""
    stored = item.get("langgraph")
    if not isinstance(stored, Mapping):
        return None
    try:
        if stored.get("kind") == "checkpoint":
            return StoredCheckpoint(
                ns=str(stored["ns"]),
                id=str(stored["id"]),
                parent=stored.get("parent") or None,
                checkpoint=decoded(*stored["checkpoint"]),
                metadata=decoded(*stored["metadata"]),
                run_id=stored.get("run_id"),
                blobs={
                    (channel, str(version)): decoded(kind, data)
                    for channel, (version, kind, data) in stored["blobs"].items()
                },
            )
        if stored.get("kind") == "writes":
            return StoredWrites(
                ns=str(stored["ns"]),
                checkpoint_id=str(stored["checkpoint_id"]),
                task_id=str(stored["task_id"]),
                task_path=str(stored.get("task_path", "")),
                writes=tuple(
                    (int(index), str(channel), decoded(kind, data))
                    for index, channel, kind, data in stored["writes"]
                ),
            )
    except (KeyError, TypeError, ValueError):
        return None
    return None


def checkpoint_text(
    entry: StoredCheckpoint, metadata: Mapping[str, Any], new: Mapping[str, Any]
) -> str:
    """``checkpoint <id> [in <ns>] (<source>, step <n>)`` and a line per value written."""
    where = f" in {entry.ns}" if entry.ns else ""
    source, step = metadata.get("source", "?"), metadata.get("step", "?")
    head = f"checkpoint {entry.id}{where} ({source}, step {step})"
    return "\n".join([head, *(f"{name}: {value_text(value)}" for name, value in new.items())])


def writes_text(task_id: str, writes: Sequence[tuple[str, Any]]) -> str:
    lines = [f"{channel}: {value_text(value)}" for channel, value in writes]
    return "\n".join([f"writes of task {task_id}", *lines])


def value_text(value: Any) -> str:
    """A short human reading of a channel value: text as it is, a message as ``type:
    content``, a list by its count and last entry, anything else as JSON."""
    if isinstance(value, str):
        text = value
    elif isinstance(getattr(value, "content", None), str):
        text = f"{getattr(value, 'type', type(value).__name__)}: {value.content}"
    elif isinstance(value, list | tuple) and value:
        text = f"[{len(value)}] {value_text(value[-1])}"
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=repr)
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"
