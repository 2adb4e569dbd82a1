"""The record of claims a worker may have lost: which step tasks a recovery gives back.

A recovery after a fault gives back every task claimed under the worker's id
that it does not hold. Parallel and graph steps an execution claimed are held
while their batch runs; these tests check that they stop being held, and that
another recovery is called for, when an outage cut their batch short, so
that they are given back instead of waiting out their lease.
"""

from __future__ import annotations

from perdure.engine.unheld import Unheld


def _held(unheld: Unheld, task_id: int, run_id: str) -> None:
    """Record ``task_id`` as a step task of ``run_id``, claimed now."""
    unheld.step_tasks[task_id] = (run_id, unheld._faults)


def test_a_batch_that_ends_without_a_fault_calls_for_no_recovery() -> None:
    unheld = Unheld()
    _held(unheld, 7, "run-a")
    unheld.drop([7])
    assert not unheld.step_tasks
    assert not unheld.suspect


def test_a_batch_that_ends_after_a_fault_calls_for_another_recovery() -> None:
    unheld = Unheld()
    _held(unheld, 8, "run-a")
    unheld.suspect = True  # a statement failed while the batch ran
    unheld.suspect = False  # a recovery ran, and left the held step out
    unheld.drop([8])
    assert unheld.suspect, "the step cut short must be given back by the next recovery"


def test_an_execution_that_lost_the_database_lets_go_of_its_runs_steps_only() -> None:
    unheld = Unheld()
    _held(unheld, 1, "run-a")
    _held(unheld, 2, "run-a")
    _held(unheld, 3, "run-b")
    unheld.disconnected("run-a")
    assert set(unheld.step_tasks) == {3}
    assert unheld.suspect
