"""Engine control flow that user code must not swallow.

These derive from ``BaseException``: a workflow's ``except Exception:`` around
a ``ctx`` call cannot catch them, so the engine always regains control.
"""

from __future__ import annotations

from perdure import errors


class Suspend(BaseException):
    """The task was handed back (a retry backoff); stop executing this run now."""


class ReplayEnd(BaseException):
    """A replay-only execution reached the end of the recorded history (or new work)."""


class LeaseLost(BaseException):
    """This worker lost its lease on the task: stop executing it without another write.

    The control-flow form of [`perdure.errors.LeaseLost`][perdure.errors.LeaseLost] (which it
    carries as ``error``): a ``BaseException``, so that a workflow's
    ``except Exception:`` cannot swallow it.
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
