"""The audit record: who did what, through the dashboard, the HTTP API or the CLI.

``app.record_audit(...)`` appends one entry (the dashboard, the API and the
CLI call it for every state-changing action, refused ones included);
``app.audit_log(...)`` lists them, newest first. The table is append-only
for perdure's roles (migration 0019); retention deletes old entries when it
runs as the schema's owner (``perdure prune``, workers' retention).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from perdure.api.core import Core
from perdure.engine import arguments
from perdure.errors import ConfigurationError
from perdure.types import AuditEntry

#: How an actor was known.
VIAS = ("token", "proxy", "cli", "open")
#: Where an action came from.
SOURCES = ("dashboard", "api", "cli")
#: How an action ended.
OUTCOMES = ("ok", "refused", "error")
#: The longest text kept in an entry's detail, per value.
MAX_DETAIL_TEXT = 500


def _choice(name: str, value: object, allowed: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ConfigurationError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
    return value


def _text(name: str, value: object, limit: int, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ConfigurationError(f"{name} must be non-empty text without NUL, not {value!r}")
    return value[:limit]


def _detail(detail: dict[str, Any] | None) -> dict[str, Any] | None:
    """Names and messages only, each cut to ``MAX_DETAIL_TEXT`` characters."""
    if detail is None:
        return None
    if not isinstance(detail, dict):
        raise ConfigurationError(f"detail must be a dict of names, not {detail!r:.100}")
    kept: dict[str, Any] = {}
    for key, value in list(detail.items())[:20]:
        if value is None or isinstance(value, bool | int | float):
            kept[str(key)[:80]] = value
        else:
            kept[str(key)[:80]] = str(value).replace("\x00", "")[:MAX_DETAIL_TEXT]
    return kept


async def record_audit(
    core: Core,
    *,
    actor: str,
    via: str,
    source: str,
    action: str,
    outcome: str,
    role: str | None = None,
    address: str | None = None,
    runs: Sequence[str] = (),
    detail: dict[str, Any] | None = None,
) -> int:
    """Append one entry to the audit record; its id.

    ``actor`` is who (a token's name, a proxy's user, an OS user), ``via``
    how they were known (token, proxy, cli, open), ``source`` where the
    action came from (dashboard, api, cli), ``address`` the client's
    address or host, ``action`` what (cancel, signal, ...), ``runs`` the
    run ids or keys it named, ``outcome`` ok, refused or error. ``detail``
    holds names and messages, never payloads: values are kept as short text.
    """
    if isinstance(runs, str) or not all(isinstance(r, str) for r in runs):
        raise ConfigurationError(f"runs must be a sequence of run ids or keys, not {runs!r:.100}")
    return await core.run(
        core.statements.audits.write(
            actor=str(_text("actor", actor, 200)),
            via=_choice("via", via, VIAS),
            role=_text("role", role, 40, optional=True),
            source=_choice("source", source, SOURCES),
            address=_text("address", address, 200, optional=True),
            action=str(_text("action", action, 80)),
            runs=[r[:200] for r in list(runs)[:1000]],
            outcome=_choice("outcome", outcome, OUTCOMES),
            detail=_detail(detail),
        )
    )


async def audit_log(
    core: Core,
    *,
    actor: str | None = None,
    action: str | None = None,
    run: str | None = None,
    outcome: str | None = None,
    since: datetime | None = None,
    before_id: int | None = None,
    limit: int = 50,
) -> list[AuditEntry]:
    """The audit record, newest first, filtered by the criteria given.

    ``run`` matches entries that named that run id or key; ``since`` is a
    timezone-aware time; ``before_id`` pages on (the last entry's id).
    """
    if since is not None and (not isinstance(since, datetime) or since.tzinfo is None):
        raise ConfigurationError(f"since must be a timezone-aware datetime, not {since!r}")
    if outcome is not None:
        _choice("outcome", outcome, OUTCOMES)
    for name, value in (("actor", actor), ("action", action), ("run", run)):
        _text(name, value, 200, optional=True)
    return await core.read(
        core.statements.audits.list(
            actor=actor,
            action=action,
            run=run,
            outcome=outcome,
            since=since,
            before_id=None
            if before_id is None
            else arguments.integer("before_id", before_id, minimum=1, maximum=2**63 - 1),
            limit=arguments.integer("limit", limit, minimum=1, maximum=10_000),
        )
    )
