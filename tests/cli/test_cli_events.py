"""``perdure events emit|list`` and the triggers of ``perdure workflows list``, on PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner, Result

import perdure
from perdure.cli.main import cli


@pytest.fixture
def perdure_cli(pg_url: str, schema: str) -> Callable[..., Result]:
    """Run ``perdure --database-url ... --schema ... ARGS`` in an 80-column terminal."""

    def run(*args: str) -> Result:
        return CliRunner().invoke(
            cli, ["--database-url", pg_url, "--schema", schema, *args], env={"COLUMNS": "80"}
        )

    return run


def test_events_emit_and_list(app: perdure.App, perdure_cli: Callable[..., Result]) -> None:
    @app.workflow("fulfil", on_event=perdure.EventTrigger("order.paid", {"paid": True}))
    async def fulfil(ctx: perdure.Context, order: dict[str, Any]) -> None:
        return None

    app.register()
    empty = perdure_cli("events", "list")
    assert empty.exit_code == 0 and "no event emitted yet" in empty.output

    emitted = perdure_cli(
        "events", "emit", "order.paid", '{"order_id": 1, "paid": true}', "--key", "d1", "--json"
    )
    assert emitted.exit_code == 0, emitted.output
    event_id = json.loads(emitted.output)["id"]
    again = perdure_cli(
        "events", "emit", "order.paid", '{"order_id": 1, "paid": true}', "--key", "d1"
    )
    assert again.exit_code == 0 and f"id {event_id}" in again.output
    assert perdure_cli("events", "emit", "order.paid", "{not json").exit_code != 0

    table = perdure_cli("events", "list")
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert all(len(line) <= 80 for line in lines), table.output
    assert "order.paid" in table.output and "d1" in table.output
    (run,) = app.list_runs()
    listed = json.loads(perdure_cli("events", "list", "--json", "--name", "order.paid").output)
    assert [(e["event"]["id"], e["started"], e["woke"]) for e in listed] == [
        (event_id, [run.id], [])
    ]

    workflows = perdure_cli("workflows", "list")
    assert workflows.exit_code == 0, workflows.output
    assert "on order.paid" in workflows.output
    assert all(len(line) <= 80 for line in workflows.output.splitlines()), workflows.output


def test_prune_deletes_old_events(make_app: Any, perdure_cli: Callable[..., Result]) -> None:
    from datetime import UTC, datetime, timedelta

    past = make_app(clock=perdure.VirtualClock(datetime.now(UTC) - timedelta(days=40)))
    past.emit("old", {"n": 1})
    make_app().emit("recent", {"n": 2})
    pruned = perdure_cli("prune", "--finished-before", "30d")
    assert pruned.exit_code == 0, pruned.output
    assert "deleted 1 emitted event(s) recorded before" in pruned.output
    listed = json.loads(perdure_cli("events", "list", "--json").output)
    assert [e["event"]["name"] for e in listed] == ["recent"]


def test_the_worker_start_up_line_names_the_triggers(app: perdure.App) -> None:
    from perdure.cli.worker import startup_line

    @app.workflow("fulfil", on_event=[perdure.EventTrigger("order.paid", {"paid": True}), "x.y"])
    async def fulfil(ctx: perdure.Context, order: dict[str, Any]) -> None:
        return None

    line = startup_line(app, "w1", ["fulfil"], False)
    assert "serving workflows fulfil@1 on queues fulfil; " in line
    assert "started by events: fulfil on order.paid, fulfil on x.y; database:" in line


def test_batched_triggers_show_in_workflows_list_and_the_start_up_line(
    app: perdure.App, perdure_cli: Callable[..., Result]
) -> None:
    from datetime import timedelta

    from perdure.cli.worker import startup_line

    @app.workflow(
        "settle",
        on_event=perdure.EventTrigger(
            "order.paid", batch_size=100, batch_window=timedelta(seconds=5)
        ),
    )
    async def settle(ctx: perdure.Context, events: list[dict[str, Any]]) -> None:
        return None

    line = startup_line(app, "w1", ["settle"], False)
    assert "started by events: settle on order.paid (batches of 100 / 5s); database:" in line
    app.register()
    workflows = perdure_cli("workflows", "list")
    assert workflows.exit_code == 0, workflows.output
    assert "on order.paid" in workflows.output and "batches of 100/5s" in workflows.output
    assert all(len(line) <= 80 for line in workflows.output.splitlines()), workflows.output
    listed = json.loads(perdure_cli("workflows", "list", "--json").output)
    (trigger,) = listed[0]["definition"]["on_event"]
    assert trigger == {"name": "order.paid", "match": {}, "batch_size": 100, "batch_window": 5.0}


def test_events_emit_from_a_json_lines_file(
    app: perdure.App,
    perdure_cli: Callable[..., Result],
    tmp_path: Any,
    pg_url: str,
    schema: str,
) -> None:
    lines = [
        {"name": "order.paid", "payload": {"order_id": 1}, "key": "d1"},
        {"name": "order.paid", "payload": {"order_id": 2}},
        {"name": "order.paid", "payload": {"order_id": 1}, "key": "d1"},
        {"name": "order.shipped"},
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n", encoding="utf-8")
    emitted = perdure_cli("events", "emit", "--file", str(path))
    assert emitted.exit_code == 0, emitted.output
    assert "4 event(s) emitted: 3 recorded, 1 already emitted" in emitted.output
    assert len(app.emitted_events()) == 3

    # From stdin, as JSON: the key emitted before records nothing.
    again = CliRunner().invoke(
        cli,
        ["--database-url", pg_url, "--schema", schema, "events", "emit", "--file", "-", "--json"],
        input=json.dumps(lines[0]) + "\n",
    )
    assert again.exit_code == 0, again.output
    counts = json.loads(again.output)
    assert (counts["events"], counts["recorded"], counts["already_emitted"]) == (1, 0, 1)

    # A bad line anywhere: nothing of the file is emitted.
    path.write_text(json.dumps(lines[1]) + "\n[1, 2]\n", encoding="utf-8")
    bad = perdure_cli("events", "emit", "--file", str(path))
    assert bad.exit_code != 0 and "line 2" in bad.output
    path.write_text(json.dumps(lines[1]) + '\n{"name": "bad name!"}\n', encoding="utf-8")
    bad = perdure_cli("events", "emit", "--file", str(path))
    assert bad.exit_code != 0 and "event 1 of emit_many" in bad.output
    assert len(app.emitted_events()) == 3
    both = perdure_cli("events", "emit", "order.paid", "--file", str(path))
    assert both.exit_code != 0 and "not both" in both.output
