"""``perdure migrate``: bring the database schema up to date ahead of a deploy."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from perdure.store import migrate as migrations

if TYPE_CHECKING:
    from perdure.cli.main import CliState


@click.command()
@click.option(
    "--app",
    "target",
    metavar="APP",
    default=None,
    help="Also record the workflows of APP (module:attr) in the registry table.",
)
@click.pass_obj
def migrate(state: CliState, target: str | None) -> None:
    """Apply the schema migrations this version of perdure ships (applying twice is a no-op).

    With --app, the application's workflow definitions are also recorded, so
    runs of them can be started (and listed) before any of its workers is up.
    """
    with state.app(target) as app:
        names = {m.version: m.name for m in migrations.available()}
        applied = migrations.migrate(app.url, app.schema)
        for version in applied:
            click.echo(f"schema {app.schema}: applied migration {version:04d}_{names[version]}")
        if not applied:
            click.echo(f"schema {app.schema} is up to date (version {max(names, default=0)})")
        if target is not None:
            app.register()
            defined = ", ".join(f"{n}@{v}" for n, v in sorted(app.registry.all()))
            click.echo(f"registered the workflows of {target}: {defined or 'none'}")
