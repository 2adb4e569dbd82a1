"""A small application for the CLI tests: ``perdure worker apps.cli_app:app``."""

from __future__ import annotations

from typing import Any

import perdure

app = perdure.App()


def _shout(name: str) -> str:
    return name.upper()


def _refuse(name: str) -> str:
    raise perdure.PermanentError(f"{name} is not welcome")


@app.workflow("cli_greet")
def cli_greet(ctx: perdure.SyncContext, input: dict[str, Any]) -> dict[str, Any]:
    """Greet someone in two steps."""
    loud = ctx.step("shout", _shout, input["name"])
    return {"greeting": ctx.step("greet", lambda: f"hello {loud}")}


@app.workflow("cli_refuse", version=2, queue="cli_other")
async def cli_refuse(ctx: perdure.Context, input: dict[str, Any]) -> None:
    """Fail at once: its step raises a permanent error."""
    await ctx.step("refuse", _refuse, input["name"])
