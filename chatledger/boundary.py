"""The public API's error boundary: only ``chatledger.errors`` leave chatledger.

``public`` wraps a method so that pydantic validation errors become
``InvalidInput`` and event-store or SQLAlchemy errors become
``StoreUnavailable`` (the original kept as ``__cause__``);
``translated_errors`` does the same around code that is not one call, such
as the steps of a generator.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

from eventsourcing.persistence import PersistenceError
from pydantic import ValidationError

from chatledger.adapters.database import SQLAlchemyError
from chatledger.adapters.store_errors import OutcomeUnknown
from chatledger.domain.failures import (
    ChatLedgerError,
    InvalidInput,
    StoreUnavailable,
    WriteOutcomeUnknown,
)

P = ParamSpec("P")
R = TypeVar("R")


def public(method: Callable[P, R]) -> Callable[P, R]:
    """Let only ``chatledger.errors`` out of ``method``."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except ChatLedgerError:
            raise
        except (ValidationError, PersistenceError, SQLAlchemyError) as error:
            raise translated(error) from error

    return wrapper


@contextlib.contextmanager
def translated_errors() -> Iterator[None]:
    """The translation of ``public``, for code that is not one call (generators)."""
    try:
        yield
    except ChatLedgerError:
        raise
    except (ValidationError, PersistenceError, SQLAlchemyError) as error:
        raise translated(error) from error


def translated(error: Exception) -> ChatLedgerError:
    """The chatledger error a validation or storage error stands for."""
    if isinstance(error, ValidationError):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in error.errors()
        )
        return InvalidInput(f"Invalid input ({problems}); nothing was recorded.")
    if isinstance(error, OutcomeUnknown):
        return WriteOutcomeUnknown(
            f"The database connection was lost while the write was committing ({error}); it "
            "may or may not have been recorded. Retry the same call with the same "
            "idempotency_key: if the write landed, the retry records nothing twice and returns "
            "its result (without a key, check the session's history before retrying)."
        )
    return StoreUnavailable(
        f"The event store failed ({type(error).__name__}: {error}); nothing more was "
        "recorded. Check the database is reachable and retry."
    )
