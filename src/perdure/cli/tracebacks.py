"""A recorded error as ``perdure runs show`` prints it: the user's frames first.

A run's traceback is recorded as text on the worker that ran it. Most of its
frames are perdure's own (the executor, the step attempts, the thread pool)
and the standard library's (asyncio, concurrent.futures): ``user_frames``
keeps the frames of the user's code and the exception lines, so the cause is
on screen at once; ``--traceback`` prints the whole text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_FRAME = re.compile(r'^  File "(?P<path>[^"]*)", line \d+')
#: perdure's own modules and packages, whose frames are internal.
_OWN = sorted(p.stem for p in Path(__file__).parents[1].iterdir() if not p.stem.startswith("_"))
_INTERNAL = re.compile(
    r"[\\/]perdure[\\/](?:" + "|".join(map(re.escape, _OWN)) + r")\b"
    r"|[\\/]lib[\\/]python3[.\d]*[\\/](?!site-packages)"
    r"|^<frozen "
)


@dataclass(frozen=True)
class Trimmed:
    """A traceback with the internal frames dropped: its lines and how many were hidden."""

    lines: list[str]
    hidden: int


def is_internal(path: str) -> bool:
    """Whether a frame's file is perdure's own or the standard library's."""
    return _INTERNAL.search(path) is not None


def user_frames(traceback: str) -> Trimmed:
    """``traceback`` without perdure's and the standard library's frames.

    Chained tracebacks keep their headers and exception lines; a frame is its
    ``File`` line with the source lines under it. When no frame of the user's
    code remains, the traceback is returned whole.
    """
    lines = traceback.rstrip("\n").splitlines()
    kept: list[str] = []
    hidden = 0
    user = 0
    index = 0
    while index < len(lines):
        line = lines[index]
        match = _FRAME.match(line)
        if match is None:
            kept.append(line)
            index += 1
            continue
        # The frame's source lines are indented deeper than its File line.
        end = index + 1
        while end < len(lines) and lines[end].startswith("    "):
            end += 1
        if is_internal(match["path"]):
            hidden += 1
        else:
            user += 1
            kept += lines[index:end]
        index = end
    if user == 0:
        return Trimmed(lines, 0)
    return Trimmed(kept, hidden)
