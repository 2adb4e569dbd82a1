"""One statement ready to execute, and the decoders most statements share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
Row = dict[str, Any]


@dataclass(frozen=True)
class Statement(Generic[T]):
    """One query ready to execute: text, parameters and how to read its rows."""

    name: str
    query: str
    params: dict[str, Any]
    decode: Callable[[list[Row]], T]
    #: False: never a server-side prepared statement, so that every
    #: execution is planned with its parameter values (a query whose filters
    #: are "skipped when NULL" needs that to pick the right index). None: the
    #: driver's default (prepared after a few executions on one connection).
    prepare: bool | None = None


def first(decode: Callable[[Row], T]) -> Callable[[list[Row]], T | None]:
    """Decode the first row with ``decode``; None when there is none."""
    return lambda found: decode(found[0]) if found else None


def count(column: str) -> Callable[[list[Row]], int]:
    """Read the integer ``column`` of the first row (0 when there is none)."""
    return lambda found: int(found[0][column]) if found else 0


def pair(a: str, b: str) -> Callable[[list[Row]], tuple[int, int]]:
    """Read two integer columns of the first row ((0, 0) when there is none)."""
    return lambda found: (int(found[0][a]), int(found[0][b])) if found else (0, 0)
