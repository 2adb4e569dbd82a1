"""The statements on the workflow registry: ``sql/queries/workflows.sql``."""

from __future__ import annotations

from perdure.store import rows
from perdure.store.statement import Namespace, Row, Statement, first
from perdure.types import WorkflowInfo


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
