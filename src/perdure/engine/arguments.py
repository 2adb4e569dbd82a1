"""Checks of the arguments of public calls, before anything reaches the database.

A wrong type, a number out of range or text PostgreSQL cannot store is refused
here with a [`ConfigurationError`][perdure.errors.ConfigurationError] that names the
argument, instead of surfacing later as a driver error, a half-done operation
or a run that retries something that can never work.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta

from perdure.errors import ConfigurationError, WorkflowDefinitionError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:\-]{0,127}")
#: The control characters: Unicode's category Cc, which its stability policy
#: fixes at these 65 code points (one search instead of a lookup per character).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def validate_name(kind: str, name: object) -> str:
    """Return ``name`` if it is a valid workflow, queue or signal name, else raise.

    WorkflowDefinitionError names the rule: 1-128 ASCII letters, digits, '_',
    '.', ':' or '-', starting with a letter or '_'.
    """
    # fullmatch: a '$' anchor would let a trailing newline through.
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise WorkflowDefinitionError(
            f"invalid {kind} name {_short(name)}: use 1-128 letters, digits, '_', '.', ':' "
            "or '-', starting with a letter or '_'"
        )
    return name


#: The longest duration accepted anywhere (a delay, sleep, timeout): 1000 years.
MAX_SECONDS = 1000 * 365 * 86400.0
#: Integers stored in ``integer`` columns (priority, version, limits).
INT32_MAX = 2**31 - 1
#: The longest run key or signal key.
MAX_KEY_LENGTH = 512
#: The longest step, event or stream name.
MAX_LABEL_LENGTH = 200


def seconds(what: str, value: object, *, positive: bool = False) -> float:
    """``value`` (a number of seconds or a timedelta) as a float, or ConfigurationError.

    It must be finite, not negative (not zero either when ``positive``), and at
    most ``MAX_SECONDS``.
    """
    amount = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        not isinstance(amount, int | float)
        or isinstance(amount, bool)
        or not math.isfinite(amount)
        or amount < 0
        or (positive and amount == 0)
        or amount > MAX_SECONDS
    ):
        bound = "a positive" if positive else "a non-negative"
        raise ConfigurationError(
            f"{what} must be {bound} number of seconds (at most {MAX_SECONDS:.0f}) "
            f"or a timedelta, not {value!r}"
        )
    return float(amount)


def optional_seconds(what: str, value: object, *, positive: bool = False) -> float | None:
    """Like ``seconds``, with None passed through."""
    return None if value is None else seconds(what, value, positive=positive)


def integer(what: str, value: object, *, minimum: int, maximum: int = INT32_MAX) -> int:
    """``value`` if it is an integer (not a bool) from ``minimum`` to ``maximum``."""
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise ConfigurationError(
            f"{what} must be an integer from {minimum} to {maximum}, not {value!r}"
        )
    return int(value)


def flag(what: str, value: object) -> bool:
    """``value`` if it is a bool."""
    if not isinstance(value, bool):
        raise ConfigurationError(f"{what} must be True or False, not {value!r}")
    return value


def storable(value: str) -> bool:
    """Whether PostgreSQL can store ``value`` as text: no NUL, no lone surrogate."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def text(what: str, value: object, *, max_length: int, control: bool = True) -> str:
    """``value`` if it is a non-empty string PostgreSQL can store, of at most ``max_length``.

    With ``control=False``, control characters (newlines, escapes) are refused
    too: the text is a name that terminals and logs print.
    """
    if not isinstance(value, str) or not value or len(value) > max_length:
        raise ConfigurationError(
            f"{what} must be a non-empty string of at most {max_length} characters, "
            f"not {_short(value)}"
        )
    if not storable(value):
        raise ConfigurationError(
            f"{what} contains the NUL character or a lone surrogate, which PostgreSQL "
            f"cannot store: {_short(value)}"
        )
    if not control and _CONTROL.search(value):
        raise ConfigurationError(f"{what} contains a control character: {_short(value)}")
    return value


def optional_text(what: str, value: object, *, max_length: int) -> str | None:
    """Like ``text``, with None passed through."""
    return None if value is None else text(what, value, max_length=max_length)


def label(what: str, value: object) -> str:
    """A step, event or stream name: printable text of at most 200 characters."""
    return text(what, value, max_length=MAX_LABEL_LENGTH, control=False)


def timestamp(what: str, value: object) -> datetime | None:
    """``value`` if it is a datetime or None."""
    if value is not None and not isinstance(value, datetime):
        raise ConfigurationError(f"{what} must be a datetime, not {_short(value)}")
    return value


def _short(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else f"{shown[:60]}... ({len(shown)} characters)"
