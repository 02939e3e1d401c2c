"""What erased content looks like: each kind of value with its content replaced by ``ERASED``.

Erasure destroys the keys a session's content was encrypted with (see
docs/erasure.md); what stays readable is what a value says about itself
without its content: ids, roles, times, tool calls, token counts, state keys,
numbers in archive metadata. These functions give the erased form of a value
the domain holds; the stored form of the same value read without its key
(``chatledger.adapters.sealing``) comes out equal, so a session replays to
the same state whether its content was redacted in memory or read erased.
Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from chatledger.domain.values import (
    ERASED,
    ERASED_ITEM,
    ArchiveSummary,
    ClientContext,
    Message,
    TaskState,
)

ERASED_CONTEXT = ClientContext(cwd=ERASED)
ERASED_TASK = TaskState(objective=ERASED, active_task=ERASED, notes=ERASED)


def erased_item(tokens: int) -> dict[str, Any]:
    """The item of an erased message that counted ``tokens`` tokens."""
    return {"type": ERASED_ITEM, "tokens": tokens}


def erased_message(message: Message) -> Message:
    """``message`` without its text, name and item: id, role, time, tool call and tokens stay."""
    if message.erased:
        return message
    return message.model_copy(
        update={"content": ERASED, "name": None, "item": erased_item(message.tokens)}
    )


def is_number(value: object) -> bool:
    """Whether an archive-metadata value is a number (kept after erasure), not content."""
    return type(value) in (int, float, bool)


def erased_archive(archive: ArchiveSummary) -> ArchiveSummary:
    """``archive`` without its overview, abstract and non-numeric metadata."""
    return archive.model_copy(
        update={
            "overview": ERASED,
            "abstract": ERASED,
            "metadata": {k: v for k, v in archive.metadata.items() if is_number(v)},
        }
    )


def erased_state(state: dict[str, Any]) -> dict[str, Any]:
    """A key-value state with every value erased (the keys stay)."""
    return dict.fromkeys(state, ERASED)


def erased_task(task: TaskState) -> TaskState:
    """The working state erased: an empty one stays empty, any other reads ``ERASED``."""
    return task if task == TaskState() else ERASED_TASK


def erased_context(context: ClientContext) -> ClientContext:
    """A client context erased: an empty one stays empty, any other reads ``ERASED``."""
    return context if context == ClientContext() else ERASED_CONTEXT


def erased_text(text: str) -> str:
    """Free text erased: empty stays empty."""
    return ERASED if text else text
