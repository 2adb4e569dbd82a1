"""How a worker claims tasks: the plain claim, or the claim under its queues' limits.

A queue with a global limit is claimed from only under its row lock
(``queue_lock`` then ``task_claim``, in one transaction), so that workers
claiming at once never exceed the limit together. When none of the served
queues has one, the claim is the plain single statement, pipelined with the
read of the claimed tasks' checkpoints: one round trip, one transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from perdure.engine.observer import Observer
from perdure.store.rows import ClaimedTask
from perdure.store.statement import Statement
from perdure.store.statements import Statements
from perdure.store.store import AsyncStore


class Claims:
    """One worker's claims: which of its queues are limited, and what is due next."""

    def __init__(
        self,
        statements: Statements,
        worker_id: str,
        queues: list[str],
        workflows: Sequence[tuple[str, int]],
        lease_seconds: float,
        observer: Observer,
    ) -> None:
        """Claims for ``worker_id`` from ``queues``, of the given (name, version) workflows."""
        self.statements = statements
        self.worker_id = worker_id
        self.queues = queues
        self.names = [name for name, _ in workflows]
        self.versions = [version for _, version in workflows]
        self.lease_seconds = lease_seconds
        self.observer = observer
        #: The served queues with a global concurrency limit, as the last claim
        #: under their locks found them; None when unknown. While it is empty,
        #: claims take the plain one-statement path.
        self.limited: list[str] | None = None
        #: Those of them with a partition or rate limit: claimed by
        #: task_claim_throttled, left out of task_next_due.
        self.throttled: list[str] = []
        self._throttled_first = False

    @property
    def unlimited(self) -> bool:
        """Whether the last claim found none of the served queues limited."""
        return self.limited == []

    def forget_limits(self) -> None:
        """Look at the queues' limits again at the next claim (they may have changed)."""
        self.limited = None

    def is_limited(self, queue: str) -> bool:
        """Whether ``queue`` had a global limit at the last claim."""
        return bool(self.limited) and queue in (self.limited or ())

    def _statement(
        self, locked: list[str], queues: list[str], limit: int, throttled: bool = False
    ) -> Statement[list[ClaimedTask]]:
        return self.statements.tasks.claim(
            worker_id=self.worker_id,
            queues=queues,
            names=self.names,
            versions=self.versions,
            limit=limit,
            lease_seconds=self.lease_seconds,
            locked=locked,
            throttled=throttled,
        )

    async def claim(self, store: AsyncStore, want: int) -> list[ClaimedTask]:
        """Claim up to ``want`` tasks, within the limits of their queues, with their checkpoints."""
        began = time.perf_counter()
        read = self.statements.steps.list_claimed_now(self.worker_id)
        if self.unlimited:
            found, steps = (
                await store.execute_batch([[self._statement([], self.queues, want), read]])
            )[0]
            self.observer.claimed(found, time.perf_counter() - began)
            return with_steps(found, steps)
        async with store.transaction() as conn:
            locks = await store.execute(self.statements.queues.lock(self.queues), conn)
            locked = [name for name, _ in locks]
            throttled = [name for name, is_throttled in locks if is_throttled]
            plain = [queue for queue in self.queues if queue not in throttled]
            # Throttled queues (partition or rate limits) have a claim of their
            # own; the others keep task_claim. The two take turns going first,
            # so that neither kind crowds the other out of a worker's batch.
            claims: list[Callable[[int], Statement[list[ClaimedTask]]]] = []
            if plain:
                claims.append(lambda limit: self._statement(locked, plain, limit))
            if throttled:
                claims.insert(
                    0 if self._throttled_first else len(claims),
                    lambda limit: self._statement(locked, throttled, limit, throttled=True),
                )
            self._throttled_first = not self._throttled_first
            claimed: list[ClaimedTask] = []
            for make in claims:
                if len(claimed) < want:
                    more = await store.execute(make(want - len(claimed)), conn)
                    claimed.extend(more)
            # Read after the claims, in their transaction: a later statement's
            # snapshot sees every checkpoint committed before the claim.
            steps = await store.execute(read, conn) if claimed else {}
        self.limited = locked
        self.throttled = throttled
        self.observer.claimed(claimed, time.perf_counter() - began)
        return with_steps(claimed, steps)

    async def next_due(self, store: AsyncStore) -> float | None:
        """Seconds until the next task this worker may claim is due (None: none known).

        Throttled queues answer separately, with only future moments: their
        due tasks may be held back by a limit, and must not make the worker spin.
        """
        plain = [queue for queue in self.queues if queue not in self.throttled]
        found: list[float] = []
        if plain:
            due = await store.execute(self.due(plain))
            if due is not None:
                found.append(due)
        if self.throttled:
            due = await store.execute(
                self.statements.tasks.next_due_throttled(self.throttled, self.names, self.versions)
            )
            if due is not None:
                found.append(due)
        return min(found) if found else None

    def due(self, queues: list[str] | None = None) -> Statement[float | None]:
        """The statement of ``next_due`` for ``queues`` (all served) without throttles."""
        return self.statements.tasks.next_due(
            self.worker_id, self.queues if queues is None else queues, self.names, self.versions
        )


def with_steps(claimed: list[ClaimedTask], steps: Mapping[int, Sequence[Any]]) -> list[ClaimedTask]:
    """The claimed tasks, each with the checkpoints read for it in the claim's round trip."""
    return [replace(t, steps=tuple(steps.get(t.fence.task_id, ()))) for t in claimed]
