"""The statements on tasks: ``sql/queries/tasks.sql``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from perdure.store import rows
from perdure.store.rows import ClaimedTask, Fence
from perdure.store.statement import Namespace, Row, Statement, all_rows, count, sparse
from perdure.store.writes import Release


class TaskStatements(Namespace):
    """The statements on tasks: ``statements.tasks``."""

    def claim(
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
        transaction locked (``statements.queues.lock``); any other queue with a global
        limit gets no task. With ``throttled``, ``queues`` are queues with a
        partition or rate limit, all locked, and the claim is
        ``task_claim_throttled``.
        """
        return self._build(
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

    def next_due(
        self, worker_id: str, queues: Sequence[str], names: Sequence[str], versions: Sequence[int]
    ) -> Statement[float | None]:
        """Seconds until the next ready task this worker may claim is due, or None."""
        return self._build(
            "task_next_due",
            lambda found: found[0]["seconds"] if found else None,
            worker_id=worker_id,
            queues=list(queues),
            names=list(names),
            versions=list(versions),
        )

    def waiting_summary(self, queues: Sequence[str]) -> Statement[tuple[int, datetime | None]]:
        """(tasks waiting for a future time, the earliest of those times)."""
        return self._build(
            "task_waiting_summary",
            lambda found: (int(found[0]["waiting"]), found[0]["next_wake"]),
            queues=list(queues),
        )

    def heartbeat(
        self, worker_id: str, task_ids: Sequence[int], lease_seconds: float
    ) -> Statement[set[int]]:
        """Extend the leases of ``task_ids`` this worker holds; the ids taken away from
        it (rows that exist but it no longer holds; a row gone was ended)."""
        return self._build(
            "task_heartbeat",
            lambda found: {int(r["id"]) for r in found},
            worker_id=worker_id,
            task_ids=list(task_ids),
            lease_seconds=lease_seconds,
        )

    def release(self, releases: Sequence[Release]) -> Statement[list[bool]]:
        """Give held tasks back, each fenced on its own, in one statement; whether each
        was released (False: its lease is gone), in order."""
        return self._build(
            "task_release",
            lambda found: [bool(r["changed"]) for r in found],
            task_ids=[r.fence.task_id for r in releases],
            worker_ids=[r.fence.worker_id for r in releases],
            attempts=[r.fence.attempt for r in releases],
            delays=[r.delay_seconds for r in releases],
            failed=[r.failed for r in releases],
            paused=[r.paused for r in releases],
            events=[r.event for r in releases],
            details=sparse(self._build.seal_each(r.detail_json for r in releases)),
        )

    def release_unheld(self, worker_id: str, held: Sequence[int]) -> Statement[int]:
        """Give back the tasks claimed under ``worker_id`` other than ``held`` (claims
        whose answer was lost): due at once, no lapse or failure counted; how many."""
        return self._build(
            "task_recover_unheld", count("changed"), worker_id=worker_id, held=list(held)
        )

    def reap(self, *, limit: int) -> Statement[tuple[int, int]]:
        """Reap tasks whose lease lapsed; (claimable again, reaped for good at their
        workflow's ``max_lapses``: a step task fails its step, a run's own task hands its
        run on to compensate, or fails it when it was compensating already)."""
        return self._build(
            "task_reap",
            lambda found: (
                (int(found[0]["requeued"]), int(found[0]["for_good"])) if found else (0, 0)
            ),
            limit=limit,
        )

    def settle(self, fence: Fence) -> Statement[str | None]:
        """Let go of a held task whose run stopped running; the run's status."""
        return self._build(
            "task_settle",
            lambda found: found[0]["run_status"] if found else None,
            **fence.params(),
        )

    def lock_fenced(self, fence: Fence) -> Statement[bool]:
        """Lock a held task row for a transaction step; False if the lease is gone."""
        return self._build("task_lock_fenced", lambda found: bool(found), **fence.params())

    def finish(self, fence: Fence) -> Statement[bool]:
        """Delete a held task whose work is done (fenced); False if the lease is gone."""
        return self._build("task_finish", lambda found: bool(found), **fence.params())

    def next_due_throttled(
        self, queues: Sequence[str], names: Sequence[str], versions: Sequence[int]
    ) -> Statement[float | None]:
        """Seconds until a task of these throttled queues is due or a rate window moves."""
        return self._build(
            "task_next_due_throttled",
            lambda found: found[0]["seconds"] if found else None,
            queues=list(queues),
            names=list(names),
            versions=list(versions),
        )

    def list_claimed(self, limit: int = 1000) -> Statement[list[Row]]:
        """The tasks workers hold now, by worker, oldest claim first."""
        return self._build("task_list_claimed", all_rows, limit=limit)
