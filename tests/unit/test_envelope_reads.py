"""Rows are opened only once an envelope may have been read, and never missed.

A process that reads only plain payloads hands its rows to the decoders as
they are (``loaders.ENVELOPES``); the first value whose text holds the
envelope's key, or the first rows read on a connection whose JSON perdure's
loaders do not read, turns the opening on for good. Each case starts from a
process state that has read no envelope yet.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg.pq import Format

import perdure
from perdure.store.loaders import ADAPTERS, ENVELOPES
from perdure.store.store import execute_sync

_JSONB = ADAPTERS.types["jsonb"].oid
_JSON = ADAPTERS.types["json"].oid


@pytest.fixture
def unseen(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No envelope read yet in this process (restored after the test)."""
    monkeypatch.setattr(ENVELOPES, "seen", False)
    yield


def _load(oid: int, text: bytes) -> object:
    loader = ADAPTERS.get_loader(oid, Format.TEXT)
    assert loader is not None
    return loader(oid).load(text)


@pytest.mark.usefixtures("unseen")
def test_plain_values_leave_the_opening_off_and_the_envelope_key_turns_it_on() -> None:
    assert _load(_JSONB, b'{"a": "the text \\"$perdure\\" quoted", "b": [1, 2]}') == {
        "a": 'the text "$perdure" quoted',
        "b": [1, 2],
    }
    assert ENVELOPES.seen is False
    _load(_JSONB, b'{"$perdure": {"v": 1}, "data": "e30="}')
    assert ENVELOPES.seen is True


@pytest.mark.usefixtures("unseen")
def test_a_json_value_whose_key_is_spelled_with_an_escape_turns_it_on() -> None:
    # Type json keeps its text as written: the key may be spelled with an escape.
    assert _load(_JSON, b'{"\\u0024perdure": 1}') == {"$perdure": 1}
    assert ENVELOPES.seen is True


@pytest.mark.usefixtures("unseen")
def test_a_users_own_envelope_key_still_reads_back_as_the_users_value(
    app: perdure.App,
) -> None:
    @app.workflow("echo")
    async def echo(ctx: perdure.Context, value: dict[str, object]) -> dict[str, object]:
        return value

    plain = app.start("echo", {"a": 1})
    assert app.get_run(plain.id).input == {"a": 1}
    assert ENVELOPES.seen is False  # nothing read could be an envelope
    own = app.start("echo", {"$perdure": "mine", "data": 7})
    assert app.get_run(own.id).input == {"$perdure": "mine", "data": 7}
    assert ENVELOPES.seen is True


@pytest.mark.usefixtures("unseen")
def test_rows_read_on_a_callers_connection_with_its_own_loaders_are_still_opened(
    app: perdure.App, pg_url: str
) -> None:
    @app.workflow("echo")
    async def echo(ctx: perdure.Context, value: dict[str, object]) -> dict[str, object]:
        return value

    run = app.start("echo", {"$perdure": "mine"})
    ENVELOPES.seen = False  # as in a process that only reads through the caller's connection
    statement = app._core.statements.runs.get(run.id)
    with psycopg.connect(pg_url, autocommit=True) as conn:  # psycopg's own loaders
        found = execute_sync(conn, statement)
    assert found is not None and found.input == {"$perdure": "mine"}
    assert ENVELOPES.seen is True
