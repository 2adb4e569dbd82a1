"""A workflow whose versions a worker process has by its environment.

``VERSIONED_APP_VERSIONS=1,2`` gives this process versions 1 and 2 of
workflow "pinned". Each version returns its own number and the worker's pid,
so a test sees which version ran, and where.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import perdure

app = perdure.App()


def version(number: int) -> Callable[[perdure.SyncContext, Any], dict[str, int]]:
    """The body of version ``number``."""

    def body(ctx: perdure.SyncContext, n: Any) -> dict[str, int]:
        return {"version": number, "pid": os.getpid()}

    return body


def define(target: perdure.App, versions: list[int]) -> None:
    """Define ``versions`` of workflow "pinned" (queue "pinned") on ``target``."""
    for number in versions:
        target.workflow("pinned", version=number, queue="pinned")(version(number))


define(app, [int(v) for v in os.environ.get("VERSIONED_APP_VERSIONS", "1").split(",")])
