"""Binding one object's methods onto another, so a signature is written once.

``delegate("read_models", ReadModels.working_set)`` is a method that calls
``ReadModels.working_set`` on ``self.read_models`` with the arguments it was
given; ``functools.wraps`` keeps the name, docstring and signature, so
``help()``, ``inspect.signature`` and the parity tests see the original.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def delegate(
    attribute: str, method: Callable[Concatenate[T, P], R]
) -> Callable[Concatenate[Any, P], R]:
    """``method``, called on ``getattr(self, attribute)`` of whatever instance it is bound to."""

    @functools.wraps(method)
    def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(getattr(self, attribute), *args, **kwargs)

    return call
