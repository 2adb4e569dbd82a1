"""RunFilter: which runs a listing or a bulk operation is about.

One object carries the criteria of ``app.list_runs``, ``app.count_runs``,
``app.cancel_runs`` and ``app.retry_runs`` (and the CLI and dashboard that call
them), so a criterion added here (with its SQL in the ``run_filter`` fragment
of the store's ``runs.sql``, which the queries of all of them share) reaches
every one of them. Each criterion left None
matches every run.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any

from perdure.api.start_options import tags_json
from perdure.engine import arguments
from perdure.errors import ConfigurationError
from perdure.types import RunStatus

#: The criteria that narrow runs (to a workflow, queue, worker, key, parent, tags or ids).
NARROWING = ("workflow", "version", "queue", "worker", "key_prefix", "parent", "tags", "runs")


@dataclass(frozen=True)
class RunFilter:
    """Criteria on runs; every one given must hold (None: any).

    ``status``: one run status. ``workflow``: a workflow name; ``version``
    one of its versions. ``queue``: the run's queue. ``worker``: the id of the
    worker that last claimed the run. ``key_prefix``: keys that start with it.
    ``since`` / ``before``: created at or after / strictly before (aware
    datetimes). ``parent``: the child runs of this run id. ``tags``: runs whose
    tags include every given pair. ``runs``: only these run ids (the CLI acts
    on exactly the runs its preview showed this way).
    """

    status: RunStatus | str | None = None
    workflow: str | None = None
    version: int | None = None
    queue: str | None = None
    worker: str | None = None
    key_prefix: str | None = None
    since: datetime | None = None
    before: datetime | None = None
    parent: str | None = None
    tags: dict[str, str] | None = None
    runs: tuple[str, ...] | None = None

    def checked(self) -> RunFilter:
        """This filter with each criterion validated and normalised; ConfigurationError if bad."""
        status: str | None = None
        if self.status is not None:
            try:
                status = RunStatus(self.status).value
            except ValueError:
                known = ", ".join(s.value for s in RunStatus)
                raise ConfigurationError(
                    f"status must be one of {known}, not {self.status!r}"
                ) from None
        if self.version is not None:
            arguments.integer("version", self.version, minimum=1)
        arguments.timestamp("since", self.since)
        arguments.timestamp("before", self.before)
        tags_json("tags", self.tags)
        parent = None if self.parent is None else _run_id("parent", self.parent)
        runs = None
        if self.runs is not None:
            if isinstance(self.runs, str) or not isinstance(self.runs, Iterable):
                raise ConfigurationError(f"runs must be a list of run ids, not {self.runs!r}")
            runs = tuple(_run_id("each of runs", ref) for ref in self.runs)
        return replace(
            self,
            status=status,
            workflow=arguments.optional_text("workflow", self.workflow, max_length=128),
            queue=arguments.optional_text("queue", self.queue, max_length=128),
            worker=arguments.optional_text("worker", self.worker, max_length=200),
            key_prefix=arguments.optional_text(
                "key_prefix", self.key_prefix, max_length=arguments.MAX_KEY_LENGTH
            ),
            parent=parent,
            runs=runs,
        )

    @property
    def narrowing(self) -> bool:
        """True when a criterion other than status and time is set (see ``app.count_runs``).

        Such a filter is counted among the newest matching runs: a count per
        status would walk a status's runs past every one that does not match.
        """
        return any(getattr(self, name) is not None for name in NARROWING)

    @property
    def is_empty(self) -> bool:
        """True when no criterion is set: the filter matches every run."""
        return all(getattr(self, f.name) is None for f in fields(self))

    def params(self) -> dict[str, Any]:
        """Every criterion but the status, as query parameters (``runs`` as ``ids``).

        What ``run_list``, ``run_select`` and the counts of ``count_runs`` share.
        """
        return {
            "workflow": self.workflow,
            "version": self.version,
            "queue": self.queue,
            "worker": self.worker,
            "key_prefix": self.key_prefix,
            "since": self.since,
            "before": self.before,
            "parent": self.parent,
            "tags": tags_json("tags", self.tags),
            "ids": None if self.runs is None else list(self.runs),
        }

    def listing(self) -> dict[str, Any]:
        """The query parameters of ``run_list``: ``params()`` and the status."""
        return {"status": None if self.status is None else str(self.status), **self.params()}

    def statuses(self, allowed: Iterable[RunStatus]) -> list[str]:
        """The statuses in ``allowed`` that this filter's ``status`` admits."""
        return [s.value for s in allowed if self.status is None or s.value == self.status]


def _run_id(what: str, value: object) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise ConfigurationError(f"{what} must be a run id, not {value!r}") from None
