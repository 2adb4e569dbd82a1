"""JSON in and out, checked when a value enters perdure rather than later.

Inputs, step outputs and results are JSON values. A value is refused with a
:class:`~perdure.errors.SerializationError` when JSON cannot hold it faithfully
(NaN, non-string keys, arbitrary objects), when PostgreSQL's ``jsonb`` cannot
(the NUL character, lone surrogates), or when it is over the size limit.
Workflow code always sees the decoded JSON, on the first execution as on
replay, so a tuple becomes a list both times and never only after a crash.
"""

from __future__ import annotations

import json
from typing import Any

from perdure.errors import SerializationError

#: The default largest encoded payload, in bytes (configurable per App).
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
#: Nesting deeper than this is refused before Python's recursion limit is hit.
MAX_DEPTH = 200


def _check(value: Any, what: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise SerializationError(what, f"nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise SerializationError(what, f"{value!r} has no JSON representation")
        return
    if isinstance(value, str):
        _check_text(value, what)
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check(item, what, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SerializationError(
                    what, f"object key {key!r} is a {type(key).__name__}; JSON keys are strings"
                )
            _check_text(key, what)
            _check(item, what, depth + 1)
        return
    raise SerializationError(
        what, f"a value of type {type(value).__module__}.{type(value).__qualname__} is not JSON"
    )


def _check_text(text: str, what: str) -> None:
    if "\x00" in text:
        raise SerializationError(what, "text contains the NUL character, which jsonb cannot store")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SerializationError(
            what, "text contains a lone surrogate, not valid Unicode"
        ) from None


def dumps(value: Any, what: str, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """Encode ``value`` as JSON text, or raise SerializationError naming ``what``."""
    _check(value, what, 0)
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise SerializationError(what, f"{size} bytes is over the {max_bytes}-byte payload limit")
    return text


def roundtrip(value: Any, what: str, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> tuple[str, Any]:
    """Encode ``value`` and return ``(text, decoded)``: what is stored and what code sees."""
    text = dumps(value, what, max_bytes)
    return text, json.loads(text)


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
