"""Starts in flight at once share a statement, each with the semantics of a single start."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

import perdure
from helpers import sent_statements


def _define(app: perdure.App) -> None:
    @app.workflow("welcome")
    async def welcome(ctx: perdure.Context, value: int) -> int:
        return value


async def _start_all(app: perdure.App, keys: list[str | None]) -> list[perdure.RunHandle]:
    return await asyncio.gather(
        *(app.start_async("welcome", i, key=key) for i, key in enumerate(keys))
    )


def test_concurrent_starts_are_written_together_and_each_answers_its_own(
    app: perdure.App, db: psycopg.Connection[tuple[object, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _define(app)
    app.start("welcome", -1)  # registered and the pool warm
    keys: list[str | None] = [f"k{i % 50}" if i % 3 == 0 else None for i in range(300)]
    with sent_statements(monkeypatch) as sent:
        handles = asyncio.run(_start_all(app, keys))
    inserts = [s for s in sent if "insert_runs(" in s.query]
    # Fewer statements than starts: the ones in flight together shared one.
    assert 0 < len(inserts) < len(handles)
    by_key: dict[str, set[str]] = {}
    for index, (key, handle) in enumerate(zip(keys, handles, strict=True)):
        if key is None:
            assert handle.created
            assert app.get_run(handle.id).input == index
        else:
            by_key.setdefault(key, set()).add(handle.id)
    # A key names one run, created by exactly one of its starts.
    assert all(len(ids) == 1 for ids in by_key.values())
    created = [h for k, h in zip(keys, handles, strict=True) if k is not None and h.created]
    assert len(created) == len(by_key) == 50
    row = db.execute("SELECT count(*) FROM runs").fetchone()
    assert row is not None and row[0] == 1 + keys.count(None) + 50


def test_a_start_refused_alone_refuses_nothing_else(app: perdure.App) -> None:
    _define(app)

    @app.workflow("other")
    async def other(ctx: perdure.Context) -> None:
        return None

    app.start("other", key="taken")

    async def both() -> list[object]:
        return await asyncio.gather(
            app.start_async("welcome", 1, key="taken"),
            app.start_async("welcome", 2, key="free"),
            app.start_async("no_such_workflow", 3),
            return_exceptions=True,
        )

    conflict, fine, unknown = asyncio.run(both())
    assert isinstance(conflict, perdure.RunKeyConflict)
    assert isinstance(fine, perdure.RunHandle) and fine.created
    assert isinstance(unknown, perdure.UnknownWorkflow)
    assert app.get_run("free").input == 2
