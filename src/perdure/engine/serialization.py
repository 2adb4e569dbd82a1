"""JSON in and out, checked when a value enters perdure rather than later.

Inputs, step outputs and results are JSON values. A value is refused with a
[`SerializationError`][perdure.errors.SerializationError] when JSON cannot hold it faithfully
(NaN, non-string keys, arbitrary objects), when PostgreSQL's ``jsonb`` cannot
(the NUL character, lone surrogates, integers of more than 4300 digits), or
when it is over the size limit. Pydantic models and dataclasses are stored as
the JSON they dump to (see ``perdure.engine.typed``). Workflow code always
sees the decoded JSON, or the type its annotations declare rebuilt from it, on
the first execution as on replay, so a tuple becomes a list both times and
never only after a crash.

``jsonb`` does not give back the text it was given: it orders object keys by
length, then bytewise, and prints a number such as ``1e+20`` without its
exponent (``100000000000000000000``, an integer once decoded). The encoder
writes values the way ``jsonb`` gives them back, so the value code sees on the
first execution is the value a replay reads from the database, down to key
order and the type of every number.
"""

from __future__ import annotations

import asyncio
import json
import re
from decimal import Decimal
from typing import Any

from perdure.engine import typed
from perdure.errors import SerializationError
from perdure.store.loaders import verbatim

#: The default largest encoded payload, in bytes (configurable per App).
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
#: The largest payload limit an App accepts: far below jsonb's 255 MiB ceiling.
MAX_PAYLOAD_LIMIT = 128 * 1024 * 1024
#: Nesting deeper than this is refused before Python's recursion limit is hit.
MAX_DEPTH = 200
#: Integers are refused beyond Python's default int-to-text limit, whatever the
#: interpreter's setting, so one payload is accepted or refused the same everywhere.
MAX_INT_DIGITS = 4300
_INT_LIMIT = 10**MAX_INT_DIGITS
# A float whose repr has a positive exponent comes back from jsonb without a
# decimal point. It is encoded as a placeholder string first (NUL is refused in
# user text, so no user string can look like one), then written in full.
_PLACEHOLDER = re.compile(r'"\\u0000(\d+)"')
#: A string at least this long that needs no escaping is written as it is,
#: quoted, instead of through ``json.dumps``'s escaping loop (a large payload's
#: cost): it is encoded as a placeholder of two NULs and its index first.
BIG_TEXT = 64 * 1024
_BIG = '"\\u0000\\u0000'


class _Encoding:
    """One value being normalized: the floats written in place of placeholders."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.floats: list[str] = []
        #: Long strings written verbatim, by placeholder index.
        self.big: list[str] = []
        #: The value as JSON would give it back, placeholders in it.
        self.normalized: Any = None

    def value(self, value: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise SerializationError(self.what, f"nested deeper than {MAX_DEPTH} levels")
        if value is None or value is True or value is False:
            return value
        if isinstance(value, int):
            if -_INT_LIMIT < value < _INT_LIMIT:
                return int.__int__(value)
            raise SerializationError(self.what, f"an integer has more than {MAX_INT_DIGITS} digits")
        if isinstance(value, float):
            return self.number(float.__float__(value))
        if isinstance(value, str):
            if len(value) >= BIG_TEXT:
                return self.long_text(value)
            return self.text(value)
        if isinstance(value, list | tuple):
            return [self.value(item, depth + 1) for item in value]
        if isinstance(value, dict):
            pairs = []
            for key, item in value.items():
                if not isinstance(key, str):
                    raise SerializationError(
                        self.what,
                        f"object key {key!r} is a {type(key).__name__}; JSON keys are strings",
                    )
                pairs.append((self.text(key), self.value(item, depth + 1)))
            # jsonb's key order: shorter keys first, then bytewise.
            pairs.sort(key=lambda pair: _jsonb_key(pair[0]))
            return dict(pairs)
        if getattr(type(value), "json_list", False):
            # A map's results fetched when read (engine.results): stored as their list.
            return [self.value(item, depth + 1) for item in value]
        dumped = typed.plain(value)
        if dumped is not typed.NOT_TYPED:
            # A Pydantic model or a dataclass is stored as the JSON it dumps to.
            return self.value(dumped, depth + 1)
        kind = type(value)
        raise SerializationError(
            self.what, f"a value of type {kind.__module__}.{kind.__qualname__} is not JSON"
        )

    def number(self, value: float) -> Any:
        if value != value or value in (float("inf"), float("-inf")):
            raise SerializationError(self.what, f"{value!r} has no JSON representation")
        if value == 0:
            return 0.0  # jsonb has no negative zero
        written = repr(value)
        if "e+" not in written:
            return value
        # 1.5e+20 is written 150000000000000000000.0: jsonb keeps the decimal
        # point it is given, so the value comes back a float.
        self.floats.append(f"{Decimal(written):f}.0")
        return f"\x00{len(self.floats) - 1}"

    def long_text(self, text: str) -> str:
        """A long string: its placeholder when it needs no escaping, else as ``text``."""
        raw = self.utf8(text)
        if not verbatim(raw):
            return str.__str__(text)
        self.big.append(str.__str__(text))
        return f"\x00\x00{len(self.big) - 1}"

    def utf8(self, text: str) -> bytes:
        """``text`` as UTF-8; SerializationError if jsonb cannot store it."""
        if "\x00" in text:
            raise SerializationError(
                self.what, "text contains the NUL character, which jsonb cannot store"
            )
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            raise SerializationError(
                self.what, "text contains a lone surrogate, not valid Unicode"
            ) from None

    def restored(self, value: Any) -> Any:
        """``value`` (normalized) with each long string's placeholder replaced by it."""
        if isinstance(value, str):
            if value[:2] == "\x00\x00":
                return self.big[int(value[2:])]
            return value
        if isinstance(value, list):
            return [self.restored(item) for item in value]
        if isinstance(value, dict):
            return {key: self.restored(item) for key, item in value.items()}
        return value

    def text(self, text: str) -> str:
        self.utf8(text)
        return str.__str__(text)


def _jsonb_key(key: str) -> tuple[int, bytes]:
    raw = key.encode("utf-8")
    return len(raw), raw


def dumps(value: Any, what: str, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """Encode ``value`` as JSON text, or raise SerializationError naming ``what``."""
    return _dumps(_Encoding(what), value, max_bytes)


def _dumps(encoding: _Encoding, value: Any, max_bytes: int) -> str:
    """``dumps`` of ``value``, its normalized form kept in ``encoding.normalized``."""
    normalized = encoding.normalized = encoding.value(value, 0)
    text = json.dumps(normalized, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if encoding.floats:
        text = _PLACEHOLDER.sub(lambda m: encoding.floats[int(m.group(1))], text)
    if encoding.big:
        text = _verbatim(text, encoding.big)
    size = len(text.encode("utf-8")) if len(text) * 4 > max_bytes else len(text)
    if size > max_bytes:
        raise SerializationError(
            encoding.what, f"{size} bytes is over the {max_bytes}-byte payload limit"
        )
    return text


def _verbatim(text: str, big: list[str]) -> str:
    """``text`` with each long string's placeholder replaced by the string, quoted."""
    parts = text.split(_BIG)
    out = [parts[0]]
    for part in parts[1:]:
        index, rest = part.split('"', 1)
        out += ('"', big[int(index)], '"', rest)
    return "".join(out)


def holds_long_text(value: Any) -> bool:
    """Whether ``value`` is, or directly holds, a string of ``BIG_TEXT`` characters or more
    (a cheap look, one level deep: encoding such a value is worth a thread)."""
    if type(value) is str:
        return len(value) >= BIG_TEXT
    if type(value) is list or type(value) is tuple:
        return any(type(item) is str and len(item) >= BIG_TEXT for item in value)
    if type(value) is dict:
        return any(type(item) is str and len(item) >= BIG_TEXT for item in value.values())
    return False


def roundtrip(value: Any, what: str, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> tuple[str, Any]:
    """Encode ``value`` and return ``(text, decoded)``: what is stored and what code sees.

    A value holding long strings is not decoded again: its normalized form,
    the strings put back, is what decoding the text would give.
    """
    encoding = _Encoding(what)
    text = _dumps(encoding, value, max_bytes)
    if encoding.big and not encoding.floats:
        return text, encoding.restored(encoding.normalized)
    return text, json.loads(text)


async def roundtrip_async(
    value: Any, what: str, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
) -> tuple[str, Any]:
    """``roundtrip`` from the event loop: on a thread when ``value`` is or directly
    holds a long string (encoding it copies and scans it), else in place."""
    if holds_long_text(value):
        return await asyncio.to_thread(roundtrip, value, what, max_bytes)
    return roundtrip(value, what, max_bytes)


def error_record(exc: BaseException, traceback_text: str | None = None) -> dict[str, Any]:
    """The JSON record of an exception: its type, message and traceback."""
    kind = type(exc)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    record: dict[str, Any] = {"type": name, "message": str(exc)[:4000]}
    if traceback_text:
        record["traceback"] = traceback_text[-16000:]
    return record


def error_json(record: dict[str, Any]) -> str:
    """Encode an error record, replacing what JSON or jsonb cannot hold."""
    text = json.dumps(record, ensure_ascii=True, default=repr)
    # jsonb refuses \u0000 even when escaped; an error message may carry one.
    return text.replace("\\u0000", "\\ufffd")
