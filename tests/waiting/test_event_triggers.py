"""Workflows started by emitted events: ``@app.workflow(on_event=...)``."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import perdure
from perdure.testing import drain


def _define(app: perdure.App) -> None:
    @app.workflow("ship", on_event=perdure.EventTrigger("order.paid", {"status": "ok"}))
    async def ship(ctx: perdure.Context, order: dict[str, Any]) -> int:
        return int(order["order_id"])

    @app.workflow("audit", on_event="order.paid")
    async def audit(ctx: perdure.Context, order: dict[str, Any]) -> str:
        return "seen"


def test_each_matching_event_starts_one_run_exactly_once(app: perdure.App) -> None:
    _define(app)
    app.register()
    first = app.emit("order.paid", {"order_id": 1, "status": "ok"}, key="delivery-1")
    # The same delivery again (a webhook retried): nothing new.
    assert app.emit("order.paid", {"order_id": 1, "status": "ok"}, key="delivery-1") == first
    app.emit("order.paid", {"order_id": 2, "status": "refused"})
    runs = app.list_runs()
    by_workflow = sorted((r.workflow, r.key) for r in runs)
    second = app.emitted_events("order.paid")[0]["event"].id
    assert by_workflow == [
        ("audit", f"event:{first}:audit"),
        ("audit", f"event:{second}:audit"),
        ("ship", f"event:{first}:ship"),
    ]
    drain(app)
    (ship,) = [r for r in runs if r.workflow == "ship"]
    assert app.handle(ship.id).result(timeout=5) == 1
    (listed_second, listed_first) = app.emitted_events()
    assert sorted(listed_first["started"]) == sorted(
        r.id for r in runs if r.key is not None and r.key.startswith(f"event:{first}:")
    )
    assert listed_first["woke"] == []
    assert len(listed_second["started"]) == 1


def test_a_trigger_in_a_rolled_back_transaction_starts_nothing(
    app: perdure.App, pg_url: str
) -> None:
    _define(app)
    app.register()
    with psycopg.connect(pg_url) as conn:
        app.emit("order.paid", {"order_id": 3, "status": "ok"}, conn=conn)
        conn.rollback()
    assert app.list_runs() == []


def test_workflows_record_their_triggers_and_replace_them(app: perdure.App, make_app: Any) -> None:
    _define(app)
    app.register()
    (ship,) = [w for w in app.workflows() if w.name == "ship"]
    assert ship.definition["on_event"] == [{"name": "order.paid", "match": {"status": "ok"}}]
    # A new deployment of "ship" without a trigger: emits no longer start it.
    other = make_app()

    @other.workflow("ship", version=2)
    async def ship_v2(ctx: perdure.Context, order: dict[str, Any]) -> int:
        return 0

    other.register()
    app.emit("order.paid", {"order_id": 4, "status": "ok"})
    assert [r.workflow for r in app.list_runs()] == ["audit"]


@pytest.mark.parametrize(
    ("on_event", "error"),
    [
        ("bad name!", perdure.WorkflowDefinitionError),
        (perdure.EventTrigger("ok", ["not", "a", "dict"]), perdure.ConfigurationError),  # type: ignore[arg-type]
        (42, perdure.ConfigurationError),
    ],
)
def test_a_bad_trigger_is_refused_at_definition(
    app: perdure.App, on_event: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):

        @app.workflow("bad", on_event=on_event)
        async def bad(ctx: perdure.Context) -> None:
            return None
