"""Restart and fork: new runs linked to their original, reusing what the original recorded.

The ledger (tests/manage/conftest.py) counts real executions of each step per
run, outside perdure: a step whose checkpoint was copied into a fork leaves
no row for the fork.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import perdure
from helpers import BackgroundWorker
from manage.conftest import Ledger

FAST = {"concurrency": 4, "poll_seconds": 0.05, "lease_seconds": 5}


def _checkout(app: perdure.App, ledger: Ledger, broken: dict[str, bool]) -> None:
    """reserve -> charge (fails while broken) -> ship -> notify; each step notes itself."""

    def reserve(run_id: str, order: dict[str, Any]) -> dict[str, Any]:
        ledger.note(run_id, "reserve")
        return {"hold": order["id"], "reserved_in": run_id}

    def charge(run_id: str, amount: int) -> int:
        ledger.note(run_id, "charge")
        if broken["charge"]:
            raise perdure.PermanentError("card processor rejected the request")
        return amount * 100

    def ship(run_id: str) -> str:
        ledger.note(run_id, "ship")
        return f"shipment of {run_id[:8]}"

    @app.workflow("checkout")
    async def checkout(ctx: perdure.Context, order: dict[str, Any]) -> dict[str, Any]:
        hold = await ctx.step("reserve", reserve, ctx.run_id, order)
        await ctx.set_event("stage", "reserved")
        await ctx.write_stream("progress", "reserved")
        cents = await ctx.step("charge", charge, ctx.run_id, order["amount"])
        await ctx.write_stream("progress", "charged")
        shipment = await ctx.step("ship", ship, ctx.run_id)
        await ctx.set_event("stage", "shipped")
        return {"hold": hold, "cents": cents, "shipment": shipment}


def test_fork_from_a_step_reuses_the_outputs_recorded_before_it(
    app: perdure.App, ledger: Ledger
) -> None:
    broken = {"charge": True}
    _checkout(app, ledger, broken)
    original = app.start("checkout", {"id": 7, "amount": 3})
    with BackgroundWorker(app, **FAST):
        with pytest.raises(perdure.RunFailed, match="card processor"):
            original.result(timeout=30)
        broken["charge"] = False  # the bug is fixed; fork from the step that failed
        fork = app.fork(original.id, from_step="charge")
        out = fork.result(timeout=30)

    assert fork.id != original.id and fork.created
    # reserve ran once, in the original: the fork reused its recorded output.
    assert ledger.counts(original.id) == {"reserve": 1, "charge": 1}
    assert ledger.counts(fork.id) == {"charge": 1, "ship": 1}
    assert out == {
        "hold": {"hold": 7, "reserved_in": original.id},
        "cents": 300,
        "shipment": f"shipment of {fork.id[:8]}",
    }
    run = fork.get()
    assert (run.forked_from, run.fork_step, run.restarted_from) == (original.id, "charge", None)
    assert run.input == original.get().input and run.version == original.get().version
    # The copied checkpoints are the original's, down to where they executed.
    before = {s.name: s for s in app.steps(original.id)}
    after = {s.name: s for s in app.steps(fork.id)}
    assert after["reserve"].output == before["reserve"].output
    assert after["reserve"].started_at == before["reserve"].started_at
    # What the copied steps published is the fork's too.
    assert list(app.read_stream(fork.id, "progress", timeout=0)) == ["reserved", "charged"]
    assert app.get_event(fork.id, "stage") == "shipped"
    created = app.history(fork.id)[0]
    assert created.event == "run_created"
    assert created.detail is not None and created.detail["forked_from"] == original.id
    assert created.detail["copied_steps"] == 3  # reserve, the event, the first stream value
    forked = [e for e in app.history(original.id) if e.event == "run_forked"]
    assert [e.detail for e in forked] == [{"run_id": fork.id, "fork_step": "charge"}]
    # The original is left as it was.
    assert original.status() == perdure.RunStatus.FAILED


def test_restart_runs_everything_again_as_a_new_linked_run(
    app: perdure.App, ledger: Ledger
) -> None:
    _checkout(app, ledger, {"charge": False})
    original = app.start("checkout", {"id": 8, "amount": 1}, key="order-8")
    with BackgroundWorker(app, **FAST):
        first = original.result(timeout=30)
        again = app.restart("order-8")
        second = again.result(timeout=30)
    assert again.id != original.id
    assert ledger.counts(original.id) == {"reserve": 1, "charge": 1, "ship": 1}
    assert ledger.counts(again.id) == {"reserve": 1, "charge": 1, "ship": 1}
    assert second["hold"]["reserved_in"] == again.id != first["hold"]["reserved_in"]
    run = again.get()
    assert (run.restarted_from, run.forked_from, run.key) == (original.id, None, None)
    assert [e.event for e in app.history(original.id)][-1] == "run_restarted"


def test_restart_and_fork_with_a_key_are_idempotent(app: perdure.App, ledger: Ledger) -> None:
    _checkout(app, ledger, {"charge": False})
    original = app.start("checkout", {"id": 9, "amount": 1})
    app.run_until_complete(original)
    restarted = app.restart(original.id, key="redo-9")
    assert app.restart(original.id, key="redo-9") == restarted
    assert not app.restart(original.id, key="redo-9").created
    forked = app.fork(original.id, from_step="ship", key="fork-9")
    assert app.fork(original.id, from_step="ship", key="fork-9") == forked
    assert len(app.list_runs(workflow="checkout")) == 3


def test_fork_from_an_unknown_step_is_refused_and_writes_nothing(
    app: perdure.App, ledger: Ledger, db: psycopg.Connection[Any]
) -> None:
    _checkout(app, ledger, {"charge": False})
    original = app.start("checkout", {"id": 10, "amount": 1})
    app.run_until_complete(original)
    with pytest.raises(perdure.UnknownStep) as refused:
        app.fork(original.id, from_step="refund")
    assert refused.value.step == "refund" and "reserve" in refused.value.known
    assert "'reserve', 'event:stage'" in str(refused.value)
    with pytest.raises(perdure.UnknownStep):
        app.fork(original.id, from_step=99)
    with pytest.raises(perdure.ConfigurationError, match="from_step"):
        app.fork(original.id, from_step="")
    assert db.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    assert [e.event for e in app.history(original.id)][-1] == "run_completed"


def test_fork_by_position_copies_the_positions_below(app: perdure.App, ledger: Ledger) -> None:
    _checkout(app, ledger, {"charge": False})
    original = app.start("checkout", {"id": 11, "amount": 2})
    app.run_until_complete(original)
    positions = {s.name: s.position for s in app.steps(original.id)}
    fork = app.fork(original.id, from_step=positions["ship"])
    assert fork.get().fork_step == "ship"
    app.run_until_complete(fork)
    assert ledger.counts(fork.id) == {"ship": 1}
    assert [s.name for s in app.steps(fork.id)] == [s.name for s in app.steps(original.id)]


def test_fork_of_a_graph_reuses_the_steps_not_downstream_of_the_fork_point(
    app: perdure.App, ledger: Ledger
) -> None:
    """extract -> transform -> load, audit (independent), report after transform and audit."""
    etl = app.graph("etl")

    @etl.step()
    def extract(ctx: perdure.StepContext, n: int) -> list[int]:
        ledger.note(ctx.run_id, "extract")
        return list(range(n))

    @etl.step(depends_on=[extract])
    def transform(ctx: perdure.StepContext, rows: list[int]) -> int:
        ledger.note(ctx.run_id, "transform")
        return sum(rows)

    @etl.step(depends_on=[transform])
    def load(ctx: perdure.StepContext, total: int) -> str:
        ledger.note(ctx.run_id, "load")
        return f"loaded {total}"

    @etl.step()
    def audit(ctx: perdure.StepContext, n: int) -> str:
        ledger.note(ctx.run_id, "audit")
        return f"audited {n} in {ctx.run_id[:8]}"

    @etl.step(depends_on=[transform, audit])
    def report(ctx: perdure.StepContext, inputs: dict[str, Any]) -> str:
        ledger.note(ctx.run_id, "report")
        return f"{inputs['transform']} / {inputs['audit']}"

    original = app.start("etl", 4)
    with BackgroundWorker(app, **FAST):
        original.result(timeout=30)
        fork = app.fork(original.id, from_step="transform")
        out = fork.result(timeout=30)
    assert ledger.counts(fork.id) == {"transform": 1, "load": 1, "report": 1}
    assert out == {"load": "loaded 6", "report": f"6 / audited 4 in {original.id[:8]}"}
    known = "'extract', 'transform', 'load', 'audit', 'report'"
    with pytest.raises(perdure.UnknownStep, match=known):
        app.fork(original.id, from_step="publish")


def test_forking_from_a_bare_app_reads_the_graph_from_the_registry(
    app: perdure.App, make_app: Any, ledger: Ledger
) -> None:
    g = app.graph("pair")

    @g.step()
    def first(ctx: perdure.StepContext, x: int) -> int:
        ledger.note(ctx.run_id, "first")
        return x + 1

    @g.step(depends_on=[first])
    def second(ctx: perdure.StepContext, x: int) -> int:
        ledger.note(ctx.run_id, "second")
        return x * 10

    original = app.start("pair", 1)
    app.run_until_complete(original)
    operator = make_app()  # no workflow code: the CLI's and the dashboard's situation
    fork = operator.fork(original.id, from_step="second")
    assert app.run_until_complete(fork.id) == {"second": 20}
    assert ledger.counts(fork.id) == {"second": 1}
