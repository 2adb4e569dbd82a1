"""Read every stored value, even one Python cannot hold: infinite times, undecodable JSON.

PostgreSQL accepts values that Python's defaults refuse to read: a
``timestamptz`` of ``'infinity'`` or ``'-infinity'`` (psycopg raises
``DataError: timestamp too large``), a ``jsonb`` integer of more digits than
``int`` converts (``sys.get_int_max_str_digits()``, 4300 by default), arrays
nested deeper than the recursion limit. perdure's own writes never store them,
but a row written by hand, by an older version or by a bug may hold one; read
with the defaults, that one row would fail the whole statement, and with it a
claim of many runs or a listing of all of them.

Every connection perdure opens reads with ``ADAPTERS`` instead, whose
loaders never fail on such a value:

- an infinite time is ``INFINITY`` or ``NEG_INFINITY``, an
  ``InfiniteTime``: a ``datetime`` that orders after (before) every
  other and prints as PostgreSQL does (``infinity``, ``-infinity``);
- a JSON value Python cannot decode is an ``Undecodable``: a ``str``
  that reads ``undecodable payload: <why>``, so that listings show it, and
  that the engine recognizes to fail the run it belongs to, alone.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from itertools import accumulate
from typing import Any

import psycopg
from psycopg.adapt import AdaptersMap, Buffer, Loader
from psycopg.pq import Format
from psycopg.types.json import JsonbBinaryLoader, JsonBinaryLoader, JsonbLoader, JsonLoader

__all__ = [
    "ADAPTERS",
    "ENVELOPES",
    "INFINITY",
    "NEG_INFINITY",
    "Envelopes",
    "InfiniteTime",
    "Undecodable",
    "undecodable",
]


class InfiniteTime(datetime):
    """A ``timestamptz`` of ``'infinity'`` (or ``'-infinity'``) as a datetime.

    It holds the largest (smallest) datetime in UTC, so comparisons and
    sorting put it after (before) every other time; it prints, formats and
    serializes as PostgreSQL writes it. Converting it to a time zone gives
    itself (no zone can shift infinity). Arithmetic or ``replace`` on it
    gives a plain datetime (or OverflowError past year 9999).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """The datetime of ``args`` (what arithmetic and ``replace`` make): a plain one."""
        return datetime(*args, **kwargs)

    @property
    def positive(self) -> bool:
        """True for ``'infinity'``, False for ``'-infinity'``."""
        return self.year == datetime.max.year

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        """``'infinity'`` or ``'-infinity'``, as PostgreSQL writes it."""
        return "infinity" if self.positive else "-infinity"

    def __str__(self) -> str:
        return self.isoformat()

    def __repr__(self) -> str:
        return "perdure.INFINITY" if self.positive else "perdure.NEG_INFINITY"

    def __format__(self, spec: str) -> str:
        return self.isoformat()

    def strftime(self, fmt: str) -> str:
        """Whatever the format: ``'infinity'`` or ``'-infinity'``."""
        return self.isoformat()

    def astimezone(self, tz: Any = None) -> InfiniteTime:
        """Itself: infinity is the same in every time zone."""
        return self

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (_infinite, (self.positive,))

    def replace(self, *args: Any, **kwargs: Any) -> datetime:  # type: ignore[override]
        """A plain datetime: the edge time with the given fields replaced."""
        plain = datetime(
            self.year,
            self.month,
            self.day,
            self.hour,
            self.minute,
            self.second,
            self.microsecond,
            self.tzinfo,
        )
        return plain.replace(*args, **kwargs)

    def __copy__(self) -> InfiniteTime:
        return self

    def __deepcopy__(self, memo: Any) -> InfiniteTime:
        return self


def _infinite(positive: bool) -> InfiniteTime:
    """``INFINITY`` or ``NEG_INFINITY``."""
    edge = datetime.max if positive else datetime.min
    value: InfiniteTime = datetime.__new__(
        InfiniteTime,
        edge.year,
        edge.month,
        edge.day,
        edge.hour,
        edge.minute,
        edge.second,
        edge.microsecond,
        UTC,
    )
    return value


#: ``timestamptz 'infinity'``: after every time.
INFINITY = _infinite(True)
#: ``timestamptz '-infinity'``: before every time.
NEG_INFINITY = _infinite(False)


class Undecodable(str):
    """A stored JSON value Python cannot decode, read as the text that says so.

    It is a ``str`` (``"undecodable payload: an integer with 5000 digits"``)
    so that every listing, page and JSON answer shows it as it is; ``reason``
    says why. The engine never hands one to a workflow: a run whose input,
    checkpoint or signal is one fails with ``UndecodablePayload``.
    """

    reason: str

    def __new__(cls, reason: str) -> Undecodable:
        """The marker of a value that could not be decoded because of ``reason``."""
        made = super().__new__(cls, f"undecodable payload: {reason}")
        made.reason = reason
        return made

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (Undecodable, (self.reason,))


_DIGITS = re.compile(r"value has (\d+) digits")


def undecodable(exc: BaseException) -> Undecodable:
    """The marker for a value whose decoding raised ``exc``, its reason in words."""
    if isinstance(exc, RecursionError):
        return Undecodable("nested too deeply to decode")
    message = str(exc)
    found = _DIGITS.search(message)
    if found:
        return Undecodable(f"an integer with {found.group(1)} digits")
    return Undecodable(message[:200] or type(exc).__name__)


#: Nesting deeper than this is refused before decoding, whatever the
#: interpreter's recursion limit (a test harness or an application may raise
#: it): perdure writes at most 200 levels, the SQL functions accept no more.
MAX_NESTING = 500
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


#: Every byte but the control characters JSON text must escape inside a string.
_NOT_CONTROL = bytes(range(32, 256))


def verbatim(raw: bytes, start: int = 0, end: int | None = None) -> bool:
    """Whether UTF-8 ``raw[start:end]`` needs no escaping inside a JSON string (no
    quote, backslash or control character): ``'"' + raw + '"'`` is its JSON text.
    (Quotes outside the range are not looked at; control characters anywhere are.)"""
    stop = len(raw) if end is None else end
    return (
        raw.find(b'"', start, stop) < 0
        and raw.find(b"\\", start, stop) < 0
        and not raw.translate(None, _NOT_CONTROL)
    )


def too_deep(data: bytes) -> bool:
    """Whether JSON text ``data`` nests deeper than ``MAX_NESTING`` (strings aside)."""
    if data[:1] == b'"':
        return False  # a string (or not JSON at all, which decoding tells)
    if data.count(b"[") + data.count(b"{") <= MAX_NESTING:
        return False  # the cheap common case: too few brackets to nest that deep
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > MAX_NESTING


class Envelopes:
    """Whether a payload envelope (store/codec.py) may be among the rows read so far.

    A process that neither encrypts, compresses nor offloads, and reads only
    plain payloads, never reads an envelope: the statements' rows are then
    handed to their decoders without a scan of every column
    (store/statement.py). ``seen`` turns True, for good, at the first JSON
    value read whose text holds the envelope's key (``"$perdure"``), or the
    first rows read on a connection whose JSON these loaders do not read.
    """

    __slots__ = ("seen",)

    def __init__(self) -> None:
        """Nothing read yet."""
        self.seen = False

    def check(self, conn: Any) -> None:
        """Before rows read on ``conn`` (perhaps a caller's) are opened: if its JSON
        is not read by these loaders, no text was looked at, so any row may hold one."""
        if not self.seen and not _lenient(conn.adapters):
            self.seen = True


#: The process's one record of whether an envelope may have been read.
ENVELOPES = Envelopes()
#: The envelope's key as the server writes it in JSON text (codec.ENVELOPE, quoted).
_ENVELOPE_KEY = b'"$perdure"'


class _Lenient:
    """Mixin for psycopg's JSON loaders: a value json cannot decode becomes an Undecodable.

    It also notes in ``ENVELOPES`` a value that may hold a payload envelope.
    """

    #: Type ``json`` keeps its text as written: its keys may be spelled with
    #: escapes (``"\u0024perdure"``), so any escape counts as a possible envelope.
    verbatim = False

    def load(self, data: Buffer) -> Any:
        raw = data if type(data) is bytes else bytes(data)
        if not ENVELOPES.seen and (_ENVELOPE_KEY in raw or (self.verbatim and b"\\u" in raw)):
            ENVELOPES.seen = True
        if too_deep(raw):
            return Undecodable("nested too deeply to decode")
        try:
            return super().load(data)  # type: ignore[misc]
        except (ValueError, RecursionError) as exc:
            return undecodable(exc)


class _JsonbText(_Lenient, JsonbLoader):
    pass


class _JsonbBinary(_Lenient, JsonbBinaryLoader):
    pass


class _JsonText(_Lenient, JsonLoader):
    verbatim = True


class _JsonBinary(_Lenient, JsonBinaryLoader):
    verbatim = True


_TIMESTAMPTZ_OID = psycopg.adapters.types["timestamptz"].oid
#: How PostgreSQL sends the infinities: text, and binary (int64 max and min).
_INFINITE_TEXT = {b"infinity": INFINITY, b"-infinity": NEG_INFINITY}
_INFINITE_BINARY = {
    b"\x7f\xff\xff\xff\xff\xff\xff\xff": INFINITY,
    b"\x80\x00\x00\x00\x00\x00\x00\x00": NEG_INFINITY,
}


#: psycopg's own loaders (the C ones when psycopg[binary] is installed).
_BASE: dict[Format, type[Loader]] = {
    fmt: psycopg.adapters.get_loader(_TIMESTAMPTZ_OID, fmt)  # type: ignore[misc]
    for fmt in (Format.TEXT, Format.BINARY)
}


class _Timestamptz(Loader):
    """psycopg's own timestamptz loader (the fast one), with the infinities added."""

    infinities = _INFINITE_TEXT

    def __init__(self, oid: int, context: Any = None) -> None:
        super().__init__(oid, context)
        self._load = _BASE[self.format](oid, context).load

    def load(self, data: Buffer) -> Any:
        try:
            return self._load(data)
        except psycopg.DataError:
            infinite = self.infinities.get(bytes(data))
            if infinite is None:
                raise
            return infinite


class _TimestamptzBinary(_Timestamptz):
    format = Format.BINARY
    infinities = _INFINITE_BINARY


def _adapters() -> AdaptersMap:
    adapters = AdaptersMap(psycopg.adapters)
    adapters.register_loader("jsonb", _JsonbText)
    adapters.register_loader("jsonb", _JsonbBinary)
    adapters.register_loader("json", _JsonText)
    adapters.register_loader("json", _JsonBinary)
    adapters.register_loader("timestamptz", _Timestamptz)
    adapters.register_loader("timestamptz", _TimestamptzBinary)
    return adapters


#: The adapters of every connection perdure opens (``connect(..., context=ADAPTERS)``).
ADAPTERS = _adapters()

_JSON_OIDS = (psycopg.adapters.types["jsonb"].oid, psycopg.adapters.types["json"].oid)


def _lenient(adapters: AdaptersMap) -> bool:
    """Whether every JSON value read with ``adapters`` goes through these loaders.

    Text results only: the store reads every statement's rows as text.
    """
    for oid in _JSON_OIDS:
        loader = adapters.get_loader(oid, Format.TEXT)
        if loader is None or not issubclass(loader, _Lenient):
            return False
    return True
