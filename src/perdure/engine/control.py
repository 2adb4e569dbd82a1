"""Engine control flow that user code must not swallow.

These derive from ``BaseException``: a workflow's ``except Exception:`` around
a ``ctx`` call cannot catch them, so the engine always regains control.
"""

from __future__ import annotations


class Suspend(BaseException):
    """The task was handed back (a retry backoff); stop executing this run now."""


class Abandon(BaseException):
    """This worker lost the task (lease lost, run cancelled); stop without writing."""
