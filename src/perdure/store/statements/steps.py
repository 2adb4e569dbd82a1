"""The statements on step checkpoints, parallel and graph steps: ``sql/queries/steps.sql``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import datetime

from perdure.store import rows
from perdure.store.rows import ClaimedStepTask, Fence, Fenced, StepTaskCompletion
from perdure.store.statement import Namespace, Row, Statement, count, pair
from perdure.store.writes import Checkpoint
from perdure.types import Step


class StepStatements(Namespace):
    """The statements on step checkpoints, parallel and graph steps: ``statements.steps``."""

    def list_claimed_now(self, worker_id: str) -> Statement[dict[int, list[Step]]]:
        """The checkpoints of the tasks ``worker_id`` claimed in this transaction, by task id."""

        def decode(found: list[Row]) -> dict[int, list[Step]]:
            by_task: dict[int, list[Step]] = {}
            for r in found:
                by_task.setdefault(int(r["task_id"]), []).append(rows.step(r))
            return by_task

        built = self._build("step_list_claimed_now", decode, worker_id=worker_id)
        # Offloaded outputs stay references until the replay reaches them
        # (Execution.advance), or the workflow reads them (a map's results).
        lazily = self._build.payloads.lazily(("output",))
        return dataclasses.replace(built, decode=lambda found: decode(lazily(found)))

    def checkpoints(self, checkpoints: Sequence[Checkpoint]) -> Statement[list[Fenced]]:
        """Record steps' outcomes and extend their tasks' leases, each fenced on its own
        task, in one statement; one (leased, written, run status) per checkpoint, in order.

        A checkpoint of kind 'event' also publishes its output as event
        ``event_key``; one of kind 'stream' appends it to stream ``event_key``
        at ``stream_seq``. None may end its task (see ``finish_step_task``).
        """
        seal = self._build.seal
        rows = [
            {
                "task_id": c.fence.task_id,
                "worker_id": c.fence.worker_id,
                "attempt": c.fence.attempt,
                "lease_seconds": c.lease_seconds,
                "position": c.position,
                "name": c.name,
                "kind": c.kind,
                "status": c.status,
                "step_attempts": c.attempts,
                "output": seal(c.output_json),
                "error": seal(c.error_json),
                "started_at": c.started_at.isoformat(),
                "event_key": c.event_key,
                "stream_seq": c.stream_seq,
                "stream_closed": c.stream_closed,
            }
            for c in checkpoints
        ]
        return self._build("step_checkpoint", Fenced.decode_each, rows=json.dumps(rows))

    def write(self, checkpoint: Checkpoint) -> Statement[Fenced]:
        """The statement that records one checkpoint: a batch of one, or, for a parallel
        step's final checkpoint, ``finish_step_task``."""
        if checkpoint.ends_task:
            return self.finish_step_task(checkpoint)
        batch = self.checkpoints([checkpoint])
        return Statement(
            batch.name,
            batch.query,
            batch.params,
            _only,
            uploads=batch.uploads,
            payloads=batch.payloads,
        )

    def wait(
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
    ) -> Statement[Fenced]:
        """Park the run at a durable wait until ``wake_at`` (or now + ``seconds``)."""
        return self._build(
            "step_wait",
            Fenced.decode,
            wait_signal=wait_signal,
            position=position,
            name=name,
            kind=kind,
            waiting_for=waiting_for_json,
            wake_at=wake_at,
            seconds=seconds,
            **fence.params(),
        )

    def fanout(
        self,
        fence: Fence,
        *,
        positions: Sequence[int],
        names: Sequence[str],
        seconds: float,
        waiting_for_json: str,
        gather_start: int,
        head_start: float = 0.0,
        park: bool = True,
        lease_seconds: float = 0.0,
    ) -> Statement[Fenced]:
        """Spawn a gather's step tasks, due after ``head_start`` seconds, and park
        the run (or, not ``park``, keep its task and extend its lease by
        ``lease_seconds``); (leased, spawned)."""
        return self._build(
            "step_fanout",
            Fenced.decode,
            gather_start=gather_start,
            head_start=head_start,
            park=park,
            lease_seconds=lease_seconds,
            positions=list(positions),
            names=list(names),
            seconds=seconds,
            waiting_for=waiting_for_json,
            **fence.params(),
        )

    def finish_step_task(self, checkpoint: Checkpoint) -> Statement[Fenced]:
        """Checkpoint a step task and delete its task; (leased, written, run status).

        Run under the run's row lock: the last sibling wakes the run (at once
        when the checkpoint says ``wake``: gathers fail fast).
        """
        return self._build(
            "step_task_finish",
            Fenced.decode,
            position=checkpoint.position,
            name=checkpoint.name,
            kind=checkpoint.kind,
            status=checkpoint.status,
            attempts=checkpoint.attempts,
            output=self._build.seal(checkpoint.output_json),
            error=self._build.seal(checkpoint.error_json),
            started_at=checkpoint.started_at,
            event=checkpoint.event,
            wake=checkpoint.wake,
            **checkpoint.fence.params(),
        )

    def claim_step_tasks(
        self,
        run_id: str,
        worker_id: str,
        *,
        gather_start: int | None,
        after: int,
        before: int,
        limit: int,
        lease_seconds: float,
    ) -> Statement[list[ClaimedStepTask]]:
        """Claim up to ``limit`` ready step tasks of the gather at ``gather_start``
        (None: a graph's steps), at positions from ``after`` to before ``before``."""
        return self._build(
            "step_task_claim",
            ClaimedStepTask.decode,
            run_id=run_id,
            after=after,
            before=before,
            worker_id=worker_id,
            gather_start=gather_start,
            limit=limit,
            lease_seconds=lease_seconds,
        )

    def complete_step_tasks(
        self, run_id: str, worker_id: str, completed: Sequence[StepTaskCompletion]
    ) -> Statement[tuple[int, int]]:
        """Checkpoint many completed step tasks of one run and delete their tasks;
        (leased, written)."""
        return self._build(
            "step_task_complete",
            pair("leased", "written"),
            run_id=run_id,
            worker_id=worker_id,
            task_ids=[c.step.fence.task_id for c in completed],
            fence_attempts=[c.step.fence.attempt for c in completed],
            positions=[c.step.position for c in completed],
            names=[c.step.name for c in completed],
            attempts=[c.attempts for c in completed],
            outputs=self._build.seal_each(c.output_json for c in completed),
            started=[c.started_at for c in completed],
        )

    def schedule(
        self,
        run_id: str,
        positions: Sequence[int],
        names: Sequence[str],
        kinds: Sequence[str],
        head_start: float = 0.0,
    ) -> Statement[int]:
        """Make graph steps claimable, by other workers after ``head_start`` seconds;
        how many tasks were created."""
        return self._build(
            "step_schedule",
            count("spawned"),
            run_id=run_id,
            head_start=head_start,
            positions=list(positions),
            names=list(names),
            kinds=list(kinds),
        )

    def release(self, run_id: str) -> Statement[None]:
        """Make the run's step tasks still in their head start claimable by all now."""
        return self._build("step_release", lambda found: None, run_id=run_id)

    def record(
        self,
        run_id: str,
        *,
        position: int,
        name: str,
        kind: str,
        status: str,
        output_json: str | None = None,
        error_json: str | None = None,
    ) -> Statement[None]:
        """Record a final step row nobody executed (skipped, or failed by its condition)."""
        return self._build(
            "step_record",
            lambda found: None,
            run_id=run_id,
            position=position,
            name=name,
            kind=kind,
            status=status,
            output=self._build.seal(output_json),
            error=self._build.seal(error_json),
        )

    def gate_park(
        self, fence: Fence, *, position: int, name: str, signal: str, seconds: float
    ) -> Statement[Fenced]:
        """Park a graph step at its gate until signal ``signal``; (leased, wake time)."""
        return self._build(
            "step_gate_park",
            Fenced.decode,
            position=position,
            name=name,
            signal=signal,
            seconds=seconds,
            **fence.params(),
        )

    def list_archived(self, run_id: str) -> Statement[list[Step]]:
        """The checkpoints of an archived run, in position order."""
        return self._build(
            "step_list_archived", lambda found: [rows.step(r) for r in found], run_id=run_id
        )

    def list_at(self, run_id: str, positions: Sequence[int]) -> Statement[list[Step]]:
        """The checkpoints of a run at ``positions``, in position order."""
        return self._build(
            "step_list_at",
            lambda found: [rows.step(r) for r in found],
            run_id=run_id,
            positions=sorted(set(positions)),
        )

    def list(self, run_id: str) -> Statement[list[Step]]:
        """The checkpoints of a run in position order."""
        return self._build("step_list", lambda found: [rows.step(r) for r in found], run_id=run_id)


def _only(found: list[Row]) -> Fenced:
    """The one answer of a batch of one."""
    (answer,) = Fenced.decode_each(found)
    return answer
