"""The statements on runs: ``sql/queries/runs.sql``."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from perdure.store import codec, rows
from perdure.store.rows import Fence, Fenced, Queueing, StartResult
from perdure.store.statement import Namespace, Row, Statement, all_rows, count, first
from perdure.store.writes import Completion, Start
from perdure.types import Run, RunRef, RunStatus

#: A run reference send_signal takes for an id (else a key): the canonical uuid form.
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)


def _counts(found: list[Row]) -> dict[str, int]:
    return {r["status"]: int(r["n"]) for r in found}


def _with_record(r: Row) -> Row:
    """The row, its ``error`` a record even when it could not be opened."""
    found = dict(r)
    found["error"] = codec.record(found.get("error"))
    return found


def _ref(r: Row) -> RunRef:
    return RunRef(
        id=str(r["id"]),
        workflow=r["workflow"],
        version=r["version"],
        status=RunStatus(r["status"]),
        key=r["key"],
        created_at=r["created_at"],
    )


def _start_results(size: int, found: list[Row]) -> list[StartResult | None]:
    """The answers of ``size`` starts by their place (an item with no row: None)."""
    answers: list[StartResult | None] = [None] * size
    for r in found:
        answers[int(r["n"]) - 1] = rows.start_result(r)
    return answers


class RunStatements(Namespace):
    """The statements on runs: ``statements.runs``."""

    def insert(self, starts: Sequence[Start]) -> Statement[list[StartResult | None]]:
        """Create runs with their first tasks, or find the runs that have their keys, in
        one statement; one answer per start, in order.

        The starts share their ``shape`` (all
        but the id, key and input); a single start is a list of one. An answer
        is None when the start raced a concurrent start of its key: start it
        again. A workflow registered nowhere (``lookup``) writes nothing and
        answers StartResults whose ``unknown_workflow`` is set.
        """
        first_start = starts[0]
        if any(start.shape != first_start.shape for start in starts):
            raise ValueError("starts written in one statement must share their shape")
        extra = first_start.queueing
        return self._build(
            "run_insert",
            functools.partial(_start_results, len(starts)),
            run_ids=[start.run_id for start in starts],
            workflow=first_start.workflow,
            version=first_start.version,
            queue=first_start.queue,
            keys=[start.key for start in starts],
            inputs=self._build.seal_each(start.input_json for start in starts),
            priority=first_start.priority,
            delay_seconds=first_start.delay_seconds,
            parent_run_id=first_start.parent_run_id,
            timeout_seconds=first_start.timeout_seconds,
            newest=first_start.newest,
            partition_key=extra.partition_key,
            dedup_key=extra.dedup_key,
            tags=extra.tags_json,
            trace_context=first_start.trace_context_json,
            lookup=first_start.lookup,
        )

    def get(self, run_id: str) -> Statement[Run | None]:
        """One run by id."""
        return self._build("run_get", first(rows.run), run_id=run_id)

    def get_by_key(self, key: str) -> Statement[Run | None]:
        """One run by its key."""
        return self._build("run_get_by_key", first(rows.run), key=key)

    def status(self, run_id: str) -> Statement[Row | None]:
        """Status, output and error of one run."""
        return self._build("run_status", first(_with_record), run_id=run_id)

    def complete(self, completions: Sequence[Completion]) -> Statement[list[Fenced]]:
        """Finish runs (each fenced on its task), each with its last step's checkpoint
        when it has one, in one statement; one (leased, written, changed) per
        completion, in order: a cancelled run stays cancelled (not changed), and a
        last checkpoint at a position already final (not written) leaves the task held.
        """
        seal = self._build.seal
        rows: list[dict[str, Any]] = []
        for c in completions:
            row: dict[str, Any] = {
                "task_id": c.fence.task_id,
                "worker_id": c.fence.worker_id,
                "attempt": c.fence.attempt,
                "output": seal(c.output_json),
            }
            last = c.last
            if last is not None:
                row["position"] = last.position
                row["name"] = last.name
                row["kind"] = last.kind
                row["step_attempts"] = last.attempts
                row["step_output"] = seal(last.output_json)
                row["started_at"] = last.started_at.isoformat()
            rows.append(row)
        return self._build("run_complete", Fenced.decode_each, rows=json.dumps(rows))

    def fail(
        self, fence: Fence, error_json: str | None, status: str = "failed", any_state: bool = False
    ) -> Statement[Fenced]:
        """End a run that failed for good with ``status`` (fenced); (leased, changed).

        ``any_state``: fail it even while it waits (from a step task), as a
        run whose stored data cannot be read must.
        """
        return self._build(
            "run_fail",
            Fenced.decode,
            error=self._build.seal(error_json),
            status=status,
            any_state=any_state,
            **fence.params(),
        )

    def continue_as_new(
        self, fence: Fence, new_id: str, input_json: str, newest: bool
    ) -> Statement[Fenced]:
        """End the run as 'continued' and start its successor ``new_id`` with ``input_json``
        (the newest registered version when ``newest``), fenced, in one statement;
        (leased, changed): not changed when the run had stopped (cancelled)."""
        return self._build(
            "run_continue",
            Fenced.decode,
            new_id=new_id,
            input=self._build.seal(input_json),
            newest=newest,
            **fence.params(),
        )

    def compensating(self, fence: Fence, error_json: str) -> Statement[Fenced]:
        """Mark a failed run as compensating (fenced); (leased, changed)."""
        return self._build(
            "run_compensating", Fenced.decode, error=self._build.seal(error_json), **fence.params()
        )

    def expire(self, limit: int = 500) -> Statement[int]:
        """Cancel up to ``limit`` runs past their deadline; how many."""
        return self._build("run_expire", count("cancelled"), limit=limit)

    def pause(self, run_id: str) -> Statement[Row | None]:
        """Pause an unfinished run; the row tells the previous status and if it changed."""
        return self._build("run_pause", first(dict), run_id=run_id)

    def resume(self, run_id: str) -> Statement[Row | None]:
        """Resume a paused run or wake a sleeping one."""
        return self._build("run_resume", first(dict), run_id=run_id)

    def lock(self, run_id: str) -> Statement[str | None]:
        """Lock a run's row in the current transaction; its status."""
        return self._build(
            "run_lock", lambda found: found[0]["status"] if found else None, run_id=run_id
        )

    def signal(self, run: str, name: str, payload_json: str, key: str | None) -> Statement[int]:
        """Send a signal to a run (by id or key) through send_signal; the signal's id."""
        return self._build(
            "run_signal",
            count("id"),
            run=run,
            name=name,
            payload=self._build.seal(payload_json),
            key=key,
        )

    def signal_many(
        self,
        runs: Sequence[str],
        names: Sequence[str],
        payloads_json: Sequence[str],
        keys: Sequence[str | None],
    ) -> Statement[list[int]]:
        """Send one signal per item (``runs``, ``names``, ``payloads_json`` and ``keys`` in
        step) through send_signal, in one statement; the signals' ids, in item order."""
        return self._build(
            "run_signal_many",
            lambda found: [int(r["id"]) for r in sorted(found, key=lambda r: int(r["item"]))],
            runs=list(runs),
            ids=[run if _UUID.fullmatch(run) else None for run in runs],
            names=list(names),
            payloads=self._build.seal_each(payloads_json),
            keys=list(keys),
        )

    def retry(
        self, run_ids: Sequence[str], statuses: Sequence[str] | None = None
    ) -> Statement[list[str]]:
        """Queue failed or cancelled runs again (those in ``statuses``); the ids queued again."""
        return self._build(
            "run_retry",
            lambda found: [str(r["id"]) for r in found],
            run_ids=list(run_ids),
            statuses=None if statuses is None else list(statuses),
        )

    def cancel(
        self, run_ids: Sequence[str], reason: str, statuses: Sequence[str] | None = None
    ) -> Statement[list[Row]]:
        """Cancel unfinished runs (those in ``statuses``); a row per run found:
        its ``id``, ``previous_status`` and whether it ``changed``."""
        return self._build(
            "run_cancel",
            all_rows,
            run_ids=list(run_ids),
            reason=reason,
            statuses=None if statuses is None else list(statuses),
        )

    def halt_steps(self, run_id: str, task_id: int) -> Statement[int]:
        """Cancel graph steps not started; how many others are still being executed."""
        return self._build("run_halt_steps", count("running"), run_id=run_id, task_id=task_id)

    def mark_compensating(self, run_id: str, error_json: str) -> Statement[None]:
        """Mark a graph run compensating, keeping ``error_json`` as its error."""
        return self._build(
            "run_mark_compensating",
            lambda found: None,
            run_id=run_id,
            error=self._build.seal(error_json),
        )

    def progress(self, run_id: str) -> Statement[None]:
        """A graph run that was queued or waiting is running again."""
        return self._build("run_progress", lambda found: None, run_id=run_id)

    def finish(
        self,
        run_id: str,
        status: str,
        *,
        output_json: str | None = None,
        error_json: str | None = None,
    ) -> Statement[int]:
        """End a graph run with ``status``; 1 if this call ended it."""
        return self._build(
            "run_finish",
            count("changed"),
            run_id=run_id,
            status=status,
            output=self._build.seal(output_json),
            error=self._build.seal(error_json),
        )

    def child_status(self, run_id: str) -> Statement[Row | None]:
        """A child run's status, output and error, its row locked (shared)."""
        return self._build("run_child_status", first(_with_record), run_id=run_id)

    def debounce(
        self,
        *,
        workflow: str,
        queue: str,
        key: str | None,
        input_json: str,
        queueing: Queueing,
    ) -> Statement[StartResult | None]:
        """Give the not yet started run with ``key`` (or dedup key) the latest input."""
        return self._build(
            "run_debounce",
            first(rows.start_result),
            workflow=workflow,
            queue=queue,
            key=key,
            dedup_key=queueing.dedup_key,
            input=self._build.seal(input_json),
            tags=queueing.tags_json,
        )

    def count_by_status(
        self, filters: Mapping[str, Any], statuses: Sequence[str], cap: int
    ) -> Statement[dict[str, int]]:
        """How many runs of each status match ``filters``, each count stopping at ``cap``.

        ``filters`` are the criteria [`perdure.RunFilter.params`][perdure.RunFilter.params] gives.
        Planned with its values (never prepared), as ``list`` is.
        """
        stmt = self._build(
            "run_count_by_status", _counts, statuses=list(statuses), cap=cap, **filters
        )
        return replace(stmt, prepare=False)

    def count_recent(self, filters: Mapping[str, Any], cap: int) -> Statement[dict[str, int]]:
        """How many of the newest ``cap`` runs matching ``filters`` are in each status.

        ``filters`` as for ``count_by_status``.
        """
        stmt = self._build("run_count_recent", _counts, cap=cap, **filters)
        return replace(stmt, prepare=False)

    def activity(self, since: datetime, bucket_seconds: float) -> Statement[list[Row]]:
        """Runs created since ``since`` per (bucket, status): rows of bucket, status, n."""
        return self._build("run_activity", all_rows, since=since, bucket_seconds=bucket_seconds)

    def select(
        self,
        *,
        statuses: Sequence[str],
        filters: dict[str, Any],
        after: RunRef | None,
        limit: int,
    ) -> Statement[list[RunRef]]:
        """A page of runs in ``statuses`` matching ``filters``, newest first, after ``after``.

        ``filters`` holds the criteria of ``list`` but the status (each
        None to skip it; ``ids`` the given runs), as
        [`perdure.RunFilter.params`][perdure.RunFilter.params] gives them.
        """
        after_at: datetime | None = None if after is None else after.created_at
        return self._build(
            "run_select",
            lambda found: [_ref(r) for r in found],
            statuses=list(statuses),
            after_at=after_at,
            after_id=None if after is None else after.id,
            limit=limit,
            **filters,
        )

    def copy(
        self,
        *,
        source_id: str,
        run_id: str,
        key: str | None,
        priority: int,
        fork_step: str | None = None,
        positions: Sequence[int] = (),
    ) -> Statement[Row | None]:
        """Start run ``run_id`` from run ``source_id``: a restart, or with ``fork_step`` a
        fork that copies the checkpoints at ``positions``. The row has ``id``,
        ``workflow``, ``created`` (False: ``key`` named an existing run) and ``copied``."""
        return self._build(
            "run_copy",
            first(dict),
            source_id=source_id,
            run_id=run_id,
            key=key,
            priority=priority,
            fork_step=fork_step,
            positions=list(positions),
        )

    def prune(
        self, before: datetime, *, limit: int, archive: bool
    ) -> Statement[tuple[int, list[str]]]:
        """Delete (or archive) one batch of runs finished before ``before``; how many, and
        the references of the offloaded payloads of those deleted (not archived)."""
        return self._build(
            "run_prune",
            _pruned,
            before=before,
            limit=limit,
            archive=archive,
            offloaded=self._build.payloads.offload is not None,
        )

    def prune_count(self, before: datetime) -> Statement[int]:
        """How many runs ``prune`` would take in all."""
        return self._build("run_prune_count", count("prunable"), before=before)

    def prune_cutoff(self, seconds: float) -> Statement[datetime]:
        """The time ``seconds`` before now, on the statements' clock."""
        return self._build("run_prune_cutoff", lambda found: found[0]["cutoff"], seconds=seconds)

    def get_archived(self, run_id: str) -> Statement[Run | None]:
        """One archived run by id."""
        return self._build("run_get_archived", first(rows.run), run_id=run_id)

    def get_by_key_archived(self, key: str) -> Statement[Run | None]:
        """The newest archived run with ``key``."""
        return self._build("run_get_by_key_archived", first(rows.run), key=key)

    def set_schedule(self, run_id: str, schedule: str, scheduled_at: datetime) -> Statement[None]:
        """Mark a run as started by ``schedule`` for the tick ``scheduled_at``."""
        return self._build(
            "run_set_schedule",
            lambda found: None,
            run_id=run_id,
            schedule=schedule,
            scheduled_at=scheduled_at,
        )

    def list(
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
        stmt = self._build(
            "run_list_archived" if archived else "run_list",
            lambda found: [rows.run(r) for r in found],
            **filters,
            cursor_at=None if cursor is None else cursor[0],
            cursor_id=None if cursor is None else cursor[1],
            limit=limit,
        )
        return replace(stmt, prepare=False)


def _pruned(found: list[Row]) -> tuple[int, list[str]]:
    """How many runs a prune batch took, and the object references they held."""
    if not found:
        return 0, []
    return int(found[0]["pruned"]), [str(ref) for ref in found[0]["refs"] or ()]
