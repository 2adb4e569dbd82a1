"""``perdure migrate --plan``: what the pending migrations lock, and who is running."""

from __future__ import annotations

import click
import psycopg

from perdure.store import migration_plan
from perdure.store.migration_plan import Plan


def show_plan(url: str, schema: str) -> None:
    """Print the plan for ``schema`` at ``url``; nothing is applied."""
    with psycopg.connect(url, autocommit=True) as conn:
        found = migration_plan.plan(conn, schema)
    for line in render(found):
        click.echo(line)


def render(plan: Plan) -> list[str]:
    """The plan as lines of text."""
    count = len(plan.migrations)
    lines = [
        f"schema {plan.schema}: version {plan.current} -> {plan.target} "
        f"({count} pending migration{'s' if count != 1 else ''})"
    ]
    for migration in plan.migrations:
        lines.append(
            f"{migration.version:04d}_{migration.name}: one transaction, "
            f"holds its locks {_duration(migration.seconds)}"
        )
        for lock in migration.locks:
            work = "catalog only" if lock.seconds == 0 else f"~{_duration(lock.seconds)} of work"
            lines.append(f"  {lock.table:<28} {lock.mode:<22} blocks {lock.blocks}; {work}")
        if not migration.locks:
            lines.append("  no lock on an existing table")
    if plan.workers:
        bad = [w for w in plan.workers if w.compatible is False]
        unknown = [w for w in plan.workers if w.compatible is None]
        lines.append(
            f"live workers: {len(plan.workers)} ({len(plan.workers) - len(bad) - len(unknown)} "
            f"compatible with schema {plan.target}, {len(bad)} not, {len(unknown)} unknown)"
        )
        for worker in plan.workers:
            if worker.compatible is None:
                verdict = (
                    "unknown: its release does not record its schema version; it keeps "
                    "serving, but a restart on a newer schema is refused"
                )
            else:
                verdict = "compatible" if worker.compatible else "NOT compatible: upgrade it first"
            version = "?" if worker.schema_version is None else str(worker.schema_version)
            lines.append(
                f"  {worker.id:<36} schema {version} release {worker.release or '?'}: {verdict}"
            )
    else:
        lines.append("live workers: none")
    return lines


def _duration(seconds: float) -> str:
    if seconds < 0.5:
        return "for moments (catalog changes)"
    return f"about {seconds:.0f} s"
