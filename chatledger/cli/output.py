"""What commands print as JSON: results as plain JSON values, one document or JSON lines.

Shared by every command group (``chatledger.cli.common`` re-exports it), so that
``--json`` output has one shape everywhere: pydantic results by their JSON
form, events with their whole payload as an object.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from chatledger.results import LedgerEvent


def jsonable(data: object) -> object:
    """``data`` (pydantic results, lists of them, plain values) as JSON-ready values."""
    from pydantic import BaseModel

    if isinstance(data, BaseModel):
        return data.model_dump(mode="json")
    if isinstance(data, dict):
        return {str(k): jsonable(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [jsonable(item) for item in data]
    return data


def print_json(data: object) -> None:
    """Write ``data`` as one indented JSON document on stdout (plain text, no markup)."""
    typer.echo(json.dumps(jsonable(data), indent=2, ensure_ascii=False))


def print_json_line(data: object) -> None:
    """Write ``data`` as one compact JSON line on stdout and flush (for streams)."""
    typer.echo(json.dumps(jsonable(data), ensure_ascii=False))
    sys.stdout.flush()


def event_record(item: LedgerEvent) -> dict[str, object]:
    """One ``log --json`` line: the history row, its summary and the whole event (the shape
    of ``LedgerEvent.as_json``, which export lines share)."""
    return item.as_json()


# ------------------------------------------------------------- the decorator
