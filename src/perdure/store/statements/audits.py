"""The statements on the audit record of who did what: ``sql/queries/audits.sql``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from perdure.store import rows
from perdure.store.statement import Namespace, Statement
from perdure.types import AuditEntry


class AuditStatements(Namespace):
    """The statements on the audit record: ``statements.audits``."""

    def write(
        self,
        *,
        actor: str,
        via: str,
        role: str | None,
        source: str,
        address: str | None,
        action: str,
        runs: Sequence[str],
        outcome: str,
        detail: dict[str, Any] | None,
    ) -> Statement[int]:
        """Append one entry; its id."""
        return self._build(
            "audit_write",
            lambda found: int(found[0]["id"]),
            actor=actor,
            via=via,
            role=role,
            source=source,
            address=address,
            action=action,
            runs=list(runs),
            outcome=outcome,
            detail=None if detail is None else json.dumps(detail),
        )

    def list(
        self,
        *,
        actor: str | None = None,
        action: str | None = None,
        run: str | None = None,
        outcome: str | None = None,
        since: datetime | None = None,
        before_id: int | None = None,
        limit: int = 50,
    ) -> Statement[list[AuditEntry]]:
        """The newest entries first, filtered by the criteria that are not None."""
        return self._build(
            "audit_list",
            lambda found: [rows.audit_entry(r) for r in found],
            actor=actor,
            action=action,
            run=run,
            outcome=outcome,
            since=since,
            before_id=before_id,
            limit=limit,
        )

    def prune(self, before: datetime) -> Statement[int | None]:
        """Delete the entries older than ``before`` (the owner only: None for other roles)."""
        return self._build(
            "audit_prune",
            lambda found: (
                None if not found or found[0]["deleted"] is None else int(found[0]["deleted"])
            ),
            before=before,
        )
