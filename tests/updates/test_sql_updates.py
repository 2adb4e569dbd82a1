"""An update and its reply from SQL (send_update, update_reply), as a client role."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import perdure
from helpers import BackgroundWorker, wait_until
from perdure.store import privileges


def _cart_app(app: perdure.App) -> list[str]:
    """``cart`` with update ``add_item`` (validated) and ``boom``; the items stepped."""
    done: list[str] = []

    @app.workflow("cart")
    async def cart(ctx: perdure.Context, user: str) -> list[str]:
        ctx.state["items"] = []
        await ctx.wait_for_signal("checkout")
        return list(ctx.state["items"])

    @app.update_handler("cart")
    async def add_item(ctx: perdure.Context, item: str) -> dict[str, Any]:
        await ctx.step("remember", done.append, item)
        ctx.state["items"].append(item)
        return {"count": len(ctx.state["items"]), "item": item}

    @add_item.validator
    def _check(item: Any) -> None:
        if not isinstance(item, str) or not item:
            raise ValueError("an item is a non-empty string")

    @app.update_handler("cart", "boom")
    async def boom(ctx: perdure.Context) -> None:
        raise RuntimeError("the handler broke")

    return done


@pytest.fixture
def client(pg_url: str, schema: str, app: perdure.App) -> Iterator[psycopg.Connection[Any]]:
    """A connection of a login role with the client grant only, search_path the schema."""
    name = f"perdure_client_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    privileges.grant(pg_url, schema, name, "client")
    try:
        with psycopg.connect(make_conninfo(pg_url, user=name), autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
            yield conn
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def _one(conn: psycopg.Connection[Any], query: str, *params: object) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def test_a_client_sends_an_update_and_waits_for_its_reply_in_sql(
    app: perdure.App, client: psycopg.Connection[Any]
) -> None:
    done = _cart_app(app)
    with BackgroundWorker(app, concurrency=4):
        handle = app.start("cart", "sql", key="cart:sql")
        wait_until(lambda: handle.status() == "waiting", what="the wait")
        sent = _one(client, "SELECT send_update('cart:sql', 'add_item', '\"tea\"', 's-1')")
        assert sent == "s-1"
        reply = _one(client, "SELECT update_reply('cart:sql', 's-1', 30)")
        assert reply == {"count": 1, "item": "tea"}
        # The same id again: the same request, the same reply, applied once.
        assert _one(client, "SELECT send_update(%s, 'add_item', '\"tea\"', 's-1')", handle.id)
        assert _one(client, "SELECT update_reply(%s, 's-1', 30)", handle.id) == reply
        # A generated id, and a caller already waiting when the reply is written.
        generated = _one(client, "SELECT send_update('cart:sql', 'add_item', '\"jam\"')")
        assert len(generated) == 32
        assert _one(client, "SELECT update_reply('cart:sql', %s, 30)", generated)["count"] == 2
        app.signal(handle.id, "checkout")
        assert handle.result(timeout=30) == ["tea", "jam"]
    assert done == ["tea", "jam"]


def test_refusals_and_failures_reach_sql_as_their_own_sqlstates(
    app: perdure.App, client: psycopg.Connection[Any]
) -> None:
    _cart_app(app)
    with BackgroundWorker(app, concurrency=4):
        handle = app.start("cart", "sql", key="cart:bad")
        wait_until(lambda: handle.status() == "waiting", what="the wait")
        client.execute("SELECT send_update('cart:bad', 'add_item', '\"\"', 'r-1')")
        with pytest.raises(psycopg.Error, match="non-empty string") as rejected:
            client.execute("SELECT update_reply('cart:bad', 'r-1', 30)")
        assert rejected.value.sqlstate == "PU001"
        client.execute("SELECT send_update('cart:bad', 'boom', 'null', 'f-1')")
        with pytest.raises(psycopg.Error, match="the handler broke") as failed:
            client.execute("SELECT update_reply('cart:bad', 'f-1', 30)")
        assert failed.value.sqlstate == "PU002"
        assert failed.value.diag.message_detail is not None
        assert "RuntimeError" in failed.value.diag.message_detail
    # A request the run never served (no worker): the run's end is the answer.
    idle = app.start("cart", "idle", key="cart:idle")
    client.execute("SELECT send_update('cart:idle', 'add_item', '\"x\"', 'n-1')")
    app.cancel(idle.id)
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="cancelled"):
        client.execute("SELECT update_reply('cart:idle', 'n-1', 5)")
