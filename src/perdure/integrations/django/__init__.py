"""Django: the settings name the App, runs start in Django's transaction, workflows use the ORM.

Install with ``pip install "perdure[django]"`` and add ``"perdure.integrations.django"``
to ``INSTALLED_APPS``; see docs/integrations/django.md.

- ``PERDURE_APP = "myproj.workflows:app"`` in the settings names the App;
  ``get_app`` returns it and ``manage.py perdure_worker`` runs its worker.
- ``start`` writes the run on Django's own psycopg 3 connection: inside
  ``transaction.atomic()`` the run exists if and only if that transaction commits.
- ``orm`` lends the connection perdure gives a ``ctx.transaction`` step to
  Django's ORM, so the ORM's writes commit with the step's checkpoint.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.conf import settings
from django.db import connections
from psycopg.pq import Format

import perdure

_apps: dict[str, perdure.App] = {}
#: The type oid of timestamptz.
TIMESTAMPTZ_OID = 1184


def get_app() -> perdure.App:
    """The App that ``settings.PERDURE_APP`` (``"module:attribute"``) names."""
    target = getattr(settings, "PERDURE_APP", None)
    if not isinstance(target, str) or ":" not in target:
        raise perdure.ConfigurationError(
            f'settings.PERDURE_APP must name an App as "module:attribute", not {target!r}'
        )
    if target not in _apps:
        module_name, _, attribute = target.partition(":")
        app = getattr(importlib.import_module(module_name), attribute, None)
        if not isinstance(app, perdure.App):
            raise perdure.ConfigurationError(
                f"settings.PERDURE_APP names {target!r}, which is not a perdure.App"
            )
        _apps[target] = app
    return _apps[target]


def connection(using: str = "default") -> psycopg.Connection[Any]:
    """Django's psycopg 3 connection for database ``using`` (opened if need be)."""
    wrapper = connections[using]
    wrapper.ensure_connection()
    raw = wrapper.connection
    if not isinstance(raw, psycopg.Connection):
        raise perdure.ConfigurationError(
            f"database {using!r} is not PostgreSQL through psycopg 3 "
            f"(its connection is a {type(raw).__name__})"
        )
    return raw


def start(
    workflow: str | Callable[..., Any],
    input: Any = None,
    *,
    using: str = "default",
    **options: Any,
) -> perdure.RunHandle:
    """Start a run on Django's connection: in ``transaction.atomic()``, it commits with it.

    ``options`` are those of ``App.start``. Outside an atomic block Django's
    connection is in autocommit, and the run is written at once. The database
    ``using`` must be the one perdure's schema lives in.
    """
    return get_app().start(workflow, input, conn=connection(using), **options)


@contextmanager
def orm(conn: psycopg.Connection[Any], using: str = "default") -> Iterator[None]:
    """Let Django's ORM (database ``using``) run on ``conn`` in this thread.

    For a plain ``def`` function run by ``ctx.transaction``::

        def pay(conn, order_id):
            with orm(conn):
                Order.objects.filter(id=order_id).update(paid=True)

        await ctx.transaction("pay", pay, order_id)

    perdure opened the transaction on ``conn`` and commits it with the step's
    checkpoint; for that long Django sees it as an outer ``atomic`` block it
    does not own (its own ``atomic()`` inside makes savepoints, and nothing
    commits early). Django's connection for this thread is restored after.
    """
    wrapper = connections[using]
    saved = {
        name: getattr(wrapper, name)
        for name in (
            "connection",
            "autocommit",
            "in_atomic_block",
            "savepoint_ids",
            "commit_on_exit",
            "needs_rollback",
            "closed_in_transaction",
        )
    }
    saved_factories = (conn.cursor_factory, conn.row_factory)
    saved_loaders = _timestamptz_loaders(conn)
    # Django's cursors read tuples, through the cursor class its backend uses,
    # and expect its time zone's loader for timestamptz on the connection.
    conn.cursor_factory = _django_cursor_class()
    _register_tzloader(wrapper.timezone, conn)
    conn.row_factory = psycopg.rows.tuple_row
    wrapper.connection = conn
    wrapper.autocommit = False
    wrapper.in_atomic_block = True
    wrapper.savepoint_ids = []
    wrapper.commit_on_exit = False
    wrapper.needs_rollback = False
    wrapper.closed_in_transaction = False
    try:
        yield
    finally:
        # An error inside leaves the transaction for perdure to roll back
        # with the step; Django's own state for this thread comes back as it was.
        for name, value in saved.items():
            setattr(wrapper, name, value)
        conn.cursor_factory, conn.row_factory = saved_factories
        for loader in saved_loaders:
            conn.adapters.register_loader(TIMESTAMPTZ_OID, loader)


def _timestamptz_loaders(conn: psycopg.Connection[Any]) -> list[type[Any]]:
    """The connection's loaders of timestamptz, text and binary, to put back after."""
    loaders = (
        conn.adapters.get_loader(TIMESTAMPTZ_OID, fmt) for fmt in (Format.TEXT, Format.BINARY)
    )
    return [loader for loader in loaders if loader is not None]


def _register_tzloader(timezone: Any, conn: psycopg.Connection[Any]) -> None:
    from django.db.backends.postgresql.psycopg_any import register_tzloader

    register_tzloader(timezone, conn)


def _django_cursor_class() -> Any:
    """The psycopg cursor class Django's PostgreSQL backend makes its cursors from."""
    from django.db.backends.postgresql import base

    return getattr(base, "Cursor", psycopg.ClientCursor)
