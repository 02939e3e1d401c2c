"""Value objects of the session domain: who acts, what is said, what is archived.

All are frozen pydantic models, so they validate on construction, compare by
value and serialise to JSON exactly. Nothing here performs I/O or reads a clock.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Sequence
from datetime import datetime
from itertools import repeat
from operator import add, floordiv, not_
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

Role = Literal["system", "developer", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "developer", "user", "assistant", "tool")
PrincipalRole = Literal["member", "admin"]
EvictionReason = Literal["idle", "lru", "admin"]
ERASED = "[erased]"
"""What erased content reads as: message text, summaries, state values, task text."""
ERASED_ITEM = "chatledger.erased"
"""The ``type`` of the item an erased message carries: ``{"type": ERASED_ITEM, "tokens": n}``
keeps the token count the message had, so counters replay the same after erasure."""


class Value(BaseModel):
    """Base of every value object: immutable, no unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


_new = object.__new__
_set = object.__setattr__
M = TypeVar("M", bound=BaseModel)


def assemble(cls: type[M], values: dict[str, Any]) -> M:
    """A ``cls`` holding ``values`` -- every field, in field order, each already of its
    field's type and checked -- without validating them again.

    For the hot paths that build a model from parts validated a moment before
    (a message from checked text, an event from a validated message); equal to
    what ``cls(**values)`` gives, which the tests hold for each such path.
    """
    model = _new(cls)
    _set(model, "__dict__", values)
    _set(model, "__pydantic_fields_set__", set(values))
    _set(model, "__pydantic_extra__", None)
    _set(model, "__pydantic_private__", None)
    return model


# The setters of the four slots every model instance holds, called directly: a pass of
# ``map`` over them skips the attribute lookup ``object.__setattr__`` makes per call.
_SET_DICT, _SET_FIELDS_SET, _SET_EXTRA, _SET_PRIVATE = (
    BaseModel.__dict__[name].__set__
    for name in (
        "__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__"
    )
)  # fmt: skip


def assemble_all(cls: type[M], values: list[dict[str, Any]]) -> list[M]:
    """``assemble`` of each of ``values`` (dicts of the same fields), in passes of C code:
    for a long run of models built at once (a deep check's messages, a prompt context)."""
    count = len(values)
    models = list(map(_new, repeat(cls, count)))
    fields = set(values[0]) if count else set()
    deque(map(_SET_DICT, models, values), maxlen=0)
    # Each model its own set (pydantic adds to it), copied from one: cheaper than building.
    deque(map(_SET_FIELDS_SET, models, map(set.copy, repeat(fields, count))), maxlen=0)
    deque(map(_SET_EXTRA, models, repeat(None, count)), maxlen=0)
    deque(map(_SET_PRIVATE, models, repeat(None, count)), maxlen=0)
    return models


_CONTROL = r"\x00-\x1f\x7f-\x9f"  # ASCII and Unicode C0/C1 control characters
_CONTROL_CHARACTER = re.compile(f"[{_CONTROL}]")
_PRINTABLE = f"^[^{_CONTROL}]*$"
"""Matches text without control characters (the same rule, as a pydantic pattern)."""


def has_control_characters(text: str) -> bool:
    """True if ``text`` holds an ASCII or Unicode C0/C1 control character."""
    return _CONTROL_CHARACTER.search(text) is not None


_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogates(text: str) -> bool:
    """True if ``text`` holds a lone surrogate: not Unicode text, so it cannot be stored."""
    return _SURROGATE.search(text) is not None


def printable(text: str) -> str:
    """``text`` with every control character (newlines too) replaced by a space."""
    return _CONTROL_CHARACTER.sub(" ", text)


def _without_nul(text: str) -> str:
    if "\x00" in text:
        raise ValueError(
            "contains a NUL character (\\x00), which databases cannot store as text; remove it"
        )
    return text


NulFreeText = Annotated[str, AfterValidator(_without_nul)]
"""Text that read models keep in text columns: anything but NUL (PostgreSQL refuses it)."""


class Principal(Value):
    """The acting party: a tenant account, a user in it, and the agent acting for them."""

    # The pattern (checked in pydantic's core, not in Python: principals are
    # rebuilt with every stored event) refuses control characters.
    account_id: str = Field(min_length=1, max_length=256, pattern=_PRINTABLE)
    user_id: str = Field(default="", max_length=256, pattern=_PRINTABLE)
    agent_id: str = Field(default="", max_length=256, pattern=_PRINTABLE)
    role: PrincipalRole = "member"
    trace_id: str = Field(default="", max_length=256, pattern=_PRINTABLE)

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


class ToolCall(Value):
    """Usage data of one tool call, carried by the message that reports it."""

    tool_name: str = Field(min_length=1, max_length=256, pattern=_PRINTABLE)
    status: Literal["success", "error"] = "success"
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


MESSAGE_ID_CHARS = 128
"""The longest message id, in characters."""


class Message(Value):
    """One entry of a session's buffer, as recorded in a ``MessageAdded`` event.

    A plain chat message has a ``role`` and text ``content``. An agent
    framework's item (a message with content parts, a function call or its
    output, a reasoning item, anything else) is kept verbatim in ``item``, a
    JSON object, while ``role``, ``content`` and ``name`` hold what it says as
    text (``chatledger.domain.items.describe_item``), which token estimates,
    summaries and prompt contexts read.
    """

    id: str = Field(min_length=1, max_length=MESSAGE_ID_CHARS)
    role: Role
    content: str
    created_at: datetime
    name: str | None = None
    tool_call: ToolCall | None = None
    item: dict[str, Any] | None = None

    def named(self, message_id: str) -> Message:
        """This message with the id ``message_id`` (a valid one, or ``""``: one a session
        names as it records it), built without validating the rest again."""
        values = self.__dict__.copy()
        values["id"] = message_id
        return assemble(Message, values)

    @property
    def tokens(self) -> int:
        item = self.item
        if item is None:  # most messages: one call less (replays count every message)
            return estimate_tokens(self.content)
        return message_tokens(self.content, item)

    @property
    def erased(self) -> bool:
        """Whether the message's content was erased (it reads as ``ERASED``)."""
        item = self.item
        return item is not None and item.get("type") == ERASED_ITEM

    def as_item(self) -> dict[str, Any]:
        """The JSON object an agent framework gave (or ``{"role", "content"}`` for text; an
        erased message is a plain message saying ``ERASED``, whatever item it was)."""
        item = self.item
        if item is not None and item.get("type") != ERASED_ITEM:
            return item
        return {"role": self.role, "content": self.content}


class ClientContext(Value):
    """Where the client runs, captured verbatim when a session starts."""

    cwd: str = ""
    additional_directories: tuple[str, ...] = ()
    meta: dict[str, Any] = Field(default_factory=dict)


class ArchiveSummary(Value):
    """A summarised archive of messages folded out of the live buffer."""

    archive_id: str = Field(min_length=1)
    overview: NulFreeText
    abstract: NulFreeText
    message_ids: tuple[str, ...]
    tokens: int = Field(ge=0)
    created_at: datetime
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def covered_count(self) -> int:
        """How many messages the archive stands for (a merge counts its sources')."""
        count = self.metadata.get("message_count")
        return count if isinstance(count, int) else len(self.message_ids)


def estimate_tokens(content: str) -> int:
    """The token estimate of a message: a quarter of its characters, at least one."""
    return max(1, len(content) // 4)


def text_quarters(contents: Sequence[str]) -> list[int]:
    """A quarter of each text's length, in a pass of C code: its ``estimate_tokens``, but
    0 (not 1) for a text under four characters (``tokens_of_quarters`` adds that)."""
    return list(map(floordiv, map(len, contents), repeat(4, len(contents))))


def quarters_tokens(quarters: list[int]) -> int:
    """``sum(tokens_of_quarters(quarters))``: a zero quarter counts one token."""
    return sum(quarters) + quarters.count(0)


def tokens_of_quarters(quarters: Sequence[int]) -> list[int]:
    """Each text's ``estimate_tokens`` from its ``text_quarters``: a zero quarter counts 1."""
    return list(map(add, quarters, map(not_, quarters)))


def texts_tokens(contents: list[str]) -> int:
    """``sum(estimate_tokens(c) for c in contents)``, counted in a few passes of C code: a
    load counts the tokens of a long live buffer of plain text messages this way."""
    return quarters_tokens(text_quarters(contents))


def tokens_of_texts(contents: Sequence[str]) -> list[int]:
    """``estimate_tokens`` of each of ``contents``, in passes of C code."""
    return tokens_of_quarters(text_quarters(contents))


def message_tokens(content: str, item: dict[str, Any] | None) -> int:
    """The tokens of a message with this ``content`` and ``item`` (``Message.tokens``).

    An item with no text of its own (say, a tool call the summarizer does not know)
    still takes room in a prompt: its JSON is counted. An erased message counts what
    it counted before (its item keeps the number).
    """
    if item is None:
        return estimate_tokens(content)
    if item.get("type") == ERASED_ITEM:
        kept = item.get("tokens")
        return kept if type(kept) is int else estimate_tokens(content)
    if content:
        return estimate_tokens(content)
    return estimate_tokens(json.dumps(item, separators=(",", ":")))


class TaskState(Value):
    """The agent's working state of a session: what it is doing and under which terms."""

    objective: str = ""
    active_task: str = ""
    constraints: tuple[str, ...] = ()  # confirmed with the user
    blockers: tuple[str, ...] = ()
    notes: str = ""


class CompactionToken(Value):
    """A prepared compaction: what the compactor saw, and until when it may complete."""

    token: str
    prepared_at: datetime
    expires_at: datetime
    message_count: int  # live items when it was prepared
    watermark: int  # the extraction watermark then
