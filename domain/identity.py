"""Session identity: ``(tenant account_id, session_key)`` -> a deterministic UUID.

The same key in two accounts names two sessions, and a key resolves to its
stream without a lookup table. Keys are validated here so that a bad key is
rejected before anything is recorded. The ids the ledger gives messages come from
their place in the stream (``message_id_at``), and lists of them are stored packed
into runs (``packed_ids``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from functools import lru_cache
from itertools import repeat
from operator import add
from typing import Any

from chatledger.domain.failures import InvalidInput
from chatledger.domain.values import has_control_characters, has_surrogates

# Fixed forever: changing it would orphan every stored session.
SESSION_NAMESPACE = uuid.UUID("6f1c6c1e-5e8a-4b7e-9a53-0c1d2e3f4a5b")
MAX_KEY_LENGTH = 256


def validate_key(key: object, *, what: str = "session key") -> str:
    """Return ``key`` if it is a usable identifier, else raise ``InvalidInput``."""
    if not isinstance(key, str):
        raise InvalidInput(f"The {what} must be a str, not {type(key).__name__}.")
    if not key:
        raise InvalidInput(f"The {what} is empty; pass a non-empty string.")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidInput(
            f"The {what} is {len(key)} characters long; use at most {MAX_KEY_LENGTH}."
        )
    if has_control_characters(key) or has_surrogates(key):
        raise InvalidInput(
            f"The {what} {key!r} contains control characters or lone surrogates; use "
            "printable text only."
        )
    return key


@lru_cache(maxsize=4096)
def session_id(account_id: str, key: str) -> uuid.UUID:
    """The stream id of the session ``key`` in tenant ``account_id``."""
    validate_key(account_id, what="account id")
    validate_key(key)
    # The unit separator cannot occur in either part (control characters are
    # rejected above), so distinct pairs can never collide in the name.
    return uuid.uuid5(SESSION_NAMESPACE, f"{account_id}\x1f{key}")


# ------------------------------------------------------------------ message ids
# A message the ledger names itself gets the id of its place in the stream: the first
# 16 hex digits of its session's id, then its version in 16. It looks like a random
# id (32 hex digits), stays unique across sessions and versions, and can be told from
# the row alone -- so an event that names many messages (an archive, a removal) stores
# a run of such ids as the first and last version.
_PREFIX_DIGITS = 16
MAX_ID_RUN = 10_000_000
"""The longest run of message ids a stored event may unpack to (a guard against a
damaged row asking for billions)."""


# The last session's id form, as one tuple: replaced whole (threads never see a form with
# another session's id). A writer writes to one session after another, and its events
# and aggregate share the id object, so the identity test nearly always finds it.
_last_form: list[tuple[uuid.UUID | None, str]] = [(None, "")]


def _id_form(session: uuid.UUID) -> str:
    """``"<the session id's first 16 hex digits>%016x"``."""
    last = _last_form[0]
    if last[0] is session:
        return last[1]
    form = session.hex[:_PREFIX_DIGITS] + "%016x"
    _last_form[0] = (session, form)
    return form


def message_id_at(session: uuid.UUID, version: int) -> str:
    """The id the ledger gives the message it records at ``version`` of ``session``."""
    return _id_form(session) % version


def message_ids_at(session: uuid.UUID, versions: Iterable[int]) -> list[str]:
    """``message_id_at`` of each of ``versions``, in passes of C code (a load names every
    message of a long run this way): a range of versions as its blocks of 4096, each the
    same 13 digits before the last three, joined to those three (twice as fast)."""
    form = _id_form(session)
    if type(versions) is not range or versions.step != 1 or versions.start < 1:
        return list(map(form.__mod__, versions))
    high = form[:_PREFIX_DIGITS] + "%013x"
    ids: list[str] = []
    start, stop = versions.start, versions.stop
    while start < stop:
        low = start & 0xFFF
        take = min(stop - start, 0x1000 - low)
        ids += map(add, repeat(high % (start >> 12), take), _LOW_DIGITS[low : low + take])
        start += take
    return ids


_LOW_DIGITS = tuple(f"{n:03x}" for n in range(0x1000))


def version_named(session: uuid.UUID, message_id: str) -> int | None:
    """The version whose ``message_id_at`` is ``message_id``, or ``None`` if it is no
    such id (a random one, a caller's own, another session's)."""
    prefix = _id_form(session)[:_PREFIX_DIGITS]
    if len(message_id) != 2 * _PREFIX_DIGITS or not message_id.startswith(prefix):
        return None
    try:
        version = int(message_id[_PREFIX_DIGITS:], 16)
    except ValueError:
        return None
    return version if version > 0 and f"{version:016x}" == message_id[_PREFIX_DIGITS:] else None


def packed_ids(session: uuid.UUID, message_ids: Iterable[str]) -> list[str | list[int]]:
    """``message_ids`` as stored: each run of the ledger's own ids of consecutive
    versions as ``[first, last]`` (at most ``MAX_ID_RUN`` long, so that every stored list
    unpacks), any other id as it is (``unpacked_ids`` reverses it)."""
    packed: list[str | list[int]] = []
    last: list[int] | None = None
    for message_id in message_ids:
        version = version_named(session, message_id)
        if version is None:
            packed.append(message_id)
            last = None
        elif last is not None and last[1] + 1 == version and last[1] - last[0] + 1 < MAX_ID_RUN:
            last[1] = version
        else:
            last = [version, version]
            packed.append(last)
    return packed


def unpacked_ids(session: uuid.UUID, stored: Iterable[Any]) -> tuple[str, ...]:
    """The message ids a stored (possibly ``packed_ids``) list names, in order.

    Raises ``ValueError`` for an entry that is neither an id nor a ``[first, last]``
    run of versions (at most ``MAX_ID_RUN`` long)."""
    ids: list[str] = []
    for entry in stored:
        if type(entry) is str:
            ids.append(entry)
            continue
        if not (
            type(entry) is list
            and len(entry) == 2
            and type(entry[0]) is int
            and type(entry[1]) is int
            and 0 < entry[0] <= entry[1] < entry[0] + MAX_ID_RUN
        ):
            raise ValueError(f"{entry!r} is neither a message id nor a run of versions")
        ids += message_ids_at(session, range(entry[0], entry[1] + 1))
    return tuple(ids)
