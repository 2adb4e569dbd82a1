""" "Did you mean": the known names closest to a name that matched nothing.

Used for workflow, queue, schedule and signal names: a misspelt name is
answered with the nearest known ones instead of an empty listing.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known names closest to ``name`` (at most ``n``), best first; none is ``name``."""
    choices = sorted({k for k in known if k != name})
    found = difflib.get_close_matches(name, choices, n=n, cutoff=0.6)
    # A name that differs only in case, or is a prefix, is close too.
    for choice in choices:
        if choice not in found and (
            choice.lower() == name.lower() or (len(name) >= 3 and choice.startswith(name))
        ):
            found.append(choice)
    return found[:n]


def hint(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'approved'?"``, or "" when no known name is close."""
    found = closest(name, known)
    if not found:
        return ""
    return "; did you mean " + " or ".join(repr(f) for f in found) + "?"
