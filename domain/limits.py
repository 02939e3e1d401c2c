"""Limits on what can be recorded: every string, number and collection that reaches an event.

The rule they serve: nothing is appended that cannot be decoded back into an
equal event, stored in any supported database, and summed by the read models
without overflowing. So text must be valid Unicode (no lone surrogates),
numbers finite and within documented ranges, JSON values plain JSON (objects
with string keys, arrays, strings, booleans, null, 64-bit integers, finite
floats) of bounded depth and size, and every event below a size limit.

They are checked where input enters -- the service that builds a command's
input, and what a summarizer returns -- never on replay: a limit tightened in
a later version must not make stored history unreadable. Every check raises
``InvalidInput`` naming the field, the limit and what to do. docs/limits.md
lists them all. Pure: no I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from chatledger.domain.failures import InvalidInput
from chatledger.domain.ports import Summary
from chatledger.domain.values import (
    ERASED_ITEM,
    ClientContext,
    Message,
    has_control_characters,
    has_surrogates,
)

MAX_INT = 2**63 - 1
"""Largest integer anywhere in an event (a signed 64-bit column or JSON number)."""
MIN_INT = -(2**63)
MAX_TOKENS = 10**12
"""Largest token count of one tool call (prompt or completion): sums of millions stay in range."""
MAX_SECONDS = 10**10
"""Longest duration accepted, in seconds (about 317 years)."""
MAX_NAME_CHARS = 256
"""Names: a message's ``name``, tool names, principal fields, keys."""
MAX_PATH_CHARS = 4096
"""A client context's ``cwd`` and each of its ``additional_directories``."""
MAX_DIRECTORIES = 64
"""How many ``additional_directories`` a client context may list."""
MAX_JSON_DEPTH = 32
"""Nesting depth of a JSON value (``meta``, archive ``metadata``)."""
MAX_ERROR_CHARS = 2000
"""A failed commit's error text is cut to this length (it comes from arbitrary exceptions)."""
MAX_PAGE_OFFSET = MAX_INT
"""Offsets and positions passed to queries."""

DEFAULT_MAX_CONTENT_CHARS = 1_000_000
DEFAULT_MAX_META_BYTES = 64 * 1024
DEFAULT_MAX_EVENT_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits that settings may change (the rest are fixed constants of this module)."""

    max_content_chars: int = DEFAULT_MAX_CONTENT_CHARS
    max_meta_bytes: int = DEFAULT_MAX_META_BYTES
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES


def check_text(value: object, what: str, *, max_chars: int) -> str:
    """``value`` if it is a str of at most ``max_chars`` valid Unicode characters."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a str, not {type(value).__name__}.")
    if len(value) > max_chars:
        raise InvalidInput(
            f"{what} has {len(value)} characters; the limit is {max_chars}. Shorten it."
        )
    if not value.isascii() and has_surrogates(value):  # isascii(): O(1), no scan
        raise InvalidInput(
            f"{what} contains a lone surrogate character (U+D800-U+DFFF), which is not "
            "valid Unicode text and cannot be stored; decode its bytes with errors='replace' "
            "or remove it."
        )
    return value


def check_int(value: object, what: str, *, minimum: int = 0, maximum: int = MAX_INT) -> int:
    """``value`` if it is an int (not a bool) from ``minimum`` to ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{what} must be an integer, not {type(value).__name__}.")
    if not minimum <= value <= maximum:
        raise InvalidInput(f"{what} must be an integer from {minimum} to {maximum}.")
    return value


def check_seconds(value: object, what: str, *, maximum: float = MAX_SECONDS) -> float:
    """``value`` if it is a finite, non-negative number of seconds up to ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{what} must be a number of seconds, not {type(value).__name__}.")
    if isinstance(value, int) and value > maximum:  # before float(): huge ints overflow it
        raise InvalidInput(f"{what} must be a finite number of seconds from 0 to {maximum:g}.")
    seconds = float(value)
    if not math.isfinite(seconds) or not 0 <= seconds <= maximum:
        raise InvalidInput(f"{what} must be a finite number of seconds from 0 to {maximum:g}.")
    return seconds


def check_aware(value: object, what: str) -> datetime:
    """``value`` if it is a timezone-aware datetime."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidInput(f"{what} must be a timezone-aware datetime.")
    return value


def check_json(value: object, what: str, *, max_bytes: int) -> None:
    """Raise unless ``value`` is plain JSON within the depth and ``max_bytes`` limits.

    Plain JSON: dicts with str keys, lists or tuples, str, bool, None, ints
    from ``MIN_INT`` to ``MAX_INT`` and finite floats; every string valid Unicode.
    """
    bound = _json_bound(value, 0)
    if bound < 0:  # not plain: say where and why
        _check_json_node(value, what, 0)
    if bound < 0 or bound > max_bytes:  # it may not fit: measure it
        size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
        if size > max_bytes:
            raise InvalidInput(
                f"{what} takes {size} bytes as JSON; the limit is {max_bytes} (setting "
                "max_meta_bytes). Keep large data elsewhere and store a reference."
            )


def _json_bound(value: object, depth: int) -> int:
    """An upper bound of the bytes of ``value`` as compact JSON if it is plain JSON within
    the limits, built of exactly dict, list, tuple, str, int, float, bool and None; else
    -1, and ``_check_json_node`` judges (and explains). The quick check of every item
    written: one pass, no JSON text made unless the bound is over the limit."""
    if depth > MAX_JSON_DEPTH:
        return -1
    kind = type(value)
    # (No typing.cast below: it is a call, and dict[...] a new object, at every node.)
    if kind is str:
        text: str = value  # type: ignore[assignment]
        return 2 + 6 * len(text) if text.isascii() or not has_surrogates(text) else -1
    if kind is dict:
        total = 2
        for key in value:  # type: ignore[attr-defined]
            if type(key) is not str or not (key.isascii() or not has_surrogates(key)):
                return -1
            total += 3 + 6 * len(key)  # the key, its quotes and a colon
        members = value.values()  # type: ignore[attr-defined]
    elif kind is list or kind is tuple:
        total = 2
        members = value
    elif kind is int:
        return 20 if MIN_INT <= value <= MAX_INT else -1  # type: ignore[operator]
    elif kind is float:
        return 25 if math.isfinite(value) else -1  # type: ignore[arg-type]
    else:
        return 5 if value is None or kind is bool else -1
    # An ASCII string inside is bounded here, without a call (most of an item's nodes).
    inline = depth < MAX_JSON_DEPTH
    for member in members:
        if inline and type(member) is str and member.isascii():
            total += 3 + 6 * len(member)  # with its comma
        else:
            size = _json_bound(member, depth + 1)
            if size < 0:
                return -1
            total += 1 + size
    return total


def _check_json_node(value: object, where: str, depth: int) -> None:
    if depth > MAX_JSON_DEPTH:
        raise InvalidInput(f"{where} is nested more than {MAX_JSON_DEPTH} levels deep.")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        if has_surrogates(value):
            raise InvalidInput(f"{where} holds a string with a lone surrogate (not Unicode text).")
        return
    if isinstance(value, int):
        if not MIN_INT <= value <= MAX_INT:
            raise InvalidInput(
                f"{where} holds the integer {_short_int(value)}, outside the 64-bit range "
                f"{MIN_INT}..{MAX_INT}; store it as a string."
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(
                f"{where} holds {value!r}, which JSON cannot represent; use a finite number "
                "or null."
            )
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInput(
                    f"{where} has a key of type {type(key).__name__}; JSON object keys are str."
                )
            if has_surrogates(key):
                raise InvalidInput(f"{where} has a key with a lone surrogate (not Unicode text).")
            _check_json_node(item, f"{where}[{key[:40]!r}]", depth + 1)
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_json_node(item, f"{where}[{index}]", depth + 1)
        return
    raise InvalidInput(
        f"{where} holds a {type(value).__name__}; only JSON values (dict, list, str, int, "
        "float, bool, None) can be recorded."
    )


def _short_int(value: int) -> str:
    if abs(value) < 10**20:
        return str(value)
    return f"of about {int(value.bit_length() * 0.30103) + 1} digits"  # str() may refuse it


# ------------------------------------------------------------ domain values
def check_context(context: ClientContext, limits: Limits) -> ClientContext:
    """A client context whose every field can be recorded (see the module docstring)."""
    check_text(context.cwd, "context.cwd", max_chars=MAX_PATH_CHARS)
    if len(context.additional_directories) > MAX_DIRECTORIES:
        raise InvalidInput(
            f"context.additional_directories lists {len(context.additional_directories)} "
            f"directories; the limit is {MAX_DIRECTORIES}."
        )
    for index, directory in enumerate(context.additional_directories):
        check_text(directory, f"context.additional_directories[{index}]", max_chars=MAX_PATH_CHARS)
    check_json(context.meta, "context.meta", max_bytes=limits.max_meta_bytes)
    return context


def check_message(message: Message, limits: Limits) -> Message:
    """A message whose every field can be recorded (content length from ``limits``)."""
    if len(message.content) > limits.max_content_chars:
        raise InvalidInput(
            f"Message content has {len(message.content)} characters; the limit is "
            f"{limits.max_content_chars} (setting max_content_chars)."
        )
    check_text(message.content, "Message content", max_chars=limits.max_content_chars)
    if message.name is not None:
        check_text(message.name, "Message name", max_chars=MAX_NAME_CHARS)
        if has_control_characters(message.name):
            raise InvalidInput("Message name contains control characters; use printable text.")
    check_aware(message.created_at, "Message created_at")
    if message.erased:
        raise InvalidInput(
            f"Items of type {ERASED_ITEM!r} are what erased content reads as; they cannot be "
            "recorded. Pass the item itself."
        )
    tool = message.tool_call
    if tool is not None:
        check_int(tool.prompt_tokens, "tool_call.prompt_tokens", maximum=MAX_TOKENS)
        check_int(tool.completion_tokens, "tool_call.completion_tokens", maximum=MAX_TOKENS)
    return message


def check_summary(summary: Summary, limits: Limits, *, source: str) -> Summary:
    """What a summarizer returned, if it can be recorded; ``source`` names the summarizer
    call in the message (a violation fails the commit or merge, it is not the caller's input)."""
    if not isinstance(summary, Summary):
        raise InvalidInput(f"{source} returned {type(summary).__name__}, not a chatledger Summary.")
    for field in ("overview", "abstract"):
        text = check_text(
            getattr(summary, field), f"{source}'s {field}", max_chars=limits.max_content_chars
        )
        if "\x00" in text:
            raise InvalidInput(f"{source}'s {field} contains a NUL character; remove it.")
    check_json(summary.metadata, f"{source}'s metadata", max_bytes=limits.max_meta_bytes)
    return summary


def error_text(error: BaseException, *, limit: int = MAX_ERROR_CHARS) -> str:
    """The text of an exception as a failed commit records it: valid Unicode, at most ``limit``
    characters, never empty. Whatever an exception says, this can be stored."""
    try:
        text = str(error).strip()
    except Exception:  # a broken __str__ must not stop the failure from being recorded
        text = ""
    text = text or type(error).__name__
    if has_surrogates(text):
        text = text.encode("utf-8", "replace").decode("utf-8")
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text
