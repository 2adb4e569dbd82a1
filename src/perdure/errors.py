"""The errors perdure raises, all under one root, [`PerdureError`][perdure.errors.PerdureError].

Each class's docstring is its default message. Errors carry structured fields
(``run_id``, ``position``, ...) so callers can act on them without parsing text.
Engine control flow that user code must never swallow derives from
``BaseException`` and lives in ``perdure.engine.control``, not here.
"""

from __future__ import annotations

from typing import Any


class PerdureError(Exception):
    """A perdure operation failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigurationError(PerdureError, ValueError):
    """perdure is configured wrongly (database URL, schema name or option)."""


class SchemaError(PerdureError):
    """The database schema is missing, too new for this code, or cannot be migrated."""


class UnknownWorkflow(PerdureError, LookupError):
    """No workflow with this name (and version) is registered."""

    def __init__(self, name: str, version: int | None = None) -> None:
        self.name = name
        self.version = version
        where = f"{name!r}" if version is None else f"{name!r} version {version}"
        super().__init__(
            f"unknown workflow {where}: define it with @app.workflow({name!r}) in this App, "
            "or start a worker (or call app.register()) that has it"
        )


class WorkflowDefinitionError(PerdureError, ValueError):
    """A workflow definition is invalid."""


class SerializationError(PerdureError, TypeError):
    """A value is not JSON-serializable or is over the payload size limit."""

    def __init__(self, what: str, reason: str) -> None:
        self.what = what
        self.reason = reason
        super().__init__(f"{what} is not a valid perdure payload: {reason}")


class InvalidPayload(SerializationError):
    """A value does not match the type its workflow or step declares.

    Raised by ``app.start`` (and ``start_child``) when an input does not
    validate against the workflow function's parameter annotation (a Pydantic
    model, a dataclass, ``list[Model]``...), before anything is written; and
    when a step's output cannot be rebuilt as its return annotation, before
    its checkpoint is written. ``errors`` lists what was wrong, one line each.
    """

    def __init__(self, what: str, errors: list[str]) -> None:
        self.errors = errors
        shown = "; ".join(errors[:5]) + (f"; and {len(errors) - 5} more" if len(errors) > 5 else "")
        super().__init__(what, f"it does not match its declared type: {shown}")


class RunNotFound(PerdureError, LookupError):
    """No run with this id or key exists."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        super().__init__(f"no run with id or key {ref!r}")


class RunKeyConflict(PerdureError):
    """A run with this key already exists for a different workflow."""

    def __init__(self, key: str, existing_workflow: str, requested_workflow: str) -> None:
        self.key = key
        self.existing_workflow = existing_workflow
        self.requested_workflow = requested_workflow
        super().__init__(
            f"key {key!r} already belongs to a run of workflow {existing_workflow!r}; "
            f"it cannot start workflow {requested_workflow!r}"
        )


class InvalidRunState(PerdureError):
    """The run is not in a state that allows this operation."""

    def __init__(self, run_id: str, status: str, operation: str) -> None:
        self.run_id = run_id
        self.status = status
        self.operation = operation
        super().__init__(f"cannot {operation} run {run_id}: it is {status}")


class UnknownStep(PerdureError, LookupError):
    """A run has no step of this name to fork from."""

    def __init__(self, run_id: str, step: str | int, known: list[str]) -> None:
        self.run_id = run_id
        self.step = step
        self.known = known
        listed = ", ".join(repr(name) for name in known[:20]) or "none"
        more = f" and {len(known) - 20} more" if len(known) > 20 else ""
        super().__init__(
            f"run {run_id} has no step {step!r} to fork from; its steps are: {listed}{more}"
        )


class LeaseLost(PerdureError):
    """This worker no longer holds the lease on the task; its write was refused."""

    def __init__(self, task_id: int, worker_id: str, attempt: int) -> None:
        self.task_id = task_id
        self.worker_id = worker_id
        self.attempt = attempt
        super().__init__(
            f"worker {worker_id} lost its lease on task {task_id} (attempt {attempt}); "
            "another worker owns it now, so this worker stops executing it"
        )


class LeaseExpired(PerdureError):
    """The run was reaped for good: its lease lapsed ``max_lapses`` times.

    (The name stays: it is the error type stored on runs reaped for good.)

    Its workers died or stalled while running it, as many times as its
    workflow allows. The run is replayed from its checkpoints without
    running anything new, and this error is raised where it would have run
    the first step without a final checkpoint (``position``, ``step``), so
    that the compensations registered so far run and the run ends with the
    recorded ``error``.
    """

    def __init__(self, run_id: str, error: dict[str, Any], position: int, step: str) -> None:
        self.run_id = run_id
        self.error = error
        self.position = position
        self.step = step
        message = error.get("message", "its lease lapsed too many times")
        super().__init__(
            f"run {run_id}: {message}; stopped before {step!r} at position {position}, "
            "which does not run again: the run compensates instead"
        )


class NonDeterminismError(PerdureError):
    """Replayed workflow code asked for a different step than the history recorded."""

    def __init__(
        self, run_id: str, workflow: str, version: int, position: int, recorded: str, requested: str
    ) -> None:
        self.run_id = run_id
        self.workflow = workflow
        self.version = version
        self.position = position
        self.recorded = recorded
        self.requested = requested
        super().__init__(
            f"run {run_id} of workflow {workflow!r} version {version} is not deterministic: "
            f"at position {position} the history recorded step {recorded!r} but the code "
            f"asked for {requested!r}; the recorded history was left unchanged. Deploy code "
            "that asks for the same steps in the same order, or start a new workflow version"
        )


class PermanentError(PerdureError):
    """A failure that retrying cannot fix; raise it from a step or workflow to fail at once."""


class UndecodablePayload(PermanentError):
    """A run's stored data cannot be decoded: the run fails alone, at once.

    ``field`` names what could not be read (the run's input, the checkpoint
    of a step, the payload of a signal) and ``reason`` why (an integer with
    5000 digits, JSON nested too deeply). Only a row written outside
    perdure's checks (by hand, an older version, a bug) can hold one; no
    retry can read it, and no other run pays for it.
    """

    def __init__(self, run_id: str, field: str, reason: str) -> None:
        self.run_id = run_id
        self.field = field
        self.reason = reason
        super().__init__(
            f"run {run_id}: {field} cannot be decoded ({reason}); the run fails without "
            "running: correct or delete the stored value, then retry the run"
        )


class StepFailed(PerdureError):
    """A step failed permanently (its error was not retryable or its attempts ran out)."""

    def __init__(
        self,
        step: str,
        error_type: str,
        message: str,
        attempts: int,
        traceback: str | None = None,
    ) -> None:
        self.step = step
        self.error_type = error_type
        self.error_message = message
        self.attempts = attempts
        self.traceback = traceback
        super().__init__(
            f"step {step!r} failed after {attempts} attempt(s): {error_type}: {message}"
        )


class ChildFailed(StepFailed):
    """A child workflow awaited with ``child.result()`` did not complete.

    ``status`` is the child's final status (failed, cancelled, compensated or
    compensation_failed) and ``child_run_id`` its id. A subclass of
    StepFailed: uncaught, it fails the parent like a failed step.
    """

    def __init__(
        self, step: str, child_run_id: str, status: str, error: dict[str, Any] | None
    ) -> None:
        self.child_run_id = child_run_id
        self.status = status
        error = error or {}
        super().__init__(
            step,
            "ChildFailed",
            f"child run {child_run_id} ended {status}: "
            f"{error.get('type', 'Error')}: {error.get('message', '')}",
            1,
        )


class RunFailed(PerdureError):
    """The run failed; ``error`` holds the recorded error, with its traceback.

    ``status`` tells a plain failure ('failed') from one whose compensations
    ran ('compensated') or failed in turn ('compensation_failed').
    """

    def __init__(self, run_id: str, error: dict[str, Any] | None, status: str = "failed") -> None:
        self.run_id = run_id
        self.error = error or {}
        self.status = status
        kind = self.error.get("type", "Error")
        message = self.error.get("message", "")
        how = "failed" if status == "failed" else f"failed ({status})"
        super().__init__(f"run {run_id} {how}: {kind}: {message}")


class RunCancelled(PerdureError):
    """The run was cancelled before it finished."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id} was cancelled")


class ResultTimeout(PerdureError, TimeoutError):
    """The run did not finish within the time the caller was willing to wait."""

    def __init__(self, run_id: str, timeout: float, status: str) -> None:
        self.run_id = run_id
        self.timeout = timeout
        self.status = status
        super().__init__(f"run {run_id} did not finish within {timeout:g} s (it is {status})")


class BlockingCallInEventLoop(PerdureError, RuntimeError):
    """A blocking perdure call was made on a thread whose event loop is running.

    The call would hold that loop, and every task on it (an async workflow's
    worker, a web server's requests), until it returned: it is refused at
    once instead. ``call`` is what was called (``run.result()``), ``use`` the
    async form to await in its place (``await run.result_async()``).
    """

    def __init__(self, call: str, use: str) -> None:
        self.call = call
        self.use = use
        super().__init__(
            f"{call} blocks, and it was called on a thread whose event loop is running "
            f"(it would freeze every task of that loop until it returned): use {use} instead"
        )


class DatabaseUnavailable(PerdureError, ConnectionError):
    """perdure could not reach the PostgreSQL server."""


class DatabaseError(PerdureError):
    """PostgreSQL refused a call's statement, and it was neither the database's fault
    (``DatabaseUnavailable``) nor one of perdure's own checks.

    ``sqlstate`` is the server's error code; the driver's exception is the
    ``__cause__``. A caller's own connection in a failed transaction
    (``conn=``) is the usual case.
    """

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        self.sqlstate = sqlstate
        super().__init__(message)


class PermissionDenied(DatabaseError, PermissionError):
    """The database role of the call lacks a privilege it needs (SQLSTATE 42501).

    A client role needs ``perdure migrate --grant-client ROLE``, a read-only
    one ``--grant-reader ROLE``, a worker's role ``--grant-to ROLE``: see
    docs/security.md.
    """


class Cancelled(PerdureError):
    """The run was cancelled: raised into workflow code at its next ctx call.

    Catch it to clean up (outside perdure: the run takes no further step); it
    is raised again at every later ctx call, and the run stays cancelled.
    """

    def __init__(self, run_id: str, reason: str | None = None) -> None:
        self.run_id = run_id
        self.reason = reason
        super().__init__(f"run {run_id} was cancelled" + (f": {reason}" if reason else ""))


class SignalTimeout(PerdureError, TimeoutError):
    """A wait for a signal reached its timeout before the signal arrived."""

    def __init__(self, run_id: str, name: str, timeout: float | None) -> None:
        self.run_id = run_id
        self.name = name
        self.timeout = timeout
        super().__init__(
            f"run {run_id} waited {timeout:g} s for signal {name!r} in vain"
            if timeout is not None
            else f"run {run_id} waited for signal {name!r} in vain"
        )


class EventWaitTimeout(PerdureError, TimeoutError):
    """A ``ctx.wait_for_event`` reached its timeout before a matching event was emitted."""

    def __init__(self, run_id: str, name: str, timeout: float | None) -> None:
        self.run_id = run_id
        self.name = name
        self.timeout = timeout
        super().__init__(
            f"run {run_id} waited {timeout:g} s for event {name!r} in vain"
            if timeout is not None
            else f"run {run_id} waited for event {name!r} in vain"
        )


class EventTimeout(PerdureError, TimeoutError):
    """A caller waited for a run's event and the run did not publish it in time."""

    def __init__(self, run_id: str, key: str, timeout: float) -> None:
        self.run_id = run_id
        self.key = key
        self.timeout = timeout
        super().__init__(f"run {run_id} did not publish event {key!r} within {timeout:g} s")


class StepTimeout(PerdureError, TimeoutError):
    """A step attempt ran longer than its timeout."""

    def __init__(self, step: str, timeout: float) -> None:
        self.step = step
        self.timeout = timeout
        super().__init__(f"step {step!r} did not finish within {timeout:g} s")


class InvalidSchedule(ConfigurationError):
    """A schedule's definition is invalid: its cron expression, time zone, catch-up policy or name.

    ``schedule`` names the schedule (None when it has no name yet), ``field``
    the argument at fault and ``value`` what was given.
    """

    def __init__(self, schedule: str | None, field: str, value: object, reason: str) -> None:
        self.schedule = schedule
        self.field = field
        self.value = value
        where = f"schedule {schedule!r}" if schedule else "schedule"
        super().__init__(f"{where}: invalid {field} {value!r}: {reason}")


class ScheduleNotFound(PerdureError, LookupError):
    """No schedule with this name exists."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no schedule named {name!r} (perdure schedules list shows them)")


class MaintenanceBusy(PerdureError):
    """Another worker or `perdure prune` is running a maintenance pass on this schema now."""


class KeyUnavailable(PerdureError, LookupError):
    """A payload was encrypted with a key this process does not hold.

    A codec's ``decode`` raises it; perdure shows the payload as
    ``encrypted (key <id>)`` and a worker fails only the run that needs it,
    with ``UndecodablePayload``. Keys come from ``PERDURE_ENCRYPTION_KEYS``,
    ``PERDURE_ENCRYPTION_KEY_FILE`` or ``App(codec=...)``, never from the database.
    """

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(
            f"the payload is encrypted with key {key!r}, which this process does not hold: "
            "add it to PERDURE_ENCRYPTION_KEYS (or PERDURE_ENCRYPTION_KEY_FILE)"
        )


class UpdateRejected(PerdureError):
    """An update's validator refused it: nothing was recorded in the run."""

    def __init__(self, run_id: str, update_id: str, name: str, reason: str) -> None:
        self.run_id = run_id
        self.update_id = update_id
        self.name = name
        self.reason = reason
        super().__init__(f"run {run_id} refused update {name!r} ({update_id}): {reason}")


class UpdateFailed(PerdureError):
    """An accepted update's handler raised: the reply is its error (the run goes on)."""

    def __init__(self, run_id: str, update_id: str, name: str, error: dict[str, object]) -> None:
        self.run_id = run_id
        self.update_id = update_id
        self.name = name
        self.error = error
        super().__init__(
            f"update {name!r} ({update_id}) of run {run_id} failed: "
            f"{error.get('type', 'Error')}: {error.get('message', '')}"
        )


class UpdateTimeout(PerdureError, TimeoutError):
    """A caller waited for an update's reply and it did not come in time.

    The request stays recorded: calling again with the same update id waits
    for the same reply.
    """

    def __init__(self, run_id: str, update_id: str, name: str, timeout: float) -> None:
        self.run_id = run_id
        self.update_id = update_id
        self.name = name
        self.timeout = timeout
        super().__init__(
            f"update {name!r} ({update_id}) of run {run_id} got no reply within {timeout:g} s"
        )


class ObjectStoreError(PerdureError):
    """An offloaded payload cannot be written to or read from its object store.

    On write, nothing references the object (it is uploaded before its row).
    On read, a missing object or one whose sha256 differs from its reference
    reads as undecodable: the run that needs it fails alone with
    ``UndecodablePayload``, and listings show the reason.
    """
