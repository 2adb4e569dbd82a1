"""Typed statements over the named queries: the store's whole vocabulary.

:class:`Statements` turns a call such as ``run_insert(...)`` into a
:class:`Statement`: the rendered query, its parameters (always with the clock's
``now``) and a decoder for its rows. It does no I/O, so the same statement runs
on the worker's async pool, on a caller's async connection or on a caller's
sync connection (transactional start, ``ctx.transaction``) with one definition.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from psycopg import sql

from perdure.clock import Clock
from perdure.errors import ConfigurationError
from perdure.store import rows, versions
from perdure.store.batch_statements import BatchStatements
from perdure.store.manage_statements import ManageStatements
from perdure.store.parallel_statements import ParallelStatements
from perdure.store.queries import render
from perdure.store.queue_statements import QueueStatements
from perdure.store.reading_statements import ReadingStatements
from perdure.store.retention_statements import RetentionStatements
from perdure.store.rows import ClaimedTask, Fence, Queueing, StartResult
from perdure.store.schedule_statements import ScheduleStatements
from perdure.store.statement import Row, Statement
from perdure.store.statement import count as _count
from perdure.store.statement import first as _first
from perdure.store.statement import pair as _pair
from perdure.types import HistoryEvent, Run, Step, WorkerInfo, WorkflowInfo

T = TypeVar("T")

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,47}")


def validate_schema(name: object) -> str:
    """Return ``name`` if it is a usable schema name, else raise ConfigurationError.

    Lower-case identifiers only, at most 48 characters, so that the schema
    needs no quoting in psql and its notification channel name stays under
    PostgreSQL's 63-byte identifier limit.
    """
    # fullmatch: a '$' anchor would let a trailing newline through.
    if not isinstance(name, str) or not _SCHEMA_NAME.fullmatch(name):
        raise ConfigurationError(
            f"invalid schema name {name!r}: use 1-48 lower-case letters, digits or "
            "underscores, starting with a letter or underscore"
        )
    return name


class Statements(
    ParallelStatements,
    QueueStatements,
    ScheduleStatements,
    ManageStatements,
    ReadingStatements,
    RetentionStatements,
    BatchStatements,
):
    """Builds every statement perdure issues, for one schema and one clock."""

    def __init__(self, schema: str, clock: Clock) -> None:
        """Render the named queries for ``schema``; take times from ``clock``."""
        self.schema = validate_schema(schema)
        self.clock = clock
        self.channel = f"{schema}_wakeup"
        self._queries = render(sql.Identifier(schema).as_string(None))

    def _stmt(
        self, query_name: str, decode: Callable[[list[Row]], T], **params: Any
    ) -> Statement[T]:
        params["now"] = self.clock.sql_now()
        return Statement(query_name, self._queries[query_name], params, decode)

    # Runs -------------------------------------------------------------------

    def run_insert(
        self,
        *,
        run_id: str,
        workflow: str,
        version: int,
        queue: str | None,
        key: str | None,
        input_json: str,
        priority: int = 0,
        delay_seconds: float = 0.0,
        parent_run_id: str | None = None,
        timeout_seconds: float | None = None,
        queueing: Queueing | None = None,
        newest: bool = False,
        trace_context_json: str | None = None,
        lookup: bool = False,
    ) -> Statement[StartResult | None]:
        """Create a run with its first task, or find the run that has ``key``.

        ``queueing`` carries the partition key, dedup key and tags; with
        ``newest``, a newer version registered in the database replaces
        ``version`` (and its queue replaces ``queue``). ``trace_context_json``
        holds the starter's trace propagation headers. With ``lookup`` (a
        caller without the workflow's code; ``queue`` None, ``version`` 0 with
        ``newest``), the version and queue come from the registered workflows,
        and an unregistered one writes nothing and answers a StartResult whose
        ``unknown_workflow`` is set.
        """
        extra = queueing or Queueing()
        return self._stmt(
            "run_insert",
            _first(rows.start_result),
            run_id=run_id,
            workflow=workflow,
            version=version,
            queue=queue,
            key=key,
            input=input_json,
            priority=priority,
            delay_seconds=delay_seconds,
            parent_run_id=parent_run_id,
            timeout_seconds=timeout_seconds,
            newest=newest,
            partition_key=extra.partition_key,
            dedup_key=extra.dedup_key,
            tags=extra.tags_json,
            trace_context=trace_context_json,
            lookup=lookup,
        )

    def run_get(self, run_id: str) -> Statement[Run | None]:
        """One run by id."""
        return self._stmt("run_get", _first(rows.run), run_id=run_id)

    def run_get_by_key(self, key: str) -> Statement[Run | None]:
        """One run by its key."""
        return self._stmt("run_get_by_key", _first(rows.run), key=key)

    def run_status(self, run_id: str) -> Statement[Row | None]:
        """Status, output and error of one run."""
        return self._stmt("run_status", _first(dict), run_id=run_id)

    def run_list(
        self,
        filters: Mapping[str, Any],
        *,
        archived: bool = False,
        cursor: tuple[datetime, str] | None = None,
        limit: int = 50,
    ) -> Statement[list[Run]]:
        """Up to ``limit`` runs matching ``filters``, newest first, after ``cursor``.

        ``archived`` reads the archive tables instead of the live ones.
        ``cursor`` is the (created_at, id) of the last run of the previous
        page. Planned with its values every time (never prepared), so that
        the filters given pick their index.
        """
        stmt = self._stmt(
            "run_list_archived" if archived else "run_list",
            lambda found: [rows.run(r) for r in found],
            **filters,
            cursor_at=None if cursor is None else cursor[0],
            cursor_id=None if cursor is None else cursor[1],
            limit=limit,
        )
        return replace(stmt, prepare=False)

    def run_complete(self, fence: Fence, output_json: str) -> Statement[tuple[int, int]]:
        """Finish a run (fenced); (leased, changed): a cancelled run stays cancelled."""
        return self._stmt(
            "run_complete", _pair("leased", "changed"), output=output_json, **fence.params()
        )

    def run_fail(
        self, fence: Fence, error_json: str | None, status: str = "failed"
    ) -> Statement[tuple[int, int]]:
        """End a run that failed for good with ``status`` (fenced); (leased, changed)."""
        return self._stmt(
            "run_fail",
            _pair("leased", "changed"),
            error=error_json,
            status=status,
            **fence.params(),
        )

    def run_compensating(self, fence: Fence, error_json: str) -> Statement[tuple[int, int]]:
        """Mark a failed run as compensating (fenced); (leased, changed)."""
        return self._stmt(
            "run_compensating", _pair("leased", "changed"), error=error_json, **fence.params()
        )

    def run_expire(self, limit: int = 500) -> Statement[int]:
        """Cancel up to ``limit`` runs past their deadline; how many."""
        return self._stmt("run_expire", _count("cancelled"), limit=limit)

    def run_pause(self, run_id: str) -> Statement[Row | None]:
        """Pause an unfinished run; the row tells the previous status and if it changed."""
        return self._stmt("run_pause", _first(dict), run_id=run_id)

    def run_resume(self, run_id: str) -> Statement[Row | None]:
        """Resume a paused run or wake a sleeping one."""
        return self._stmt("run_resume", _first(dict), run_id=run_id)

    def run_lock(self, run_id: str) -> Statement[str | None]:
        """Lock a run's row in the current transaction; its status."""
        return self._stmt(
            "run_lock", lambda found: found[0]["status"] if found else None, run_id=run_id
        )

    def run_signal(self, run: str, name: str, payload_json: str, key: str | None) -> Statement[int]:
        """Send a signal to a run (by id or key) through send_signal; the signal's id."""
        return self._stmt(
            "run_signal", _count("id"), run=run, name=name, payload=payload_json, key=key
        )

    def signal_list(self, run_id: str) -> Statement[list[Row]]:
        """The signals a run received."""
        return self._stmt("signal_list", lambda found: found, run_id=run_id)

    def event_get(self, run_id: str, key: str) -> Statement[Row | None]:
        """The latest value of a run's event ``key``."""
        return self._stmt("event_get", _first(dict), run_id=run_id, key=key)

    def stream_read(self, run_id: str, key: str, after: int) -> Statement[list[Row]]:
        """Stream values after ``after``, with the run's status on every row."""
        return self._stmt("stream_read", lambda found: found, run_id=run_id, key=key, after=after)

    def run_retry(
        self, run_ids: Sequence[str], statuses: Sequence[str] | None = None
    ) -> Statement[list[str]]:
        """Queue failed or cancelled runs again (those in ``statuses``); the ids revived."""
        return self._stmt(
            "run_retry",
            lambda found: [str(r["id"]) for r in found],
            run_ids=list(run_ids),
            statuses=None if statuses is None else list(statuses),
        )

    def run_cancel(
        self, run_ids: Sequence[str], reason: str, statuses: Sequence[str] | None = None
    ) -> Statement[list[Row]]:
        """Cancel unfinished runs (those in ``statuses``); a row per run found:
        its ``id``, ``previous_status`` and whether it ``changed``."""
        return self._stmt(
            "run_cancel",
            lambda found: found,
            run_ids=list(run_ids),
            reason=reason,
            statuses=None if statuses is None else list(statuses),
        )

    # Tasks ------------------------------------------------------------------

    def task_claim(
        self,
        *,
        worker_id: str,
        queues: Sequence[str],
        names: Sequence[str],
        versions: Sequence[int],
        limit: int,
        lease_seconds: float,
        locked: Sequence[str] = (),
        throttled: bool = False,
    ) -> Statement[list[ClaimedTask]]:
        """Claim up to ``limit`` due tasks, within the limits of their queues.

        ``locked`` names the globally limited queues whose rows this
        transaction locked (:meth:`queue_lock`); any other queue with a global
        limit gets no task. With ``throttled``, ``queues`` are queues with a
        partition or rate limit, all locked, and the claim is
        ``task_claim_throttled``.
        """
        return self._stmt(
            "task_claim_throttled" if throttled else "task_claim",
            lambda found: [rows.claimed_task(r, worker_id) for r in found],
            worker_id=worker_id,
            queues=list(queues),
            names=list(names),
            versions=list(versions),
            limit=limit,
            lease_seconds=lease_seconds,
            locked=list(locked),
        )

    def task_next_due(
        self, worker_id: str, queues: Sequence[str], names: Sequence[str], versions: Sequence[int]
    ) -> Statement[float | None]:
        """Seconds until the next ready task this worker may claim is due, or None."""
        return self._stmt(
            "task_next_due",
            lambda found: found[0]["seconds"] if found else None,
            worker_id=worker_id,
            queues=list(queues),
            names=list(names),
            versions=list(versions),
        )

    def task_waiting_summary(self, queues: Sequence[str]) -> Statement[tuple[int, datetime | None]]:
        """(tasks waiting for a future time, the earliest of those times)."""
        return self._stmt(
            "task_waiting_summary",
            lambda found: (int(found[0]["waiting"]), found[0]["next_wake"]),
            queues=list(queues),
        )

    def task_heartbeat(
        self, worker_id: str, task_ids: Sequence[int], lease_seconds: float
    ) -> Statement[set[int]]:
        """Extend the leases of ``task_ids`` this worker holds; the ids it still holds."""
        return self._stmt(
            "task_heartbeat",
            lambda found: {int(r["id"]) for r in found},
            worker_id=worker_id,
            task_ids=list(task_ids),
            lease_seconds=lease_seconds,
        )

    def task_release(
        self,
        fence: Fence,
        *,
        delay_seconds: float,
        failed: bool,
        event: str,
        detail_json: str | None = None,
        paused: bool = False,
    ) -> Statement[int]:
        """Give a held task back, due after ``delay_seconds`` (fenced); paused if asked."""
        return self._stmt(
            "task_release",
            _count("changed"),
            delay_seconds=delay_seconds,
            failed=failed,
            paused=paused,
            event=event,
            detail=detail_json,
            **fence.params(),
        )

    def task_rescue(self, *, limit: int, max_lapses: int) -> Statement[tuple[int, int]]:
        """Revive tasks with expired leases; (revived, dead-lettered)."""
        return self._stmt(
            "task_rescue",
            lambda found: (int(found[0]["revived"]), int(found[0]["dead"])) if found else (0, 0),
            limit=limit,
            max_lapses=max_lapses,
        )

    def task_settle(self, fence: Fence) -> Statement[str | None]:
        """Let go of a held task whose run stopped running; the run's status."""
        return self._stmt(
            "task_settle",
            lambda found: found[0]["run_status"] if found else None,
            **fence.params(),
        )

    def task_lock_fenced(self, fence: Fence) -> Statement[bool]:
        """Lock a held task row for a transaction step; False if the lease is gone."""
        return self._stmt("task_lock_fenced", lambda found: bool(found), **fence.params())

    # Steps and history -------------------------------------------------------

    def step_list(self, run_id: str) -> Statement[list[Step]]:
        """The checkpoints of a run in position order."""
        return self._stmt("step_list", lambda found: [rows.step(r) for r in found], run_id=run_id)

    def step_list_claimed_now(self, worker_id: str) -> Statement[dict[int, list[Step]]]:
        """The checkpoints of the tasks ``worker_id`` claimed in this transaction, by task id."""

        def decode(found: list[Row]) -> dict[int, list[Step]]:
            by_task: dict[int, list[Step]] = {}
            for r in found:
                by_task.setdefault(int(r["task_id"]), []).append(rows.step(r))
            return by_task

        return self._stmt("step_list_claimed_now", decode, worker_id=worker_id)

    def step_list_before(self, run_id: str, before: int, position: int) -> Statement[list[Step]]:
        """The checkpoints before position ``before``, and the one at ``position``."""
        return self._stmt(
            "step_list_before",
            lambda found: [rows.step(r) for r in found],
            run_id=run_id,
            before=before,
            position=position,
        )

    def step_checkpoint(
        self,
        fence: Fence,
        *,
        lease_seconds: float,
        position: int,
        name: str,
        kind: str,
        status: str,
        attempts: int,
        output_json: str | None,
        error_json: str | None,
        started_at: datetime,
        event: str,
        detail_json: str | None = None,
        event_key: str | None = None,
        stream_seq: int | None = None,
        stream_closed: bool = False,
    ) -> Statement[tuple[int, int, str | None]]:
        """Record a step outcome and extend the lease; (leased, written, run status).

        For kind 'event' the output is also published as event ``event_key``;
        for kind 'stream' it is appended to stream ``event_key`` at ``stream_seq``.
        """
        return self._stmt(
            "step_checkpoint",
            lambda found: (
                int(found[0]["leased"]),
                int(found[0]["written"]),
                found[0]["run_status"],
            ),
            event_key=event_key,
            stream_seq=stream_seq,
            stream_closed=stream_closed,
            lease_seconds=lease_seconds,
            position=position,
            name=name,
            kind=kind,
            status=status,
            attempts=attempts,
            output=output_json,
            error=error_json,
            started_at=started_at,
            event=event,
            detail=detail_json,
            **fence.params(),
        )

    def step_wait(
        self,
        fence: Fence,
        *,
        position: int,
        name: str,
        kind: str,
        waiting_for_json: str,
        wake_at: datetime | None = None,
        seconds: float | None = None,
        wait_signal: str | None = None,
    ) -> Statement[tuple[int, datetime | None]]:
        """Park the run at a durable wait until ``wake_at`` (or now + ``seconds``)."""
        return self._stmt(
            "step_wait",
            lambda found: (int(found[0]["leased"]), found[0]["wake_at"]),
            wait_signal=wait_signal,
            position=position,
            name=name,
            kind=kind,
            waiting_for=waiting_for_json,
            wake_at=wake_at,
            seconds=seconds,
            **fence.params(),
        )

    def signal_take(
        self, fence: Fence, *, position: int, name: str, step_name: str
    ) -> Statement[Row]:
        """Consume the oldest pending signal ``name`` into the wait at ``position``."""
        return self._stmt(
            "signal_take",
            lambda found: found[0],
            position=position,
            name=name,
            step_name=step_name,
            **fence.params(),
        )

    def history_list(self, run_id: str) -> Statement[list[HistoryEvent]]:
        """A run's history, oldest first."""
        return self._stmt(
            "history_list", lambda found: [rows.history(r) for r in found], run_id=run_id
        )

    # Workers and the workflow registry ---------------------------------------

    def worker_register(
        self,
        *,
        worker_id: str,
        host: str,
        pid: int,
        queues: Sequence[str],
        workflows: Sequence[str],
        concurrency: int,
    ) -> Statement[None]:
        """Announce a worker, with the schema version and release of its code."""
        return self._stmt(
            "worker_register",
            lambda found: None,
            worker_id=worker_id,
            host=host,
            pid=pid,
            queues=list(queues),
            workflows=list(workflows),
            concurrency=concurrency,
            schema_version=versions.code_schema_version(),
            release=versions.release(),
        )

    def worker_stop(self, worker_id: str) -> Statement[None]:
        """Mark a worker stopped."""
        return self._stmt("worker_stop", lambda found: None, worker_id=worker_id)

    def worker_mark_lost(self, stale_seconds: float) -> Statement[None]:
        """Mark workers with stale heartbeats as lost."""
        return self._stmt("worker_mark_lost", lambda found: None, stale_seconds=stale_seconds)

    def worker_list(self, limit: int = 100) -> Statement[list[WorkerInfo]]:
        """Workers, most recently seen first."""
        return self._stmt("worker_list", lambda found: [rows.worker(r) for r in found], limit=limit)

    def workflow_upsert(
        self,
        *,
        name: str,
        version: int,
        queue: str,
        kind: str,
        definition_json: str,
        fingerprint: str | None,
    ) -> Statement[None]:
        """Record a workflow definition in the registry."""
        return self._stmt(
            "workflow_upsert",
            lambda found: None,
            name=name,
            version=version,
            queue=queue,
            kind=kind,
            definition=definition_json,
            fingerprint=fingerprint,
        )

    def workflow_lookup(self, name: str, version: int | None) -> Statement[Row | None]:
        """A registered workflow version (the newest when ``version`` is None)."""
        return self._stmt("workflow_lookup", _first(dict), name=name, version=version)

    def workflow_list(self, stale_seconds: float = 60.0) -> Statement[list[WorkflowInfo]]:
        """Every registered workflow version with run counts and its live workers.

        A worker is live while its status is running and its last heartbeat
        is at most ``stale_seconds`` old.
        """
        return self._stmt(
            "workflow_list",
            lambda found: [rows.workflow(r) for r in found],
            stale_seconds=stale_seconds,
        )
