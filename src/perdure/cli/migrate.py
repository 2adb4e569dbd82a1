"""``perdure migrate``: bring the database schema up to date ahead of a deploy."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from perdure.cli import render
from perdure.cli.migrate_plan import show_plan
from perdure.cli.options import json_option
from perdure.store import migrate as migrations
from perdure.store import privileges

if TYPE_CHECKING:
    from perdure.cli.state import CliState


@click.command()
@click.option(
    "--app",
    "target",
    metavar="APP",
    default=None,
    help="Also record the workflows of APP (module:attr) in the registry table.",
)
@click.option(
    "--grant-to",
    "roles",
    metavar="ROLE",
    multiple=True,
    help="Grant ROLE what a worker needs (row access, no DDL); repeatable. See docs/security.md.",
)
@click.option(
    "--grant-client",
    "clients",
    metavar="ROLE",
    multiple=True,
    help="Grant ROLE the public SQL functions only (start_run, send_signal, ...; no table "
    "access); repeatable. See docs/security.md.",
)
@click.option(
    "--grant-reader",
    "readers",
    metavar="ROLE",
    multiple=True,
    help="Grant ROLE read-only access to the tables (dashboards, analytics); repeatable.",
)
@click.option(
    "--print-grants",
    is_flag=True,
    help="Print the SQL that --grant-to, --grant-client and --grant-reader run, and do "
    "nothing else.",
)
@click.option(
    "--plan",
    is_flag=True,
    help="Print what each pending migration locks and for how long, and whether the live "
    "workers run on the new schema; apply nothing.",
)
@json_option("Print {schema, applied, version, registered, granted} as JSON.")
@click.pass_obj
def migrate(
    state: CliState,
    target: str | None,
    roles: tuple[str, ...],
    clients: tuple[str, ...],
    readers: tuple[str, ...],
    print_grants: bool,
    plan: bool,
    as_json: bool,
) -> None:
    """Apply the schema migrations this version of perdure ships (applying twice is a no-op).

    With --app, the application's workflow definitions are also recorded, so
    runs of them can be started (and listed) before any of its workers is up.
    With --grant-to ROLE, ROLE (an existing role) gets exactly what a worker
    needs: it can run workers (`perdure worker --no-migrate`), start and signal
    runs, but not create, alter or drop anything. With --grant-client ROLE, ROLE
    may only call the public SQL functions (docs/any-language.md); with
    --grant-reader ROLE, only read the tables. Run this as the schema's owner.
    With --plan, nothing is applied (docs/deploying.md: rolling deploys).
    """
    if as_json and (plan or print_grants):
        raise click.UsageError(
            "--json reports applied migrations: not with --plan or --print-grants"
        )
    if plan:
        app = state.app()
        show_plan(app.session_url, app.schema)
        return
    grants = [
        *(("worker", role) for role in roles),
        *(("client", role) for role in clients),
        *(("reader", role) for role in readers),
    ]
    if print_grants:
        if not grants:
            raise click.UsageError(
                "--print-grants needs --grant-to, --grant-client or --grant-reader ROLE"
            )
        schema = state.app().schema
        for kind, role in grants:
            click.echo(privileges.grant_script(schema, role, kind), nl=False)
        return
    say = (lambda line: None) if as_json else click.echo
    with state.app(target) as app:
        names = {m.version: m.name for m in migrations.available()}
        applied = migrations.migrate(app.session_url, app.schema)
        for version in applied:
            say(f"schema {app.schema}: applied migration {version:04d}_{names[version]}")
        if not applied:
            say(f"schema {app.schema} is up to date (version {max(names, default=0)})")
        registered: list[str] = []
        if target is not None:
            app.register()
            registered = [f"{n}@{v}" for n, v in sorted(app.registry.all())]
            say(f"registered the workflows of {target}: {', '.join(registered) or 'none'}")
        for kind, role in grants:
            privileges.grant(app.session_url, app.schema, role, kind)
            say(f"schema {app.schema}: granted {kind} privileges to role {role}")
        if as_json:
            render.echo_json(
                {
                    "schema": app.schema,
                    "applied": [f"{v:04d}_{names[v]}" for v in applied],
                    "version": max(names, default=0),
                    "registered": registered,
                    "granted": [{"kind": kind, "role": role} for kind, role in grants],
                }
            )
