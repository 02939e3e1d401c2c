"""What an agent framework's item says as text: its role, its text, its name.

Items are JSON objects in the shapes agent frameworks use (the OpenAI
Responses/Agents item types, chat-completion messages, Google GenAI ``Content``
and ADK ``Event`` objects with their ``parts``, ...). A session keeps
each one verbatim; this module reads from it the text that token estimates,
summaries and prompt contexts need. Unknown shapes are carried with no text
(never dropped, never garbled). Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from chatledger.domain.values import ROLES, Role

_TEXT_KEYS = ("text", "refusal", "transcript")


def describe_item(item: Mapping[str, Any]) -> tuple[Role, str, str | None]:
    """``(role, text, name)`` of an item: who speaks in it, what it says, what it names."""
    kind = item.get("type")
    role = item.get("role")
    content = item.get("content")
    if kind is None and isinstance(content, Mapping) and isinstance(content.get("parts"), list):
        return _genai(content, item.get("author"))  # an ADK Event: content is a GenAI Content
    if kind is None and isinstance(item.get("parts"), list):
        return _genai(item, None)  # a GenAI Content itself
    if isinstance(role, str) and kind in (None, "message"):
        text = _content_text(item.get("content"))
        name = item.get("name") if isinstance(item.get("name"), str) else None
        return (role if role in ROLES else "assistant"), text, name  # type: ignore[return-value]
    if kind in ("function_call", "custom_tool_call"):
        name = _str(item.get("name"))
        arguments = item.get("arguments", item.get("input", ""))
        return "assistant", f"{name}({_as_text(arguments)})", name or None
    if kind in ("function_call_output", "custom_tool_call_output", "tool_result"):
        return "tool", _as_text(item.get("output", item.get("content", ""))), None
    if kind == "reasoning":
        parts = [*_list(item.get("summary")), *_list(item.get("content"))]
        return "assistant", _content_text(parts), None
    return "assistant", "", None


_Description = tuple[Role, str, str | None]
_last_described: list[tuple[object, _Description]] = [(None, ("assistant", "", None))]


def described(item: Mapping[str, Any]) -> _Description:
    """``describe_item(item)``, remembered for the item object described last.

    An append describes each new item twice -- to build its message, and to
    store it without the text it gives back -- on the one dict the message
    keeps (its own copy, which nothing changes in place). Keyed by identity:
    call this only with an item no one changes while it is in use.
    """
    last_item, description = _last_described[0]
    if last_item is item:
        return description
    description = describe_item(item)
    _last_described[0] = (item, description)
    return description


def _genai(content: Mapping[str, Any], author: Any) -> tuple[Role, str, str | None]:
    """A Google GenAI ``Content`` (``role`` "user" or "model", a list of ``parts``): text
    parts as they are, function calls as ``name(args)``, function responses as their JSON."""
    texts: list[str] = []
    calls: list[str] = []
    responses = 0
    for part in _list(content.get("parts")):
        if not isinstance(part, Mapping):
            continue
        if isinstance(text := part.get("text"), str):
            texts.append(text)
        elif isinstance(call := part.get("function_call"), Mapping):
            calls.append(_str(call.get("name")))
            texts.append(f"{_str(call.get('name'))}({_as_text(call.get('args', {}))})")
        elif isinstance(response := part.get("function_response"), Mapping):
            responses += 1
            texts.append(_as_text(response.get("response", {})))
    role: Role = "user" if content.get("role") == "user" else "assistant"
    if responses and not calls:
        role = "tool"
    name = calls[0] if len(calls) == 1 and calls[0] else None
    if name is None and isinstance(author, str) and author and author != "user":
        name = author
    return role, "\n".join(texts), name


def _content_text(content: Any) -> str:
    """The text of a message's content: a string, or the texts of its parts, one per line."""
    if isinstance(content, str):
        return content
    texts = []
    for part in _list(content):
        if isinstance(part, str):
            texts.append(part)
        elif type(part) is dict or isinstance(part, Mapping):  # exact type first: no ABC check
            texts.extend(v for k in _TEXT_KEYS if isinstance(v := part.get(k), str))
    return "\n".join(texts)


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        text = _content_text(value)
        if text:
            return text
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
