"""An example of testing perdure workflows with perdure.testing (run by perdure's CI).

The fixtures come from perdure's pytest plugin, registered when perdure is
installed: ``perdure_app`` is an App on a schema of its own in a real
PostgreSQL (embedded, or PERDURE_TEST_DATABASE_URL), and ``perdure_clock`` is
the virtual clock it runs on.
"""

from __future__ import annotations

from typing import Any

import pytest

import perdure
from perdure import testing

CHARGES: list[str] = []


def define(app: perdure.App) -> None:
    """The code under test: an order checkout that waits for shipment."""

    def charge_card(order: dict[str, Any]) -> str:
        CHARGES.append(order["id"])
        return f"ch_{order['id']}"

    @app.workflow("checkout", version=1)
    async def checkout(ctx: perdure.Context, order: dict[str, Any]) -> dict[str, Any]:
        charge = await ctx.step(
            "charge_card",
            charge_card,
            order,
            retry=perdure.RetryPolicy(max_attempts=3, initial_delay=60, jitter=0),
        )
        try:
            shipment = await ctx.wait_for_signal("shipped", timeout=3 * 86400)
        except perdure.SignalTimeout:
            await ctx.step("refund", lambda: f"refund {charge}")
            return {"charge": charge, "status": "refunded"}
        return {"charge": charge, "status": "shipped", "tracking": shipment["tracking"]}


@pytest.fixture(autouse=True)
def _reset() -> None:
    CHARGES.clear()


def test_an_order_ships(perdure_app: perdure.App) -> None:
    define(perdure_app)
    run = perdure_app.start("checkout", {"id": "o1"})
    testing.drain(perdure_app)  # runs until the signal wait
    perdure_app.signal(run.id, "shipped", {"tracking": "Z1"})
    assert perdure_app.run_until_complete(run) == {
        "charge": "ch_o1",
        "status": "shipped",
        "tracking": "Z1",
    }
    testing.assert_step_ran(perdure_app, run, "charge_card", times=1)


def test_no_shipment_in_three_days_refunds(
    perdure_app: perdure.App, perdure_clock: perdure.VirtualClock
) -> None:
    define(perdure_app)
    run = perdure_app.start("checkout", {"id": "o2"})
    testing.drain(perdure_app)
    perdure_clock.advance(days=3)  # no real waiting
    assert perdure_app.run_until_complete(run)["status"] == "refunded"


def test_a_crash_after_the_charge_never_charges_twice(
    perdure_app: perdure.App, perdure_clock: perdure.VirtualClock
) -> None:
    define(perdure_app)
    run = perdure_app.start("checkout", {"id": "o3"})
    with testing.crash_after(step="charge_card"):
        testing.drain(perdure_app)  # the worker dies after the checkpoint
    perdure_clock.advance(minutes=2)  # its lease (60 s inline) lapses
    testing.drain(perdure_app)  # another worker resumes the run
    perdure_app.signal(run.id, "shipped", {"tracking": "Z3"})
    assert perdure_app.run_until_complete(run)["status"] == "shipped"
    assert CHARGES == ["o3"]


def test_a_flaky_gateway_is_retried(
    perdure_app: perdure.App, perdure_clock: perdure.VirtualClock
) -> None:
    define(perdure_app)
    run = perdure_app.start("checkout", {"id": "o4"})
    with testing.fail_step("charge_card", times=2):
        for _ in range(3):
            testing.drain(perdure_app)
            perdure_clock.advance(minutes=2)
    testing.assert_step_ran(perdure_app, run, "charge_card", times=3)


def test_in_flight_runs_replay_against_the_code(perdure_app: perdure.App) -> None:
    define(perdure_app)
    perdure_app.start("checkout", {"id": "o5"})
    testing.drain(perdure_app)
    testing.assert_replays(perdure_app)  # what `perdure check-replay` checks
