"""Queues: concurrency limits declared in code and changed by operators.

A queue's settings live in the ``queues`` table, where every worker's claim
reads them. Code declares them with ``app.queue(...)``; a worker records the
settings its code states when it starts. An operator changes them at any time
with ``perdure queues set`` (``app.set_queue``); that change lasts until a
worker whose code states the same setting starts again.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from perdure.api.portal import Portal
from perdure.engine.arguments import INT32_MAX, validate_name
from perdure.errors import ConfigurationError, WorkflowDefinitionError
from perdure.store.statement import Statement
from perdure.store.statements import Statements
from perdure.store.store import AsyncStore
from perdure.types import QueueInfo

T = TypeVar("T")


class Unset(enum.Enum):
    """The type of :data:`UNSET`."""

    UNSET = "unset"


#: A setting the caller does not state: it keeps the value it has.
UNSET = Unset.UNSET

#: A queue limit: a number, None for no limit, or UNSET to leave it as it is.
Limit = int | None | Unset

SETTINGS = ("concurrency", "worker_concurrency")


def validate_limit(queue: str, setting: str, value: object) -> int | None:
    """Return ``value`` if it is a valid limit (an integer >= 1, or None), else raise."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= INT32_MAX:
        raise ConfigurationError(
            f"queue {queue!r}: {setting} must be an integer from 1 to {INT32_MAX}, or None "
            f"for no limit, not {value!r}"
        )
    return value


@dataclass(frozen=True)
class QueueDef:
    """A queue's settings as one caller states them; UNSET ones are left as they are.

    ``concurrency`` caps the tasks of the queue running at once across all
    workers; ``worker_concurrency`` caps them per worker. None means no limit.
    """

    name: str
    concurrency: Limit = UNSET
    worker_concurrency: Limit = UNSET

    def __post_init__(self) -> None:
        validate_name("queue", self.name)
        for setting in SETTINGS:
            value = getattr(self, setting)
            if value is not UNSET:
                validate_limit(self.name, setting, value)

    def limits(self) -> dict[str, int | None]:
        """The stated settings, by name."""
        stated: dict[str, int | None] = {}
        for setting in SETTINGS:
            value = getattr(self, setting)
            if not isinstance(value, Unset):
                stated[setting] = value
        return stated


class QueuesMixin:
    """The App's operations on queues: declare, list, set."""

    if TYPE_CHECKING:
        _portal: Portal
        q: Statements
        _queues: dict[str, QueueDef]

        async def _run(self, stmt: Statement[T]) -> T: ...

    def queue(
        self, name: str, *, concurrency: Limit = UNSET, worker_concurrency: Limit = UNSET
    ) -> QueueDef:
        """Declare the limits of queue ``name``; a worker records them when it starts.

        ``concurrency=2``: at most 2 tasks of the queue run at once across all
        workers. ``worker_concurrency=1``: at most 1 per worker. None states
        "no limit"; a setting left out keeps the value the database has (set
        by an operator, or by an earlier declaration). Declaring a queue twice
        with different settings is refused.
        """
        definition = QueueDef(name, concurrency, worker_concurrency)
        existing = self._queues.get(name)
        if existing is not None and existing != definition:
            raise WorkflowDefinitionError(
                f"queue {name!r} is declared twice with different settings: "
                f"{existing.limits()} and {definition.limits()}"
            )
        self._queues[name] = definition
        return definition

    def queues(self) -> list[QueueInfo]:
        """Every known queue with its limits and its tasks by state, by name."""
        return self._portal.call(self._run(self.q.queue_list()))

    def set_queue(
        self, name: str, *, concurrency: Limit = UNSET, worker_concurrency: Limit = UNSET
    ) -> QueueInfo:
        """Change the limits of queue ``name`` now, for every worker's next claim.

        What ``perdure queues set`` does. Pass None to remove a limit; a
        setting left out is kept. Tasks already running are not stopped when a
        limit is lowered. A worker whose code declares the same setting
        (``app.queue``) writes its value back when it starts.
        """
        definition = QueueDef(name, concurrency, worker_concurrency)
        if not definition.limits():
            raise ConfigurationError("set_queue needs concurrency, worker_concurrency or both")
        return self._portal.call(self._set_queue(definition))

    async def _set_queue(self, definition: QueueDef) -> QueueInfo:
        await self._run(self.q.queue_set(definition.name, definition.limits()))
        (info,) = await self._run(self.q.queue_list(definition.name))
        return info

    async def _register_queues(self, store: AsyncStore) -> None:
        """Record the declared settings; one statement per queue, so no lock order to keep."""
        for definition in self._queues.values():
            await store.execute(self.q.queue_set(definition.name, definition.limits()))
