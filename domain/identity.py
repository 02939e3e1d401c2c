"""Session identity: ``(tenant account_id, session_key)`` -> a deterministic UUID.

The same key in two accounts names two sessions, and a key resolves to its
stream without a lookup table. Keys are validated here so that a bad key is
rejected before anything is recorded.
"""

from __future__ import annotations

import uuid
from functools import lru_cache

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
