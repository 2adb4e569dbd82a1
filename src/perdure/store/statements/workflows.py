"""The statements on the workflow registry: ``sql/queries/workflows.sql``."""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from perdure.store import rows
from perdure.store.statement import Namespace, Row, Statement, first
from perdure.types import StrandedVersion, WorkflowInfo


class WorkflowStatements(Namespace):
    """The statements on the workflow registry: ``statements.workflows``."""

    def upsert(
        self,
        *,
        name: str,
        version: int,
        queue: str,
        kind: str,
        definition_json: str,
        fingerprint: str | None,
        max_lapses: int = 5,
    ) -> Statement[None]:
        """Record a workflow definition in the registry."""
        return self._build(
            "workflow_upsert",
            lambda found: None,
            name=name,
            version=version,
            queue=queue,
            kind=kind,
            definition=definition_json,
            fingerprint=fingerprint,
            max_lapses=max_lapses,
        )

    def lookup(self, name: str, version: int | None) -> Statement[Row | None]:
        """A registered workflow version (the newest when ``version`` is None)."""
        return self._build("workflow_lookup", first(dict), name=name, version=version)

    def list_registered(self) -> Statement[list[WorkflowInfo]]:
        """Every registered workflow version with its definition (counts left empty)."""
        return self._build(
            "workflow_list_registered", lambda found: [rows.workflow(r) for r in found]
        )

    def list(self, stale_seconds: float = 60.0, cap: int = 10_000) -> Statement[list[WorkflowInfo]]:
        """Every registered workflow version with run counts and its live workers.

        A worker is live while its status is running and its last heartbeat
        is at most ``stale_seconds`` old. The counts are those of each
        workflow's newest ``cap`` runs.
        """
        return self._build(
            "workflow_list",
            lambda found: [rows.workflow(r) for r in found],
            stale_seconds=stale_seconds,
            cap=cap,
        )

    def stranded(self, stale_seconds: float = 60.0) -> Statement[builtins.list[StrandedVersion]]:
        """The workflow versions whose unfinished runs no live worker can claim.

        A worker is live as for ``list``.
        """
        return self._build(
            "workflow_stranded",
            lambda found: [
                StrandedVersion(
                    workflow=r["workflow"],
                    version=int(r["version"]),
                    runs=int(r["runs"]),
                    queues=list(r["queues"] or []),
                    served=[int(v) for v in r["served"] or []],
                )
                for r in found
            ],
            stale_seconds=stale_seconds,
        )

    def move_runs(
        self,
        *,
        workflow: str,
        from_version: int,
        to_version: int,
        ids: Sequence[str],
        statuses: Sequence[str],
        dry_run: bool,
    ) -> Statement[builtins.list[Row]]:
        """Move those of ``ids`` that recorded nothing and no worker holds to ``to_version``.

        One row per given run of ``workflow`` at ``from_version`` in
        ``statuses``: ``id``, ``status``, ``recorded``, ``held``, ``movable``.
        """
        return self._build(
            "workflow_move_runs",
            lambda found: [dict(r) for r in found],
            workflow=workflow,
            from_version=from_version,
            to_version=to_version,
            ids=list(ids),
            statuses=list(statuses),
            dry_run=dry_run,
        )
