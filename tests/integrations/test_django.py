"""Django, with the minimal project in tests/integrations/django_project on the suite's database.

Django runs in this process (its settings read once, so the project gets a
schema of its own for the session) and ``manage.py perdure_worker`` runs as a
real subprocess.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import perdure

PROJECT = Path(__file__).resolve().parent / "django_project"


def _with_search_path(url: str, schema: str) -> str:
    """``url`` with ``schema`` first on the search path, where Django's tables are."""
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"


@pytest.fixture(scope="module")
def django_schema(default_pg_url: str) -> Iterator[str]:
    """Set Django up on a schema of its own; perdure's tables share it."""
    import django
    from django.core.management import call_command

    schema = f"dj_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(default_pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    saved = {k: os.environ.get(k) for k in ("PERDURE_DATABASE_URL", "PERDURE_SCHEMA")}
    os.environ.update(
        PERDURE_DATABASE_URL=default_pg_url,
        PERDURE_SCHEMA=schema,
        DJANGO_SETTINGS_MODULE="proj.settings",
    )
    sys.path.insert(0, str(PROJECT))
    try:
        django.setup()
        call_command("migrate", run_syncdb=True, verbosity=0)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    from perdure.integrations.django import get_app

    app = get_app()
    # ORM code in ctx.transaction runs on perdure's connection: it must find
    # Django's tables, which this project keeps in its own schema.
    app.configure(url=_with_search_path(default_pg_url, schema), schema=schema)
    app.ensure_schema()
    yield schema
    from django.db import connections

    connections.close_all()
    app.close()
    with psycopg.connect(default_pg_url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def test_the_settings_name_the_app(django_schema: str) -> None:
    from django.test import override_settings
    from proj import workflows

    from perdure.integrations.django import get_app

    assert get_app() is workflows.app
    with (
        override_settings(PERDURE_APP="proj.workflows"),
        pytest.raises(perdure.ConfigurationError, match="module:attribute"),
    ):
        get_app()
    with (
        override_settings(PERDURE_APP="proj.workflows:mark_paid"),
        pytest.raises(perdure.ConfigurationError, match=r"not a perdure\.App"),
    ):
        get_app()


def test_a_run_started_in_an_atomic_block_exists_iff_the_block_commits(
    django_schema: str,
) -> None:
    from django.db import transaction
    from shop.models import Order

    from perdure.integrations.django import get_app, start

    app = get_app()
    with transaction.atomic():
        order = Order.objects.create(item="book")
        committed = start("pay", {"order": order.id}, key=f"pay:{order.id}")
        # Not yet committed: the App's own connections cannot see it.
        with pytest.raises(perdure.RunNotFound):
            app.get_run(committed.id)
    assert app.get_run(committed.id).status == perdure.RunStatus.QUEUED

    with pytest.raises(RuntimeError), transaction.atomic():
        order = Order.objects.create(item="lamp")
        rolled_back = start("pay", {"order": order.id})
        raise RuntimeError("the view failed")
    with pytest.raises(perdure.RunNotFound):
        app.get_run(rolled_back.id)
    assert not Order.objects.filter(item="lamp").exists()

    # Outside an atomic block Django autocommits: the run is there at once.
    at_once = start("pay", {"order": 0})
    assert app.get_run(at_once.id).status == perdure.RunStatus.QUEUED
    for handle in (committed, at_once):
        app.cancel(handle.id)  # leave nothing for the worker test to run


def test_manage_py_perdure_worker_runs_workflows_that_use_the_orm_in_a_transaction(
    django_schema: str, default_pg_url: str, tmp_path: Path
) -> None:
    from django.db import transaction
    from shop.models import Order

    from perdure.integrations.django import start

    with transaction.atomic():
        good = Order.objects.create(item="pen")
        paid = start("pay", {"order": good.id})
        bad = Order.objects.create(item="ink")
        declined = start("pay", {"order": bad.id, "fail": True})

    log = tmp_path / "worker.log"
    env = dict(
        os.environ,
        PERDURE_DATABASE_URL=_with_search_path(default_pg_url, django_schema),
        PERDURE_SCHEMA=django_schema,
        DJANGO_SETTINGS_MODULE="proj.settings",
    )
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "perdure_worker",
                "--concurrency",
                "2",
                "--poll-seconds",
                "0.2",
            ],
            cwd=PROJECT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        assert paid.result(timeout=60) == {"order": good.id, "payments": 1}
        with pytest.raises(perdure.RunFailed, match="declined"):
            declined.result(timeout=60)
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=30)
    output = log.read_text()
    assert code == 0, output
    assert "perdure worker started" in output and "perdure worker stopped" in output

    good.refresh_from_db()
    bad.refresh_from_db()
    assert (good.paid, good.payments) == (True, 1)
    # The failed step's ORM write was rolled back with it.
    assert (bad.paid, bad.payments) == (False, 0)
