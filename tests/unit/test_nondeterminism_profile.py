"""The detector's profile function, called directly with the events the interpreter sends.

``tests/determinism/test_detector.py`` runs it as the interpreter's profile
hook in real workflow bodies; code run inside a profile hook is invisible to
coverage tools, so each way through it is also taken here, frame by frame.
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from perdure.engine import nondeterminism
from perdure.engine.nondeterminism import Watch, collect, in_step


def _caller(name: str = "shop.workflows", line: int = 7) -> Any:
    """A frame of the user's code (by its module name) at ``line``."""
    return SimpleNamespace(
        f_globals={"__name__": name}, f_code=SimpleNamespace(co_filename="shop.py"), f_lineno=line
    )


def _entered(fn: Any, caller: Any, **locals_: Any) -> Any:
    """The frame of Python function ``fn`` just entered, called from ``caller``."""
    return SimpleNamespace(f_code=fn.__code__, f_back=caller, f_locals=locals_)


def test_a_clock_call_from_the_users_code_is_reported_with_its_line() -> None:
    watch = Watch("r1", "shop")
    with collect() as found:
        watch.profile(_caller(line=12), "c_call", time.time)
        watch.profile(_caller(line=13), "c_call", datetime.now)
        watch.profile(_caller(line=14), "c_call", random.random)
    assert [(c.call, c.filename, c.lineno) for c in found] == [
        ("time.time", "shop.py", 12),
        ("datetime.now", "shop.py", 13),
        ("random.random", "shop.py", 14),
    ]
    assert {c.run_id for c in found} == {"r1"}


def test_python_level_uuid_and_random_calls_are_reported() -> None:
    watch = Watch("r1", "shop")
    shared = random._inst  # type: ignore[attr-defined]
    with collect() as found:
        watch.profile(_entered(uuid.uuid4, _caller(line=3)), "call", None)
        watch.profile(_entered(random.Random.randint, _caller(line=4), self=shared), "call", None)
        # A Random instance of the user's own is seeded by the user: not reported.
        mine = random.Random(1)
        watch.profile(_entered(random.Random.randint, _caller(line=5), self=mine), "call", None)
    assert [(c.call, c.lineno) for c in found] == [("uuid.uuid4", 3), ("random.randint", 4)]


def test_each_line_is_reported_once() -> None:
    watch = Watch("r1", "shop")
    with collect() as found:
        for _ in range(3):
            watch.profile(_caller(line=9), "c_call", time.time)
    assert len(found) == 1


def test_what_is_not_reported() -> None:
    watch = Watch("r1", "shop")
    with collect() as found:
        watch.profile(_caller(), "c_call", len)  # not a watched function
        watch.profile(_caller(), "c_return", time.time)  # not a call
        watch.profile(_caller(name="asyncio.tasks"), "c_call", time.time)  # the stdlib's own
        watch.profile(_caller(name="perdure.engine.worker"), "c_call", time.time)  # perdure's
        watch.profile(_entered(uuid.uuid4, None), "call", None)  # no caller frame
        watch.profile(_entered(_caller, _caller()), "call", None)  # an unwatched function
        with in_step():
            watch.profile(_caller(), "c_call", time.time)  # inside a step
    assert found == []


def test_a_plain_body_runs_under_the_profile_and_restores_the_previous_one() -> None:
    watch = Watch("r1", "shop")
    before = sys.getprofile()
    assert watch.call(lambda: 42) == 42
    assert sys.getprofile() is before
    assert nondeterminism._IN_STEP.get() is False
