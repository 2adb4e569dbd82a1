"""One statement ready to execute, how statements are built, and shared decoders.

The ``Builder`` is where payloads cross the codec (store/codec.py): the
statement modules seal each payload parameter with ``build.seal`` or
``build.seal_each``, and every statement's rows are opened before its decoder
reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from perdure.clock import Clock
from perdure.store.codec import PLAIN, Payloads
from perdure.store.loaders import ENVELOPES
from perdure.store.offload import Pending

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
    #: Offloaded payloads its rows reference: uploaded (and the list emptied)
    #: before the statement runs, so no committed row names a missing object.
    uploads: list[Pending] = field(default_factory=list)
    #: The pipeline its rows' payloads are opened with (to tell when opening fetches).
    payloads: Payloads = PLAIN


class Builder:
    """Turns a query name and parameters into a ``Statement`` for one schema.

    Every statement gets the clock's ``now`` as a parameter, so that every
    time comparison in SQL goes through one clock a test can move.
    """

    def __init__(
        self, schema: str, clock: Clock, queries: dict[str, str], payloads: Payloads = PLAIN
    ) -> None:
        """Build from the rendered ``queries`` of ``schema``; take times from ``clock``;
        pass payloads through ``payloads``."""
        self.schema = schema
        self.clock = clock
        self.channel = f"{schema}_wakeup"
        self.queries = queries
        self.payloads = payloads
        #: The stored form of one payload's JSON text (None stays None).
        self.seal = payloads.seal
        #: The stored forms of many payloads' JSON texts.
        self.seal_each = payloads.seal_each

    def __call__(
        self, query_name: str, decode: Callable[[list[Row]], T], **params: Any
    ) -> Statement[T]:
        """The statement of query ``query_name`` with ``params`` and the clock's now;
        its rows' payloads are opened before ``decode`` reads them."""
        params["now"] = self.clock.sql_now()
        opened = _Opened(self.payloads.open_rows, decode)
        uploads = self.payloads.take_pending() if self.payloads.offload is not None else []
        return Statement(
            query_name,
            self.queries[query_name],
            params,
            opened,
            uploads=uploads,
            payloads=self.payloads,
        )


class _Opened(Generic[T]):
    """A statement's decoder, reading its rows once their payloads are opened.

    Until the process has read a value that may be an envelope
    (``loaders.ENVELOPES``), no row can hold one: the rows go to the decoder
    as they are, without a look at each column.
    """

    __slots__ = ("decode", "open_rows")

    def __init__(
        self,
        open_rows: Callable[[list[Row]], list[Row]],
        decode: Callable[[list[Row]], T],
    ) -> None:
        self.open_rows = open_rows
        self.decode = decode

    def __call__(self, found: list[Row]) -> T:
        if ENVELOPES.seen:
            return self.decode(self.open_rows(found))
        return self.decode(found)


class Namespace:
    """The statements of one entity, built by a shared ``Builder``."""

    def __init__(self, build: Builder) -> None:
        """Build statements with ``build``."""
        self._build = build


def first(decode: Callable[[Row], T]) -> Callable[[list[Row]], T | None]:
    """Decode the first row with ``decode``; None when there is none."""
    return lambda found: decode(found[0]) if found else None


def count(column: str) -> Callable[[list[Row]], int]:
    """Read the integer ``column`` of the first row (0 when there is none)."""
    return lambda found: int(found[0][column]) if found else 0


def pair(a: str, b: str) -> Callable[[list[Row]], tuple[int, int]]:
    """Read two integer columns of the first row ((0, 0) when there is none)."""
    return lambda found: (int(found[0][a]), int(found[0][b])) if found else (0, 0)


def sparse(column: list[T | None]) -> list[T | None] | None:
    """A column of a statement over arrays, or None when every value is None.

    ``unnest`` pads a NULL array with NULLs to the length of the others, so
    a column nobody uses costs one NULL parameter instead of an array of them.
    """
    for value in column:
        if value is not None:
            return column
    return None


def all_rows(found: list[Row]) -> list[Row]:
    """The rows as they are."""
    return found
