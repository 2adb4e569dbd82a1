"""Engine control flow that user code must not swallow, and how an execution ends.

The stops derive from ``BaseException``: a workflow's ``except Exception:``
around a ``ctx`` call cannot catch them, so the engine always regains control.
``Outcome`` names what one execution of a claimed task ended as.
"""

from __future__ import annotations

import enum

from perdure import errors


class Outcome(enum.StrEnum):
    """What one execution of a claimed task ended as (the ``outcome`` of the
    observer's ``execution_finished``, of ``perdure_task_duration_seconds`` and of
    the ``perdure.run`` span). A ``str``: each member equals its value."""

    #: The run finished with its output.
    COMPLETED = "completed"
    #: The run failed (no compensation registered).
    FAILED = "failed"
    #: The run failed and its compensations ran.
    COMPENSATED = "compensated"
    #: The run failed and a compensation failed too.
    COMPENSATION_FAILED = "compensation_failed"
    #: The run's body raised and will be retried.
    RETRYING = "retrying"
    #: Handed back: a wait, a sleep, a step retry's backoff, a fan-out.
    SUSPENDED = "suspended"
    #: A step task checkpointed its step.
    STEP_TASK_COMPLETED = "step_task_completed"
    #: A graph's step task failed its step.
    STEP_TASK_FAILED = "step_task_failed"
    #: The workflow ended without reaching the step task's step.
    STEP_TASK_UNREACHABLE = "step_task_unreachable"
    #: A graph run's first task scheduled its first steps.
    SCHEDULED = "scheduled"
    #: The run stopped (cancelled, paused, ended) while its task was claimed: let go.
    SETTLED = "settled"
    #: The run was cancelled.
    CANCELLED = "cancelled"
    #: The run continued as new: it ended 'continued' and its successor was started.
    CONTINUED = "continued"
    #: A fenced write found another owner: this worker stopped without another write.
    LEASE_LOST = "lease_lost"
    #: Handed back at once, to be replayed again from fresher history.
    RELEASED = "released"
    #: The database went away mid-execution; the task was handed back.
    DISCONNECTED = "disconnected"
    #: A test's simulated crash: the lease lapses.
    CRASHED = "crashed"
    #: A database error mid-execution: the lease lapses.
    ERROR = "error"


class Suspend(BaseException):
    """The task was handed back (a retry backoff); stop executing this run now."""


class ContinueAsNew(BaseException):
    """``ctx.continue_as_new`` was called: end the run as 'continued' and start its
    successor with ``input_json`` (on the newest registered version when ``newest``).

    A ``BaseException``: a workflow's ``except Exception:`` cannot swallow it.
    """

    def __init__(self, input_json: str, newest: bool) -> None:
        """Continue with the encoded ``input_json``; ``newest``: on the newest version."""
        self.input_json = input_json
        self.newest = newest
        super().__init__("the run continues as new")


class ReplayEnd(BaseException):
    """A replay-only execution reached the end of the recorded history (or new work)."""


class Unwind(BaseException):
    """Stop executing the task without another write, carrying why as ``error``
    (a [`perdure.errors.LeaseLost`][perdure.errors.LeaseLost]: the lease is lost).

    A ``BaseException`` that carries the one lease-lost error through user code,
    so that a workflow's ``except Exception:`` cannot swallow it.
    """

    def __init__(self, error: errors.LeaseLost) -> None:
        """Stop because of ``error``."""
        self.error = error
        super().__init__(str(error))


class StaleHistory(BaseException):
    """The history this execution replayed from was stale: a step's position already
    held a final checkpoint, or a child run it was about to start already existed.
    The lease is still this worker's; the task is handed back and replayed from the
    real history."""


class Disconnected(BaseException):
    """The database could not be reached mid-execution; stop without another write.

    The store raises it for a lost connection, a server that is restarting or
    full, or no pooled connection in time. The work done so far is in the
    checkpoints; the worker hands the task back once the database answers
    again, and the run is replayed from there. It is not a failure of the
    step or workflow that was running: no attempt is counted.
    """
