"""An entity loop for the continue-as-new crash test: it counts to ``until``, one short
step at a time, and continues as new every ``every`` steps."""

from __future__ import annotations

import time
from typing import Any

import perdure

app = perdure.App()


def _inc(n: int) -> int:
    time.sleep(0.01)  # long enough for a kill to land between two continuations
    return n + 1


@app.workflow("entity")
async def entity(ctx: perdure.Context, state: dict[str, Any]) -> int:
    n = state["n"]
    for _ in range(state["every"]):
        if n >= state["until"]:
            return n
        n = await ctx.step("inc", _inc, n)
    await ctx.continue_as_new({**state, "n": n})
    return -1  # never reached
