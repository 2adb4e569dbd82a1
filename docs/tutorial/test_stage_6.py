"""Stage 6: tests of the order pipeline, on a real PostgreSQL and a virtual clock.

``perdure_app`` and ``perdure_clock`` come from perdure's pytest plugin.
"""

from __future__ import annotations

import perdure
from perdure import testing
from stage_6 import define

ORDER = {"id": 6, "items": ["tea", "mug"]}


def test_a_packed_order_ships(perdure_app: perdure.App) -> None:
    define(perdure_app)
    run = perdure_app.start("order", ORDER)
    testing.drain(perdure_app)  # runs until the run waits for 'packed'
    perdure_app.signal(run.id, "packed", {"parcel": "P-6", "kg": 1.0})
    assert perdure_app.run_until_complete(run)["tracking"] == "track-6"
    assert testing.step_names(perdure_app, run)[-1] == "ship"


def test_an_order_never_packed_is_refunded_after_two_days(
    perdure_app: perdure.App, perdure_clock: perdure.VirtualClock
) -> None:
    define(perdure_app)
    run = perdure_app.start("order", ORDER)
    testing.drain(perdure_app)
    perdure_clock.advance(days=2, seconds=1)  # two days pass in no time
    assert perdure_app.run_until_complete(run) == {
        "status": "refunded",
        "refund": "refund-of-charge-6",
    }


def test_a_flaky_payment_is_retried_and_charged_once(
    perdure_app: perdure.App, perdure_clock: perdure.VirtualClock
) -> None:
    define(perdure_app)
    run = perdure_app.start("order", ORDER)
    with testing.fail_step("charge_card", times=2):  # two timeouts, then it works
        for _ in range(3):
            testing.drain(perdure_app)
            perdure_clock.advance(seconds=10)  # past each retry's backoff
    perdure_app.signal(run.id, "packed", {"parcel": "P-6", "kg": 1.0})
    perdure_app.run_until_complete(run)
    testing.assert_step_ran(perdure_app, run, "charge_card", times=3)
