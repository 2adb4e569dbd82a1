"""The state every ``perdure`` command shares: the global options, and loading a user's App."""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from perdure.api.app import App


@dataclass
class CliState:
    """The global options, shared by every subcommand through ``click.Context.obj``."""

    url: str | None
    schema: str | None
    #: A direct URL to the primary when ``url`` goes through a pooler.
    direct_url: str | None = None
    #: A hot standby's URL for read-only commands.
    read_url: str | None = None
    #: ``perdure --json``: every command prints JSON, as with its own ``--json``.
    json: bool = False
    #: ``perdure --as NAME``: who acts, for the audit record (default: the OS user).
    actor: str | None = None

    def __post_init__(self) -> None:
        """Refuse a malformed URL at once, with one line naming the option it came from."""
        from perdure.store.connect import check_url

        for url, source in (
            (self.url, "--database-url (or PERDURE_DATABASE_URL)"),
            (self.direct_url, "--direct-url (or PERDURE_DIRECT_DATABASE_URL)"),
            (self.read_url, "--read-url (or PERDURE_READ_DATABASE_URL)"),
        ):
            if url is not None:
                check_url(url, source)

    def app(self, target: str | None = None) -> App:
        """The App named by ``target`` (``module:attr``), or a bare App, configured.

        The bare App never creates or migrates a schema (``auto_migrate=False``):
        a command given a misspelt ``--schema`` is refused with the schemas the
        database has, instead of creating a new one. Only ``perdure migrate``
        and a worker (the App of ``target``, as it is configured) migrate.
        """
        from perdure.api.app import App

        if target is None:
            return App(self.url, schema=self.schema, direct_url=self.direct_url, auto_migrate=False)
        app = load_app(target)
        app.configure(url=self.url, schema=self.schema, direct_url=self.direct_url)
        return app

    def server(self, url: str | None = None, schema: str | None = None) -> App:
        """The App a server (``perdure dashboard``, ``perdure api``) runs on, on ``url``
        and ``schema`` or the global ones.

        It creates its schema on a database that has no perdure schema yet
        (started first, on a fresh database), but refuses a ``--schema``
        missing from a database that has others (a misspelt name) with the
        schemas it has, instead of serving an empty new one.
        """
        from perdure.api.app import App
        from perdure.store import migrate

        app = App(url or self.url, schema=schema or self.schema, direct_url=self.direct_url)
        try:
            migrate.check_may_create(app.session_url, app.schema)
        except BaseException:
            app.close()
            raise
        return app

    def reader(self) -> App:
        """An App for read-only commands: on ``--read-url`` when given, else as ``app``."""
        if self.read_url is None:
            return self.app()
        from perdure.api.app import App

        return App(self.read_url, schema=self.schema, auto_migrate=False)

    def lag(self) -> dict[str, object] | None:
        """With ``--read-url``: the standby's URL (no password) and its lag in seconds."""
        if self.read_url is None:
            return None
        from perdure.cli import render
        from perdure.store import replica

        lag = replica.replication_lag(self.read_url)
        return {"url": render.safe_url(self.read_url), "lag_seconds": lag}

    def note_lag(self) -> None:
        """With ``--read-url``, say on stderr how far the standby lags behind the primary."""
        found = self.lag()
        if found is None:
            return
        from perdure.cli import render

        lag = found["lag_seconds"]
        where = "not a standby" if lag is None else f"{lag:.1f} s behind the primary"
        render.err_console().print(
            f"read from {found['url']}: {where}", style="dim", soft_wrap=True
        )


def load_app(target: str) -> App:
    """Import ``module:attr`` (``attr`` defaults to ``app``) and return the App there."""
    from perdure.api.app import App

    module_name, _, attr = target.partition(":")
    if not module_name:
        raise click.BadParameter(f"{target!r} is not of the form module:app", param_hint="APP")
    if os.getcwd() not in sys.path:
        # Like `python -m`, find the user's module in the current folder.
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}", param_hint="APP") from exc
    found = getattr(module, attr or "app", None)
    if not isinstance(found, App):
        raise click.BadParameter(
            f"{module_name}:{attr or 'app'} is not a perdure.App", param_hint="APP"
        )
    return found


def checked_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback for a command's own URL option: a malformed URL is one line."""
    from perdure.errors import ConfigurationError
    from perdure.store.connect import check_url

    if value is None:
        return None
    try:
        return check_url(value, f"--{(param.name or 'url').replace('_', '-')}")
    except ConfigurationError as exc:
        raise click.ClickException(f"ConfigurationError: {exc}") from None
