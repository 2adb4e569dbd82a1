"""The chaos checker catches what it is meant to catch (on made-up rows, no database)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

from chaos.checker import _Execution, _leases, _plain_effects, _transactions
from chaos.faults import Fault

EXPECTED = {"r1": (["a"], ["t"])}
RUNS: dict[str, Any] = {
    "r1": ("r1", "wf", "completed", "k1", None, datetime.fromtimestamp(110, UTC))
}
TWICE = [_Execution("r1", "a", 10, 100.0, 101.0), _Execution("r1", "a", 11, 105.0, 106.0)]


def _reexecution_explained(faults: list[Fault]) -> bool:
    inv, executions, extra = _plain_effects(TWICE, EXPECTED, RUNS, faults, aftershock=2.0)
    assert (executions, extra) == (2, 1)
    return inv.ok


def test_a_step_run_twice_needs_a_fault_on_the_worker_that_ran_it_first() -> None:
    assert not _reexecution_explained([])
    assert _reexecution_explained([Fault("kill", 102, 102, 10)])
    assert not _reexecution_explained([Fault("kill", 102, 102, 11)]), "the wrong worker"
    assert _reexecution_explained([Fault("restart", 103, 104, None)])
    assert not _reexecution_explained([Fault("restart", 90, 95, None)]), "over before it began"
    assert _reexecution_explained([Fault("stop", 95, 99, 10)]), "its aftershock"


def test_a_step_never_run_is_reported() -> None:
    inv, _, _ = _plain_effects([], EXPECTED, RUNS, [], aftershock=2.0)
    assert inv.violations == ["run r1 step a: never executed"]


def test_transaction_effects_must_commit_exactly_once() -> None:
    assert _transactions(Counter({("r1", "t"): 1}), EXPECTED).ok
    assert not _transactions(Counter({("r1", "t"): 2}), EXPECTED).ok
    assert not _transactions(Counter(), EXPECTED).ok


def _event(hid: int, event: str, attempt: int, worker: str, position: int | None = None) -> Any:
    return (hid, "r1", event, position, attempt, worker, {})


def test_completions_must_come_from_the_latest_claim_and_tokens_be_unique() -> None:
    fine = [_event(1, "run_claimed", 1, "w1"), _event(2, "step_completed", 1, "w1", 0)]
    assert _leases(fine, []).ok
    fenced_out = [*fine, _event(3, "run_claimed", 2, "w2"), _event(4, "step_completed", 1, "w1", 1)]
    assert _leases(fenced_out, []).violations == [
        "run r1 position 1: completed by w1 while the latest claim was w2's"
    ]
    same_token = [_event(1, "run_claimed", 1, "w1"), _event(2, "run_claimed", 1, "w2")]
    assert not _leases(same_token, []).ok
    assert not _leases(fine, ["two live claims seen"]).ok
