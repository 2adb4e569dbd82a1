"""The detector of the clock, randomness and UUIDs read directly in a workflow body."""

from __future__ import annotations

import inspect
import logging
import random
import time
import uuid
from datetime import datetime
from typing import Any

import pytest

import perdure
from perdure import testing


def _line_of(fn: Any, text: str) -> int:
    """The line number of the first line of ``fn``'s source containing ``text``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_each_direct_call_in_an_async_body_is_reported_with_its_line(
    app: perdure.App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.workflow("careless", version=1)
    async def careless(ctx: perdure.Context) -> None:
        datetime.now()
        time.time()
        random.random()
        random.randint(1, 6)
        random.choice("abc")
        uuid.uuid4()
        await ctx.step("fine", str, "x")

    caplog.set_level(logging.WARNING, "perdure.nondeterminism")
    with testing.nondeterministic_calls() as calls:
        testing.run_until_complete(app, app.start("careless"))
    found = [(c.call, c.lineno) for c in calls]
    assert found == [
        ("datetime.now", _line_of(careless, "datetime.now()")),
        ("time.time", _line_of(careless, "time.time()")),
        ("random.random", _line_of(careless, "random.random()")),
        ("random.randint", _line_of(careless, "random.randint(")),
        ("random.choice", _line_of(careless, "random.choice(")),
        ("uuid.uuid4", _line_of(careless, "uuid.uuid4()")),
    ]
    assert all(c.filename == __file__ and c.workflow == "careless" for c in calls)
    warned = [r.getMessage() for r in caplog.records if r.name == "perdure.nondeterminism"]
    assert len(warned) == 6
    assert f"{__file__}:{_line_of(careless, 'datetime.now()')}:" in warned[0]
    assert "ctx.now()" in warned[0]


def test_calls_inside_steps_are_not_reported(app: perdure.App) -> None:
    async def async_step() -> str:
        return f"{datetime.now()} {random.random()} {uuid.uuid4()} {time.time()}"

    def plain_step() -> str:
        return f"{datetime.now()} {random.randint(1, 6)} {uuid.uuid4()}"

    @app.workflow("careful", version=1)
    async def careful(ctx: perdure.Context) -> None:
        await ctx.step("a", async_step)
        await ctx.step("b", plain_step)
        await ctx.now()
        await ctx.random()
        await ctx.uuid4()

    with testing.nondeterministic_calls() as calls:
        testing.run_until_complete(app, app.start("careful"))
    assert calls == []


def test_a_plain_def_body_is_watched_too(app: perdure.App) -> None:
    @app.workflow("careless_sync", version=1)
    def careless_sync(ctx: perdure.SyncContext) -> None:
        ctx.step("step", lambda: datetime.now().isoformat())
        uuid.uuid4()

    with testing.nondeterministic_calls() as calls:
        testing.run_until_complete(app, app.start("careless_sync"))
    assert [(c.call, c.lineno) for c in calls] == [
        ("uuid.uuid4", _line_of(careless_sync, "uuid.uuid4()"))
    ]


def test_the_detector_is_off_unless_asked(app: perdure.App) -> None:
    @app.workflow("unwatched", version=1)
    async def unwatched(ctx: perdure.Context) -> None:
        datetime.now()

    with testing.nondeterministic_calls() as calls:
        testing.drain(app, detect_nondeterminism=False)
        app.start("unwatched")
        app.run_until_complete(app.start("unwatched"))  # the App's own: not the testing kit
    assert calls == []
    with testing.nondeterministic_calls() as calls:
        testing.drain(app)  # nothing due any more: nothing runs, nothing reported
    assert calls == []


def test_the_worker_flag_turns_it_on(app: perdure.App) -> None:
    @app.workflow("flagged", version=1)
    async def flagged(ctx: perdure.Context) -> None:
        time.time()

    handle = app.start("flagged")
    with testing.nondeterministic_calls() as calls:
        app.run_until_complete(handle, detect_nondeterminism=True)
    assert [c.call for c in calls] == ["time.time"] and calls[0].run_id == handle.id


def test_the_option_is_checked(app: perdure.App) -> None:
    with pytest.raises(perdure.ConfigurationError):
        app.worker(detect_nondeterminism="yes")  # type: ignore[arg-type]


def test_the_worker_command_has_the_flag() -> None:
    from click.testing import CliRunner

    from perdure.cli.main import cli

    shown = CliRunner().invoke(cli, ["worker", "--help"])
    assert shown.exit_code == 0 and "--detect-nondeterminism" in shown.output
